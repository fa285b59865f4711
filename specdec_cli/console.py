"""Where output goes: generated text (or JSON) on stdout, everything else on stderr.

Rich already honours ``NO_COLOR`` and disables colour when stderr is not a terminal;
``ansi_ok`` applies the same rules to the raw escape codes ``--show-accept`` writes on stdout.
"""

from __future__ import annotations

import json
import os
import sys

from rich.console import Console

err = Console(stderr=True, highlight=False, soft_wrap=True)

DRAFT_COLOUR = "\x1b[36m"  # cyan: tokens the draft proposed and the target kept
RESET = "\x1b[0m"


def ansi_ok(stream) -> bool:
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def note(message: str) -> None:
    """An informational line on stderr."""
    err.print(f"[dim]{message}[/dim]" if err.is_terminal else message, markup=err.is_terminal)


def warn(message: str) -> None:
    err.print(f"warning: {message}", style="yellow", markup=False)


def error_line(message: str) -> None:
    err.print(f"error: {message}", style="bold red", markup=False)


def write_text(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def write_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def progress():
    """A progress bar with an ETA on stderr (drawn only on a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=err, transient=True,
    )

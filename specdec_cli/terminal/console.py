"""Where output goes: generated text (or JSON) on stdout, everything else on stderr.

Rich already honours ``NO_COLOR`` and disables colour when stderr is not a terminal;
``ansi_ok`` applies the same rules to the raw escape codes ``--show-accept`` writes on stdout.
While a command runs, stdout is ``guarded``: a write that fails (a full disk, a dead
terminal) becomes one ``OutputError``; a closed pipe stays a BrokenPipeError, which the CLI
ends quietly. A line on stderr that cannot be written is dropped: there is nowhere to say so.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager, suppress
from typing import NoReturn

from rich.console import Console

from ..errors import OutputError

err = Console(stderr=True, highlight=False, soft_wrap=True)

DRAFT_COLOUR = "\x1b[36m"  # cyan: tokens the draft proposed and the target kept
RESET = "\x1b[0m"


def ansi_ok(stream) -> bool:
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def _to_stderr(*args, **kwargs) -> None:
    with suppress(OSError):
        err.print(*args, **kwargs)


def note(message: str) -> None:
    """An informational line on stderr."""
    _to_stderr(f"[dim]{message}[/dim]" if err.is_terminal else message, markup=err.is_terminal)


def warn(message: str) -> None:
    _to_stderr(f"warning: {message}", style="yellow", markup=False)


def write_err(text: str) -> None:
    """Text on stderr as it is (no markup, no style): help shown for a call with no arguments."""
    with suppress(OSError):
        sys.stderr.write(text.rstrip("\n") + "\n")


def error_line(message: str) -> None:
    _to_stderr(f"error: {message}", style="bold red", markup=False)


def write_text(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def write_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def silence_stdout(stream=None) -> None:
    """Point stdout's descriptor at /dev/null, so that what is still buffered for a reader that
    went away (or a full disk) is dropped quietly at exit instead of raising again."""
    stream = stream or sys.stdout
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, stream.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass  # not a real descriptor (a test's capture): nothing is flushed at exit


class _GuardedStdout:
    """stdout with its write errors turned into one ``OutputError`` naming the stream."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def _fail(self, exc: OSError) -> NoReturn:
        silence_stdout(self._stream)
        raise OutputError(
            f"cannot write to stdout: {exc.strerror or exc}",
            hint="free some space, or send the output somewhere that can take it",
        ) from None

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            self._fail(exc)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            self._fail(exc)

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextmanager
def guarded_stdout():
    """Guard ``sys.stdout`` for the duration of a command."""
    original = sys.stdout
    sys.stdout = _GuardedStdout(original)
    try:
        yield
    finally:
        if isinstance(sys.stdout, _GuardedStdout):
            sys.stdout = original


def progress():
    """A progress bar with an ETA on stderr (drawn only on a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=err, transient=True,
    )


def human_bytes(n: float | None) -> str:
    """A byte count as people read it: 512 B, 1.50 GiB (None: "-")."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"

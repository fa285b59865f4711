"""What the measuring scripts share at their edges: a count argument, one-line errors, the --json
file, and the tables they print (a header, outputs compared, medians).

Scripts are run by users on their own machines (docs/measurements.md gives their commands), so they keep
the CLI's habits: bad input is one line on stderr and an exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

from specdec_cli.errors import SpecdecError


class Parser(argparse.ArgumentParser):
    """argparse, with a bad argument said in one line on stderr (exit 2), as the CLI says bad input,
    instead of argparse's usage lines before it; ``--help`` still prints them all."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}. See {self.prog} --help.\n")


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def demo_models(args: argparse.Namespace, *, draft: bool = True) -> None:
    """Fill ``args.target`` (and ``args.draft``) left unset with the pinned demo pair, fetched once
    as ``specdec demo`` does; paths as text, so they go into a --json file as they are."""
    if args.target and (not draft or args.draft):
        return
    from specdec_cli.realmodels import DEMO_DRAFT, DEMO_TARGET, ensure_model

    args.target = str(args.target or ensure_model(DEMO_TARGET))
    if draft:
        args.draft = str(args.draft or ensure_model(DEMO_DRAFT))


def one_line_errors(run: Callable[[], int]) -> int:
    """``run()``, with a model that will not load or a bad prompts file said in one line."""
    try:
        return run()
    except SpecdecError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return e.exit_code


def by_set(rows: list[dict]) -> Iterator[tuple[str, list[dict]]]:
    """(set name, its rows) for rows carrying a "set", in the order the sets first appear."""
    for name in dict.fromkeys(r["set"] for r in rows):
        yield name, [r for r in rows if r["set"] == name]


def write_json(path: str, data: dict) -> int:
    """Write ``data`` to ``path``; 0, or 1 with one line on stderr where it cannot be written."""
    try:
        Path(path).write_text(json.dumps(data, indent=1, default=str))  # a Path, a model's file
    except OSError as e:
        print(f"error: cannot write {path}: {e.strerror}. Pass --json a path in a folder that exists.",
              file=sys.stderr)
        return 1
    return 0


def print_header(hdr: str) -> None:
    """A table's column line and its rule, flushed so the rows that follow show as they come."""
    print(hdr)
    print("-" * len(hdr))
    sys.stdout.flush()


def same_text(a: str, b: str) -> str:
    """'same' when one output is a prefix of the other (native emits a few more tokens)."""
    k = min(len(a), len(b))
    for i in range(k):
        if a[i] != b[i]:
            return f"char {i}"
    return "same"


def median_or_nan(xs) -> float:
    """The median of the values that are not None; nan where there are none."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")

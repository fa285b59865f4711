"""Errors that reach the user as one line on stderr, with a meaningful exit code.

Everything the CLI can foresee (bad input, a missing file, an incompatible pair)
raises one of these; the CLI prints ``error: <message>`` and exits with ``exit_code``.
Anything else is a bug and is allowed to show a traceback.
"""

from __future__ import annotations

# Exit codes, documented in the README and docs/commands.md.
EXIT_OK = 0
EXIT_FAILURE = 1  # the request was valid but cannot be carried out (incompatible pair, over budget, ...)
EXIT_USAGE = 2  # the request itself is wrong (bad option, missing file, not a GGUF, ...)
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


class SpecdecError(Exception):
    """A foreseen failure: ``str(err)`` is the one-line message, ``hint`` says what to do."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def one_line(self) -> str:
        """Message and hint as one line, whatever line breaks a wrapped library error brought."""
        msg = " ".join(str(self).split()).rstrip(".")
        hint = " ".join(self.hint.split()) if self.hint else ""
        return f"{msg}. {hint}" if hint else f"{msg}."


class UsageError(SpecdecError):
    """The user asked for something malformed: an option value, a path, a file that is not a GGUF."""

    exit_code = EXIT_USAGE


class IncompatibleError(SpecdecError):
    """Target and draft cannot be paired (vocabulary, base model, method)."""

    exit_code = EXIT_FAILURE


class OutputError(SpecdecError):
    """A result could not be written (stdout on a full disk, an unwritable --json path)."""

    exit_code = EXIT_FAILURE

"""The ``specdec`` entry point: run the app, and turn every foreseen failure into one line.

Conventions every command follows: stdout carries only the result (text, a table, or JSON with
``--json``); notes, warnings and the summary go to stderr; foreseen failures print one
``error:`` line and exit non-zero (2 for bad input, 1 for a request that cannot be done,
128 + the signal when one ended the run).
"""

from __future__ import annotations

import sys

import typer

from ..errors import EXIT_USAGE, SpecdecError
from ..terminal import console, interrupts
from .app import _Escaped, app


def _click_class(name: str) -> type:
    """Click's exception classes, whether typer vendors click (0.2x) or depends on it."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


_ClickUsageError = _click_class("UsageError")
_ClickException = _click_class("ClickException")


def main(argv: list[str] | None = None) -> int:
    """Run the app, turning every foreseen failure into one line on stderr and an exit code."""
    args = sys.argv[1:] if argv is None else argv
    with interrupts.handled(), console.guarded_stdout():
        try:
            return _run_app(args)
        except BrokenPipeError:
            # the reader went away (`specdec run ... | head`): not an error worth a traceback
            console.silence_stdout()
            return 0


def _run_app(args: list[str]) -> int:
    try:
        code = app(args=args, prog_name="specdec", standalone_mode=False)
        return code if isinstance(code, int) else 0  # typer.Exit(n) comes back as n here
    except typer.Exit as exc:
        return exc.exit_code
    except _Escaped as exc:
        console.error_line("interrupted")
        return interrupts.exit_code(exc.interrupt)
    except typer.Abort:  # click's form of an end of input or a signal while it parsed
        console.error_line("interrupted")
        return interrupts.exit_code()
    except _ClickUsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # click 8.2's form of the help for no arguments
            console.write_err(exc.format_message())
            return EXIT_USAGE
        cmd = exc.ctx.command_path if exc.ctx else "specdec"
        message = exc.format_message().replace(": Value error, ", ": ")  # typer 0.2x's wording for a bad choice
        console.error_line(f"{message.rstrip('.')} (see `{cmd} --help`)")
        return EXIT_USAGE
    except _ClickException as exc:
        console.error_line(exc.format_message())
        return exc.exit_code
    except SpecdecError as exc:
        console.error_line(_with_flag_hint(exc).one_line())
        return exc.exit_code
    except KeyboardInterrupt as exc:
        console.error_line("interrupted")
        return interrupts.exit_code(exc)


# The library's hints say in words what would help; these name the flags that do it.
_FLAG_HINTS = {
    "PromptTooLong": "raise --ctx or shorten the prompt",
    "ContextNotCreated": "try a smaller --ctx or a quantized KV cache (--cache-type-k q8_0)",
    "ContextFull": "raise --ctx or lower --max-tokens",
}


def _with_flag_hint(exc: SpecdecError) -> SpecdecError:
    """``exc`` with its hint phrased in this CLI's flags, where the library left it in words."""
    hint = _FLAG_HINTS.get(type(exc).__name__)
    if hint is not None:
        exc.hint = hint
    return exc

"""Ctrl-C, SIGTERM and SIGHUP end a run the same way, at a point where Python can act on them.

Python runs signal handlers between bytecodes of the main thread. While llama.cpp runs
(a model load, a context, a pass) those bytecodes are often ctypes callbacks (the log, the
load progress), and an exception raised there is printed as "Exception ignored" and lost.
So around every native call the handler only records the signal: the load progress callback
then tells llama.cpp to stop, a long pass is aborted through llama.cpp's abort callback, and
``native()`` raises ``Interrupted`` as soon as the call returns. Outside native calls the
handler raises at once. ``Interrupted`` is a ``KeyboardInterrupt``, so every place that ends
a generation cleanly on Ctrl-C does the same for the other signals; the exit code is 128+signal.
"""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class Interrupted(KeyboardInterrupt):
    """A signal asked the run to end; ``exit_code`` is what shells expect (130 for Ctrl-C)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_native_depth = 0
_pending: int | None = None  # a signal recorded during a native call, not yet raised
_last: int | None = None  # the last signal received: the exit code of an interrupted run


def _handler(signum, frame) -> None:  # noqa: ARG001 - signature fixed by the signal module
    global _pending, _last
    _last = signum
    if _native_depth:
        _pending = signum
        return
    raise Interrupted(signum)


def pending() -> bool:
    """True once a signal arrived during a native call: callbacks use it to stop llama.cpp."""
    return _pending is not None


def raise_pending() -> None:
    global _pending
    if _pending is not None:
        signum, _pending = _pending, None
        raise Interrupted(signum)


@contextmanager
def native():
    """Wrap a call into llama.cpp: signals during it are deferred, then raised when it returns."""
    global _native_depth
    _native_depth += 1
    try:
        yield
    finally:
        _native_depth -= 1
    if not _native_depth:
        raise_pending()


def exit_code(exc: BaseException | None = None) -> int:
    """128 + the signal that ended the run (130 when it was a plain KeyboardInterrupt)."""
    if isinstance(exc, Interrupted):
        return exc.exit_code
    return 128 + (_last or signal.SIGINT)


def _unraisable(hook):
    """A safety net for a callback that runs outside ``native()``: an ``Interrupted`` that ctypes
    could not propagate is kept for the next native call to raise, not printed and lost."""

    def unraisable(info) -> None:
        global _pending
        if isinstance(info.exc_value, KeyboardInterrupt):
            _pending = getattr(info.exc_value, "signum", signal.SIGINT)
            return
        hook(info)

    return unraisable


@contextmanager
def handled():
    """Install the handlers for the duration of a command (the CLI's entry point), then restore."""
    global _pending, _last
    _pending = _last = None
    try:
        previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    hook, sys.unraisablehook = sys.unraisablehook, _unraisable(sys.unraisablehook)
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for s, h in previous.items():
            signal.signal(s, h)
        _pending = _last = None

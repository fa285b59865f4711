"""The engine's errors about context size, with the facts as attributes.

Their hints say in words what would help; naming the option that does it is the CLI's
business (the engine has no flags). This module imports nothing native, so the CLI can
check for these classes without loading llama.cpp.
"""

from __future__ import annotations

from ..errors import SpecdecError, UsageError


class ContextFull(SpecdecError):
    """The KV cache has no room for the next tokens: it holds ``n_ctx``; ``needed`` positions
    were asked for (None when llama.cpp did not say)."""

    def __init__(self, n_ctx: int, needed: int | None = None):
        super().__init__(f"the context of {n_ctx} tokens is full",
                         hint="a larger context, or fewer tokens to generate")
        self.n_ctx = n_ctx
        self.needed = needed


class PromptTooLong(UsageError):
    """The prompt's ``needed`` tokens leave no room in a context of ``n_ctx``."""

    def __init__(self, n_ctx: int, needed: int):
        super().__init__(f"the prompt is {needed} tokens but the context holds {n_ctx}",
                         hint="a larger context or a shorter prompt")
        self.n_ctx = n_ctx
        self.needed = needed


class ContextNotCreated(SpecdecError):
    """llama.cpp could not create a context of ``n_ctx`` tokens for ``model`` (a file name),
    most often for want of memory; ``detail`` is what its log said."""

    def __init__(self, model: str, n_ctx: int, detail: str):
        super().__init__(f"llama.cpp could not create a context for {model} (n_ctx {n_ctx}): {detail}",
                         hint="try a smaller context or a quantized KV cache (q8_0 keys)")
        self.model = model
        self.n_ctx = n_ctx
        self.detail = detail


def describe(exc: BaseException) -> str:
    """An exception as one line: its class and message (a fault's cause, for a log line or an error)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def fault_message(cause: str | None) -> str:
    """What a generation a fault ended alone says (``cause``: ``describe``'s line)."""
    return f"the generation stopped on an internal fault: {cause or 'unknown'}"


class GenerationFault(SpecdecError):
    """A fault inside the engine (a grammar's state, a drafter, the tokenizer, NaN logits) ended
    one generation: that one alone, the engine and every other sequence go on. ``cause`` is the
    exception; the text already given out stays given."""

    def __init__(self, cause: BaseException):
        super().__init__(fault_message(describe(cause)),
                         hint="this is a bug in specdec; --no-draft avoids the drafters if one is the cause")
        self.cause = cause

"""How a model family writes its tool calls, as data: the literal text around each call's name,
arguments and (for some families) id, what goes between two calls, and what opens and closes
the lot.

Every family llama.cpp and vLLM parse writes a call as literal markup around a function name
and a JSON object of arguments, so one description serves all of them, and one grammar
builder (``grammar.py``) and one parser (``parse.py``) read it: a family module
(``formats/``) holds only its markup, how to spot its template, and the quirks of its
history. Literal text is split at special tokens (``<tool_call>``, ``[TOOL_CALLS]``), so the
grammar can name such a marker by its token rather than spell it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lit:
    """Literal text the family writes as it is."""

    text: str


@dataclass(frozen=True)
class Slot:
    """A place the call fills: "name" (the function's), "args" (a JSON object) or "id"."""

    kind: str


NAME, ARGS, ID = Slot("name"), Slot("args"), Slot("id")
Part = Lit | Slot

NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True)
class CallSyntax:
    """``call``: one call's parts in order (one NAME, one ARGS after it; an ID the model writes
    is read past, the server gives its own). ``sep``: between two calls, None where the family
    writes one call per reply. ``open``/``close``: once around all the calls. ``text_before``:
    whether a reply may hold text before its calls (else it is a call or text, from its first
    character). ``id_regex``: what an ID holds."""

    call: tuple[Part, ...]
    sep: tuple[Lit, ...] | None = ()
    open: tuple[Lit, ...] = ()
    close: tuple[Lit, ...] = ()
    text_before: bool = True
    id_regex: str = "[A-Za-z0-9]{9}"

    def __post_init__(self) -> None:
        kinds = [p.kind for p in self.call if isinstance(p, Slot)]
        if kinds.count("name") != 1 or kinds.count("args") != 1 or kinds.index("name") > kinds.index("args"):
            raise ValueError("a call needs one name before one args slot")
        if not isinstance((self.open + self.call)[0], Lit):
            raise ValueError("calls must open with literal text (their trigger)")

    @property
    def trigger(self) -> str:
        """The text that starts the calls: what a reply's free text may not write by chance."""
        first = (self.open + self.call)[0]
        assert isinstance(first, Lit)  # checked in __post_init__
        return first.text

    @property
    def parallel(self) -> bool:
        return self.sep is not None

    def literals(self) -> list[str]:
        """Every literal text, for finding which of them are special tokens of a vocabulary."""
        parts = self.open + self.call + (self.sep or ()) + self.close
        return [p.text for p in parts if isinstance(p, Lit)]

"""The names a user can give a drafting method or a verify rule, each defined once.

The registry, the pairing check, the engine, export and the CLI all read these enums, so a
method added here is known everywhere, and Typer lists the choices in ``--help`` and refuses
any other at parse time.
"""

from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    """A string enum that prints as its value (in f-strings, JSON and messages alike)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(m.value for m in cls)


class Method(Choice):
    """How draft tokens are proposed (what a pairs.toml entry's ``method`` names)."""

    DRAFT = "draft"  # a smaller model with the target's vocabulary
    EAGLE3 = "eagle3"  # draft heads trained for one base model
    DFLASH = "dflash"
    DSPARK = "dspark"
    NGRAM = "ngram"  # no draft file: lookup in the text so far
    MTP = "mtp"  # no draft file: the target's own multi-token-prediction (nextn) layers

    @property
    def is_head(self) -> bool:
        """A draft trained against one base model's hidden states (EAGLE-3, DFlash, DSpark)."""
        return self in _HEADS

    @property
    def needs_draft_file(self) -> bool:
        return self not in (Method.NGRAM, Method.MTP)

    @classmethod
    def heads(cls) -> tuple[Method, ...]:
        return _HEADS

    @classmethod
    def with_draft_file(cls) -> tuple[Method, ...]:
        return tuple(m for m in cls if m.needs_draft_file)


_HEADS = (Method.EAGLE3, Method.DFLASH, Method.DSPARK)


# ``--method`` of ``run``: auto (chosen per step from the measured costs), or one method forced
RunMethod = Choice("RunMethod", {"AUTO": "auto", **{m.name: m.value for m in Method}})  # type: ignore[call-overload]  # Enum's functional API, which mypy does not model on a subclass


def forced_method(choice: str | None) -> Method | None:
    """The method a ``--method`` value forces; None for auto or unset."""
    return None if choice in (None, "auto") else Method(choice)


class VerifyMode(Choice):
    """``--verify``: the rule that keeps draft tokens at temperature > 0 (engine/verify/verifiers.py explains them)."""

    AUTO = "auto"
    MATCH = "match"
    EXACT = "exact"

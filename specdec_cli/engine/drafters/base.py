"""The interface every drafting method implements, shaped after llama.cpp's ``common_speculative_impl``.

The decode loop never asks which method it is driving. It calls:

- ``begin(prompt)``  once per generation, with every prompt token;
- ``process(tokens, pos0)`` after each target pass, with the tokens the target just evaluated
  (methods that read the target's hidden state hook in here; the others ignore it);
- ``draft(history, n_max)`` to propose up to ``n_max`` tokens that follow ``history``
  (the prompt, everything generated so far, and the last target token);
- ``accept(n_accepted)`` to learn how many proposals the target kept.

A drafter owns its own state (a draft context, an n-gram index, ...) and keeps it in step
with ``history`` itself, so the loop stays the same for every method.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class Drafter(ABC):
    #: registry/CLI method name: draft, ngram, eagle3, dflash, dspark
    method: str = ""

    def begin(self, prompt: list[int]) -> None:  # noqa: B027 - optional hook
        """A new generation starts from ``prompt``."""

    def process(self, tokens: list[int], pos0: int) -> None:  # noqa: B027 - optional hook
        """The target just evaluated ``tokens`` at positions ``pos0..``."""

    @abstractmethod
    def draft(self, history: list[int], n_max: int) -> list[int]:
        """Propose up to ``n_max`` tokens to follow ``history``; an empty list means no guess."""

    def accept(self, n_accepted: int) -> None:  # noqa: B027 - optional hook
        """The target kept the first ``n_accepted`` tokens of the last proposal."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free native resources."""

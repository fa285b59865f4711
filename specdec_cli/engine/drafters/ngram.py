"""Drafting without a draft model: prompt lookup over the text so far.

When the output repeats what is already there (an edited file, a rewritten document, a JSON
record shaped like the last one), the tokens that followed the previous occurrence of the
current n-gram are a good guess, and guessing costs nothing. Like llama.cpp's
``ngram-simple`` and ``ngram-map-k``, this looks for the most recent earlier occurrence of the
last ``n`` tokens (trying the longest ``n`` first) in the prompt and the output so far, and
proposes the tokens that followed it. An index from n-gram to its latest end position,
updated as the history grows, keeps each lookup O(1).
"""

from __future__ import annotations

from .base import Drafter


class NgramDrafter(Drafter):
    method = "ngram"

    def __init__(self, *, n_min: int = 2, n_max_match: int = 4, draft_min: int = 1):
        if not 1 <= n_min <= n_max_match:
            raise ValueError("need 1 <= n_min <= n_max_match")
        self.sizes = list(range(n_max_match, n_min - 1, -1))  # longest match first
        self.draft_min = draft_min
        self._index: dict[int, dict[tuple[int, ...], int]] = {}
        self._indexed = 0  # history positions already in the index

    def begin(self, prompt: list[int], sampler=None) -> None:  # noqa: ARG002 - greedy only
        self._index = {n: {} for n in self.sizes}
        self._indexed = 0

    def _extend(self, history: list[int], upto: int) -> None:
        """Index every n-gram that ends before position ``upto``."""
        for end in range(self._indexed + 1, upto + 1):
            for n in self.sizes:
                if end >= n:
                    self._index[n][tuple(history[end - n : end])] = end
        self._indexed = max(self._indexed, upto)

    def draft(self, history: list[int], n_max: int) -> list[int]:
        if not self._index:
            self.begin(history)
        # everything but the current suffix is indexed, so a hit is an *earlier* occurrence
        self._extend(history, len(history) - 1)
        out: list[int] = []
        for n in self.sizes:
            if len(history) < n:
                continue
            end = self._index[n].get(tuple(history[-n:]))
            if end is not None and end < len(history):
                out = history[end : end + n_max]
                break
        self._extend(history, len(history))
        return out if len(out) >= self.draft_min else []

"""Deciding which drafted tokens the target keeps, kept apart from the drafters (as vLLM does).

Each verifier looks at the target's logits for [last token, draft...] -- one row per
position, all from one batched pass -- and returns the tokens to emit: the accepted
prefix of the draft plus one token of the target's own. So every emitted token is one
the target chose at its position.

- ``GreedyVerifier`` (temperature 0): keep draft tokens while they equal the target's argmax.
- ``MatchVerifier`` (temperature > 0): sample the target at each position and keep the draft
  token only if the sample equals it ("sample-then-match", llama.cpp's rule). Every emitted
  token is a sample of the target's distribution, so the output distribution is the target's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Rows = Callable[[int], np.ndarray]  # row index -> logits of that batch position


class Verifier(ABC):
    @abstractmethod
    def verify(self, rows: Rows, draft: list[int]) -> list[int]:
        """Tokens to emit: the kept draft prefix plus the target's next token (never empty)."""


class GreedyVerifier(Verifier):
    def verify(self, rows: Rows, draft: list[int]) -> list[int]:
        out: list[int] = []
        for i, proposed in enumerate(draft):
            tok = int(rows(i).argmax())
            out.append(tok)
            if tok != proposed:
                return out
        out.append(int(rows(len(draft)).argmax()))
        return out


@dataclass
class SamplingParams:
    temp: float = 0.8
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1.0 = off
    seed: int | None = None


class Sampler:
    """Target sampling with llama.cpp's default order: top-k, then top-p, then temperature."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def distribution(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(candidate ids, probabilities) after the transforms."""
        p = self.params
        n = logits.shape[0]
        k = p.top_k if 0 < p.top_k < n else n
        if k < n:
            ids = np.argpartition(logits, -k)[-k:]
        else:
            ids = np.arange(n)
        vals = logits[ids].astype(np.float64)
        order = np.argsort(-vals, kind="stable")
        ids, vals = ids[order], vals[order]
        if p.top_p < 1.0:
            probs = np.exp(vals - vals[0])
            probs /= probs.sum()
            keep = int(np.searchsorted(np.cumsum(probs), p.top_p) + 1)
            ids, vals = ids[:keep], vals[:keep]
        scaled = (vals - vals[0]) / max(p.temp, 1e-6)
        probs = np.exp(scaled)
        probs /= probs.sum()
        return ids, probs

    def sample(self, logits: np.ndarray) -> int:
        ids, probs = self.distribution(logits)
        return int(ids[self.rng.choice(len(ids), p=probs)])


class MatchVerifier(Verifier):
    def __init__(self, sampler: Sampler):
        self.sampler = sampler

    def verify(self, rows: Rows, draft: list[int]) -> list[int]:
        out: list[int] = []
        for i, proposed in enumerate(draft):
            tok = self.sampler.sample(rows(i))
            out.append(tok)
            if tok != proposed:
                return out
        out.append(self.sampler.sample(rows(len(draft))))
        return out


def make_verifier(params: SamplingParams) -> Verifier:
    return GreedyVerifier() if params.temp <= 0 else MatchVerifier(Sampler(params))

"""Deciding which drafted tokens the target keeps, kept apart from the drafters (as vLLM does).

A drafter hands over a ``Proposal``: the drafted tokens and, when it *sampled* them, the
distribution q it sampled each one from (sparse: candidate ids and their probabilities after
the generation's top-k / top-p / temperature transforms). A greedy proposal carries no q.
Each verifier looks at the target's logits for [last token, draft...] -- one row per
position, all from one batched pass -- and returns the tokens to emit: the accepted prefix of
the draft plus one token of the target's own. So every emitted token is one the target chose
at its position.

- ``GreedyVerifier`` (temperature 0): keep draft tokens while they equal the target's argmax.
- ``MatchVerifier`` (``--verify match``): sample the target at each position and keep the draft
  token only if the sample equals it ("sample-then-match", llama.cpp's server rule). Every
  emitted token is a sample of the target's distribution p.
- ``ExactVerifier`` (``--verify exact``, the default at temperature > 0 for the draft-model
  method): the speculative sampling rule of Leviathan et al. and Chen et al. (2023). Draft
  token x, sampled from q, is kept with probability min(1, p(x)/q(x)); on a rejection the
  target's token is sampled from norm(max(0, p - q)); after a full accept a bonus token is
  sampled from p at the next position. The emitted token at each position is distributed
  exactly as p, and a draft that resembles the target is kept with probability
  sum_x min(p(x), q(x)) instead of sum_x p(x) q(x).

A greedy proposal is a point mass, q(x) = 1, and the exact rule still applies to it: keep x
with probability p(x), otherwise sample from p with x removed and renormalised. That is the
same distribution of outcomes as sample-then-match (which keeps x when a sample of p equals
it, probability p(x), and otherwise emits a sample of p that is not x), so for drafters that
only draft greedily the two modes differ only in how they spend random numbers.

The modes a generation asks for (``VERIFY_MODES``: ``GenOptions.verify``, ``--verify``) are
"exact", "match" and "auto": exact when the drafter samples its proposals
(``Drafter.sampled_proposals``: the draft-model method), match for drafters that only draft
greedily, where the two are the same rule in distribution. At temperature 0 every mode is
greedy: p is a point mass at the argmax, and both rules then keep a draft token exactly when
it is the argmax. This docstring is the one explanation of the rules; the rest of the code
refers here.

The target's p always comes from ``Sampler.distribution``, the very transforms plain sampling
uses, so "target alone" and "speculative" sample the same distribution. One ``Sampler`` (one
RNG, seeded from the generation's seed) serves the drafter and the verifier of a generation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...errors import UsageError
from ...models.methods import VerifyMode

Rows = Callable[[int], np.ndarray]  # row index -> logits of that batch position
Dist = tuple[np.ndarray, np.ndarray]  # (candidate ids, probabilities), ids distinct, probs sum to 1

#: What ``GenOptions.verify`` / ``--verify`` accept.
VERIFY_MODES = VerifyMode.values()


@dataclass
class Proposal:
    """What a drafter proposes for one target pass.

    ``tokens``: the drafted tokens, in order. ``q``: for a sampled proposal, the draft's
    distribution at each position, the one ``tokens[i]`` was drawn from (``q[i]`` is
    (candidate ids, probabilities) after the generation's transforms); ``None`` for a greedy
    proposal, which the exact rule treats as a point mass at each token.
    """

    tokens: list[int]
    q: list[Dist] | None = None
    subst: list[bool] | None = None  # which tokens a learned edit wrote (for the stats; verify ignores it)

    def __len__(self) -> int:
        return len(self.tokens)

    def truncated(self, n: int) -> Proposal:
        """The first ``n`` positions (a prefix of a sampled proposal is still a valid proposal)."""
        if len(self.tokens) <= n:
            return self
        return Proposal(self.tokens[:n], None if self.q is None else self.q[:n],
                        None if self.subst is None else self.subst[:n])

    def substituted(self, n_kept: int) -> int:
        """How many of the first ``n_kept`` tokens a learned edit wrote."""
        return sum(self.subst[:n_kept]) if self.subst else 0


class RowFault(RuntimeError):
    """A row of the target's logits offers nothing to choose: its scores are not numbers (NaN), or
    every token its mask allows scores -inf. The sequence it belongs to cannot go on; argmax or a
    draw would otherwise return an arbitrary token (the first NaN, or token 0)."""

    def __init__(self, row: int | None = None):
        at = f" at row {row}" if row is not None else ""
        super().__init__(f"the target's logits{at} give no token to choose (NaN, or nothing allowed)")
        self.row = row


def _checked_argmax(row: np.ndarray, i: int) -> int:
    tok = int(row.argmax())
    if not np.isfinite(row[tok]):
        raise RowFault(i)
    return tok


class Verifier(ABC):
    #: the rule's name, as ``Result.verify`` reports it: greedy, match or exact
    rule: str = ""

    @abstractmethod
    def verify(self, rows: Rows, proposal: Proposal) -> list[int]:
        """Tokens to emit: the kept draft prefix plus the target's next token (never empty)."""


class GreedyVerifier(Verifier):
    rule = "greedy"

    def verify(self, rows: Rows, proposal: Proposal) -> list[int]:
        draft = proposal.tokens
        out: list[int] = []
        for i, proposed in enumerate(draft):
            tok = _checked_argmax(rows(i), i)
            out.append(tok)
            if tok != proposed:
                return out
        out.append(_checked_argmax(rows(len(draft)), len(draft)))
        return out


@dataclass
class SamplingParams:
    temp: float = 0.8
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1.0 = off
    seed: int | None = None


def resolve_seed(seed: int | None) -> int:
    """The seed a generation uses: ``seed`` itself, or for none or a negative one (llama.cpp's
    "random"), a fresh random seed, drawn here so that it can be reported and reused."""
    import random

    return seed if seed is not None and seed >= 0 else random.randrange(2**31)


class Sampler:
    """Sampling with llama.cpp's default order: top-k, then top-p, then temperature.

    One per generation: it holds the generation's only RNG, seeded from ``params.seed``, so
    the same seed gives the same output. The drafter (for sampled proposals) and the verifier
    share it.
    """

    def __init__(self, params: SamplingParams):
        self.params = params
        seed = params.seed
        self.rng = np.random.default_rng(seed if seed is None or seed >= 0 else None)  # negative: random

    def distribution(self, logits: np.ndarray) -> Dist:
        """(candidate ids, probabilities) after the transforms, most likely first."""
        p = self.params
        n = logits.shape[0]
        k = p.top_k if 0 < p.top_k < n else n
        ids = np.argpartition(logits, -k)[-k:] if k < n else np.arange(n)
        vals = logits[ids].astype(np.float64)
        order = np.argsort(-vals, kind="stable")
        ids, vals = ids[order], vals[order]
        if not np.isfinite(vals[0]) or np.isnan(vals).any():  # NaN scores, or nothing allowed
            raise RowFault()
        if p.top_p < 1.0:
            probs = np.exp(vals - vals[0])
            probs /= probs.sum()
            keep = int(np.searchsorted(np.cumsum(probs), p.top_p) + 1)
            ids, vals = ids[:keep], vals[:keep]
        scaled = (vals - vals[0]) / max(p.temp, 1e-6)
        probs = np.exp(scaled)
        probs /= probs.sum()
        return ids, probs

    def draw(self, ids: np.ndarray, weights: np.ndarray) -> int:
        """One of ``ids`` with probability proportional to ``weights`` (need not sum to 1).

        Inverse CDF on one uniform draw: the same choice, from the same random number, as
        ``rng.choice(len(ids), p=weights)``, without its validation pass.
        """
        cdf = np.cumsum(weights)
        i = int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right"))
        return int(ids[min(i, len(ids) - 1)])

    def sample(self, logits: np.ndarray) -> int:
        ids, probs = self.distribution(logits)
        return self.draw(ids, probs)


class MatchVerifier(Verifier):
    """Sample-then-match: llama.cpp's rule, and ``--verify match``."""

    rule = "match"

    def __init__(self, sampler: Sampler):
        self.sampler = sampler

    def verify(self, rows: Rows, proposal: Proposal) -> list[int]:
        draft = proposal.tokens
        out: list[int] = []
        for i, proposed in enumerate(draft):
            tok = self.sampler.sample(rows(i))
            out.append(tok)
            if tok != proposed:
                return out
        out.append(self.sampler.sample(rows(len(draft))))
        return out


class ExactVerifier(Verifier):
    """Speculative sampling (Leviathan et al. 2023, Chen et al. 2023), for sampled and greedy
    proposals alike (the module docstring)."""

    rule = "exact"

    def __init__(self, sampler: Sampler):
        self.sampler = sampler

    def verify(self, rows: Rows, proposal: Proposal) -> list[int]:
        s = self.sampler
        rng = s.rng
        q = proposal.q
        out: list[int] = []
        for i, x in enumerate(proposal.tokens):
            ids, probs = s.distribution(rows(i))
            where = np.flatnonzero(ids == x)
            px = float(probs[where[0]]) if where.size else 0.0
            if q is None:
                qx = 1.0
            else:
                q_ids, q_probs = q[i]
                qhit = np.flatnonzero(q_ids == x)
                qx = float(q_probs[qhit[0]]) if qhit.size else 0.0
            # keep x with probability min(1, p(x) / q(x)); qx > 0 for a token drawn from q
            if rng.random() * qx < px:
                out.append(x)
                continue
            if q is None:
                residual = probs.copy()
                if where.size:
                    residual[where[0]] = 0.0
            else:
                residual = np.maximum(probs - _probs_at(ids, q_ids, q_probs), 0.0)
            if residual.sum() <= 0.0:  # p <= q everywhere: a rejection can only be rounding
                residual = probs
            out.append(s.draw(ids, residual))
            return out
        out.append(s.sample(rows(len(proposal.tokens))))
        return out


def _probs_at(ids: np.ndarray, q_ids: np.ndarray, q_probs: np.ndarray) -> np.ndarray:
    """q's probability of each of ``ids`` (0 outside q's support), by a sorted lookup."""
    order = np.argsort(q_ids)
    sorted_ids = q_ids[order]
    pos = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    return np.where(sorted_ids[pos] == ids, q_probs[order][pos], 0.0)


def verify_mode(mode: str) -> VerifyMode:
    """``mode`` as a ``VerifyMode``; a ``UsageError`` naming the modes if it is none of them."""
    try:
        return VerifyMode(mode)
    except ValueError:
        raise UsageError(f"unknown verify mode {mode!r}",
                         hint=f"--verify takes {', '.join(VERIFY_MODES)}") from None


def resolve_verify(mode: str, temp: float, *, sampled_drafts: bool = True) -> str:
    """The rule ("greedy", "match" or "exact") that ``mode`` (``GenOptions.verify``) means at
    ``temp`` for a drafter whose ``sampled_proposals`` is ``sampled_drafts``, as the module
    docstring defines the modes."""
    mode = verify_mode(mode).value
    if temp <= 0:
        return "greedy"
    if mode == "auto":
        return "exact" if sampled_drafts else "match"
    return mode


def make_verifier(rule: str, sampler: Sampler | None) -> Verifier:
    """The verifier for a resolved rule ("greedy", "match", "exact"); sampling rules need ``sampler``."""
    if rule == "greedy":
        return GreedyVerifier()
    if sampler is None:
        raise ValueError(f"the {rule!r} rule needs a Sampler")
    if rule == "match":
        return MatchVerifier(sampler)
    if rule == "exact":
        return ExactVerifier(sampler)
    raise ValueError(f"unknown rule {rule!r}")

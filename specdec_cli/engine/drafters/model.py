"""Classic speculative decoding with a smaller draft model that shares the target's vocabulary.

The draft keeps its own KV cache in step with the conversation: before each proposal it
finds where its cache and the real history part ways, drops the rest, and evaluates only
the missing tokens (usually the last accepted draft and the target's new token) in one
batch. A recurrent or hybrid draft cannot drop positions, so its state is checkpointed
before its first drafted token is evaluated, and put back when the history parts ways with
what it drafted (``verify/rollback.py``), as llama.cpp's speculative-simple does for its draft. Proposals stop early when the draft's confidence falls below p-min, measured as
llama.cpp's draft sampler does (softmax over the top 10 logits, probability of the best).

Greedy proposals (temperature 0, and ``--verify match``, llama.cpp's own behaviour) take the
draft's argmax. Sampled proposals (``begin`` got the generation's ``Sampler``: exact
verification at temperature > 0) draw each token from the draft's distribution q after the
generation's top-k, top-p and temperature, the same transforms as the target's p, and keep q
for the verifier. The p-min cut is decided from the draft's logits *before* a token is drawn,
so it never depends on the drawn token and q stays the distribution the token came from. For
the same reason ``n_min`` is not applied to sampled proposals: dropping a proposal because it
came out short would make the kept ones depend on the tokens drawn, and bias them.
"""

from __future__ import annotations

import numpy as np

from ...models.memory_kinds import Rollback
from ..llama.context import Context
from ..verify.rollback import CacheRollback
from ..verify.verifiers import Dist, Proposal, Sampler
from .base import Drafter
from .greedy import confident_argmax, gated_rule


class ModelDrafter(Drafter):
    method = "draft"
    sampled_proposals = True

    def __init__(self, ctx: Context, *, n_min: int = 0, p_min: float = 0.0, rollback: CacheRollback | None = None):
        """``rollback``: how the draft's memory drops positions (default: it simply can)."""
        self.ctx = ctx
        self.rollback = rollback or CacheRollback(ctx, Rollback.PARTIAL)
        self.n_min = n_min
        self.p_min = p_min
        self.sampler: Sampler | None = None  # set per generation by begin(); None = greedy
        self._cached: list[int] = []  # tokens whose KV the draft context holds, at positions 0..
        self._stable = 0  # history length up to which the cache is known to match
        # set by a caller that decides the length itself (auto): called with the confidence of
        # the next position before its token is drawn; False stops the proposal (p-min is off)
        self.stop_rule = None
        self.last_confidences: list[float] = []  # of the last proposal's tokens

    def configure(self, *, n_max: int, p_min: float) -> None:
        self.p_min = p_min

    def begin(self, prompt: list[int], sampler: Sampler | None = None) -> None:
        self.sampler = sampler
        self.ctx.kv_clear()
        self.rollback.forget()
        self._cached = list(prompt[:-1])
        self._stable = len(self._cached)
        if self._cached:
            self.ctx.decode(self._cached, 0, outputs="last")

    def _sync(self, history: list[int]) -> None:
        """Make the draft's cache hold ``history`` and leave the logits of its last token ready."""
        cached = self._cached
        same = min(self._stable, len(cached), len(history))
        limit = min(len(cached), len(history) - 1)  # always re-evaluate at least the last token
        while same < limit and cached[same] == history[same]:
            same += 1
        same = min(same, limit)
        if same < len(cached):
            same = self.rollback.keep_until(same)
        self.ctx.decode(history[same:], same, outputs="last")
        self._cached = cached[:same] + history[same:]
        self._stable = len(history)

    def propose(self, history: list[int], n_max: int) -> Proposal:
        if self.sampler is None:
            return Proposal(self.draft(history, n_max))
        return self._sampled(history, n_max, self.sampler)

    def draft(self, history: list[int], n_max: int) -> list[int]:
        """Greedy proposal: the draft's argmax at each position."""
        if n_max <= 0:
            return []
        out = self._run(history, n_max)
        return out if len(out) >= self.n_min else []

    def _sampled(self, history: list[int], n_max: int, sampler: Sampler) -> Proposal:
        """Sampled proposal: each token drawn from q (the transformed draft distribution), q kept."""
        if n_max <= 0:
            return Proposal([])
        dists: list[Dist] = []

        def draw(logits: np.ndarray) -> int:
            ids, probs = sampler.distribution(logits)
            dists.append((ids, probs))
            return sampler.draw(ids, probs)

        return Proposal(self._run(history, n_max, pick=draw), dists)

    def _run(self, history: list[int], n_max: int, pick=None) -> list[int]:
        """The drafting loop from ``history``: the draft's cache follows each drafted token."""
        self._sync(history)
        confs: list[float] = []
        self.last_confidences = confs
        pos = len(history)

        def advance(i: int, tok: int) -> None:
            if i == 0:
                self.rollback.before_pass(pos)  # a checkpoint, where the memory needs one
            self.ctx.decode([tok], pos + i, outputs="last")
            self._cached.append(tok)

        # whether to draft a position is decided from its logits before anything is drawn
        keep = gated_rule(self.p_min, self.stop_rule, confs)
        return confident_argmax(n_max, lambda i: self.ctx.logits(-1), keep=keep, advance=advance, pick=pick)

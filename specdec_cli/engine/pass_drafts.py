"""What the decoding sequences of one shared pass draft: the per-pass half of the scheduler.

Auto offers, for each sequence, its best proposer's candidates (the suffix index over the
prompt, the output and the run's earlier outputs, the edit tracker's copy of the prompt with
the edits learned so far, or the draft model where its expected rate is higher), each token with its calibrated acceptance, and ``policy.plan_pass`` cuts them for
the whole pass from the measured cost curve. The planned model drafts are then made for all
their sequences together, one draft pass per step (``drafters/model_batch.py``). A forced
method drafts as it does alone: n-gram lookup or the draft model at a fixed length.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .drafters.model_batch import Ask
from .policy import best_length, confidence_bucket, plan_pass
from .verify import Proposal

NONE = Proposal([])
MODEL_STOP = 0.2  # a model draft stops before a token whose calibrated acceptance is below this


@dataclass
class Drafted:
    """One sequence's draft for a pass, and what auto learns from its verification."""

    proposal: Proposal
    source: str  # "ngram", the model's name, or "none"
    buckets: list
    priors: list

    @classmethod
    def nothing(cls) -> Drafted:
        return cls(NONE, "none", [], [])


class PassDrafter:
    """Drafts for the decoding sequences of a pass; ``seq`` objects carry ``tokens``, ``index`` and
    ``edits`` (a SuffixIndex and an EditTracker under auto), ``ngram`` (an NgramDrafter under ngram), ``draft_sampler`` and
    ``seq`` (their sequence id in the draft model's context)."""

    def __init__(self, engine, method: str | None, auto, model):
        self.engine = engine
        self.method = method
        self.auto = auto
        self.model = model
        self.costs = engine.costs
        self.p_min = engine.draft_options.p_min

    def draft(self, seqs: list, caps: list[int], n_prefill: int) -> list[Drafted]:
        """``caps[i]``: the longest draft sequence i may send; ``n_prefill``: prompt tokens riding in
        the same pass."""
        if not seqs or self.method is None:
            return [Drafted.nothing() for _ in seqs]
        if self.method == "ngram":
            props = [Proposal(s.ngram.draft(s.tokens, c)) if c else NONE for s, c in zip(seqs, caps)]
            return [Drafted(p, "ngram" if p.tokens else "none", [], []) for p in props]
        if self.method == "draft":
            asks = [Ask(s.seq, s.tokens, c, s.draft_sampler) for s, c in zip(seqs, caps)]
            p_min = self.p_min
            self.model.propose(asks, stop=lambda _seq, _d, conf: conf < p_min)
            return [Drafted(a.proposal(), "draft" if a.tokens else "none", [], []) for a in asks]
        return self._auto(seqs, caps, n_prefill)

    def _auto(self, seqs: list, caps: list[int], n_prefill: int) -> list[Drafted]:
        auto, costs = self.auto, self.costs
        ngram_cost, model_cost = costs.draft_seconds("ngram"), costs.draft_seconds(auto.name)
        options = []  # per sequence: (n-gram candidates, or None for the model; acceptances; cost per token)
        for s, cap in zip(seqs, caps):
            if not cap:
                options.append((None, [], 0.0))
                continue
            c = auto.copy_candidates(s.index, s.edits, s.tokens, cap)
            option = (c, c.accept, ngram_cost)
            if self.model is not None:
                acc = [auto.model_position(i) for i in range(cap)]
                if best_length(acc, costs, model_cost).rate > best_length(c.accept, costs, ngram_cost).rate:
                    option = (None, acc, model_cost)
            options.append(option)
        plan = plan_pass([o[1] for o in options], costs, n_prefill=n_prefill, draft_costs=[o[2] for o in options])
        out = [Drafted.nothing() for _ in seqs]
        asks: list[tuple[int, Ask]] = []
        for i, (s, (c, _acc, _cost), k) in enumerate(zip(seqs, options, plan.lengths)):
            if k and c is not None:
                out[i] = Drafted(c.proposal(k), c.source, c.buckets[:k], c.priors[:k])
            elif k:
                asks.append((i, Ask(s.seq, s.tokens, k, s.draft_sampler)))
        if asks:
            self._with_model(asks, out)
        return out

    def _with_model(self, asks: list[tuple[int, Ask]], out: list[Drafted]) -> None:
        """The planned model drafts, one pass per step for all of them; a sequence stops early where
        the draft's calibrated confidence says its next token is unlikely to be kept."""
        auto = self.auto
        cal = auto._model_conf

        def stop(_seq: int, depth: int, conf: float) -> bool:
            return depth > 0 and cal.estimate((confidence_bucket(conf),), conf) < MODEL_STOP

        t0 = time.perf_counter()
        self.model.propose([a for _, a in asks], stop=stop)
        self.costs.observe_draft(auto.name, sum(len(a.tokens) + 1 for _, a in asks), time.perf_counter() - t0)
        for i, a in asks:
            if a.tokens:
                out[i] = Drafted(a.proposal(), auto.name, [(confidence_bucket(x),) for x in a.confidences],
                                 list(a.confidences))

    def learn(self, d: Drafted, n_kept: int) -> None:
        """What the target kept of a draft, for auto's calibration (shared by every sequence)."""
        if self.auto is not None:
            self.auto.learn(d.source, d.buckets, d.priors, n_kept)

"""What the decoding sequences of one shared pass draft: the per-pass half of the scheduler.

Auto offers, for each sequence, its best proposer's candidates (the suffix index over the
prompt, the output and the run's earlier outputs, the edit tracker's copy of the prompt with
the edits learned so far, or the draft model where its expected rate is higher), each token with its calibrated acceptance, and ``plan_pass`` (``policy/decisions.py``) cuts them for
the whole pass from the measured cost curve. The planned model drafts are then made for all
their sequences together, one draft pass per step (``drafters/model_batch.py``). A forced
method drafts as it does alone: n-gram lookup or the draft model at a fixed length.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..drafters.model_batch import Ask
from ..policy.decisions import best_length, confidence_bucket, plan_pass
from ..verify.verifiers import Proposal

NONE = Proposal([])
MODEL_STOP = 0.2  # a model draft stops before a token whose calibrated acceptance is below this


@dataclass
class Drafted:
    """One sequence's draft for a pass, and what auto learns from its verification."""

    proposal: Proposal
    source: str  # "ngram", "edit", "grammar", the model's name, or "none"
    buckets: list
    priors: list
    n_forced: int = 0  # tokens at its head the grammar forced (auto learns from the rest)

    @classmethod
    def nothing(cls) -> Drafted:
        return cls(NONE, "none", [], [])

    def cut(self, proposal: Proposal) -> Drafted:
        """This draft as a pass carries it: ``proposal``, a prefix of its own (a grammar cut it
        before the first token it rejects; ``PassMasks.along``). The signals of tokens never
        sent go with them, so auto does not learn them as refused."""
        n = len(proposal)
        if n == len(self.proposal):
            return self
        if n == 0:
            return Drafted.nothing()
        forced = min(self.n_forced, n)
        return Drafted(proposal, self.source, self.buckets[: n - forced], self.priors[: n - forced], forced)


class PassDrafter:
    """Drafts for the decoding sequences of a pass; ``seq`` objects carry ``tokens``; ``index``,
    ``edits`` and ``hindsight`` (a SuffixIndex, an EditTracker and a Hindsight under auto);
    ``ngram`` (an NgramDrafter under ngram); ``draft_sampler``; and ``seq`` (their sequence id in
    the draft model's context)."""

    def __init__(self, engine, method: str | None, auto, model):
        self.engine = engine
        self.method = method
        self.auto = auto
        self.model = model
        self.costs = engine.costs
        self.p_min = engine.draft_options.p_min

    def draft(self, seqs: list, caps: list[int], n_prefill: int) -> list[Drafted]:
        """``caps[i]``: the longest draft sequence i may send; ``n_prefill``: prompt tokens riding in
        the same pass. Under a grammar (``seq.constraint``) a draft starts with the tokens it
        forces; the pass cuts it before the first the grammar rejects."""
        if not seqs or self.method is None:
            return [Drafted.nothing() for _ in seqs]
        forced = [s.constraint.forced_tokens()[:c] if s.constraint is not None else [] for s, c in zip(seqs, caps)]
        after = [[*s.tokens, *f] for s, f in zip(seqs, forced)]
        room = [c - len(f) for c, f in zip(caps, forced)]
        if self.method == "ngram":
            out = [Drafted(Proposal(s.ngram.draft(h, r)) if r else NONE, "ngram", [], [])
                   for s, h, r in zip(seqs, after, room)]
        elif self.method == "draft":
            asks = [Ask(s.seq, h, r, s.draft_sampler) for s, h, r in zip(seqs, after, room)]
            p_min = self.p_min
            self.model.propose(asks, stop=lambda _seq, _d, conf: conf < p_min)
            out = [Drafted(a.proposal(), "draft", [], []) for a in asks]
        else:
            out = self._auto(seqs, after, room, forced, n_prefill)
            forced = [[] for _ in seqs]  # auto weighed and placed them itself
        return [_finish(f, d) for f, d in zip(forced, out)]

    def _auto(self, seqs: list, after: list[list[int]], room: list[int], forced: list[list[int]],
              n_prefill: int) -> list[Drafted]:
        auto, costs = self.auto, self.costs
        ngram_cost, model_cost = costs.draft_seconds("ngram"), costs.draft_seconds(auto.name)
        options = []  # per sequence: (n-gram candidates, or None for the model; acceptances; cost per token)
        for s, h, r, f in zip(seqs, after, room, forced):
            sure = [1.0] * len(f)  # a forced token is kept for certain
            if r <= 0:
                options.append((None, sure, 0.0))
                continue
            c = auto.copy_candidates(s.index, s.edits, h, r, None if f else s.hindsight)
            option = (c, sure + c.accept, ngram_cost)
            if self.model is not None and not f:
                acc = [auto.model_position(i) for i in range(r)]
                if best_length(acc, costs, model_cost).rate > best_length(c.accept, costs, ngram_cost).rate:
                    option = (None, acc, model_cost)
            options.append(option)
        plan = plan_pass([o[1] for o in options], costs, n_prefill=n_prefill, draft_costs=[o[2] for o in options])
        out = [Drafted.nothing() for _ in seqs]
        asks: list[tuple[int, Ask]] = []
        for i, (s, (c, _acc, _cost), k, f) in enumerate(zip(seqs, options, plan.lengths, forced)):
            extra = max(0, k - len(f))
            if f and k:
                tokens = (f + (c.tokens if c else []))[:k]
                subst = [False] * len(f) + (c.subst or [False] * len(c.tokens) if c else [])
                out[i] = Drafted(Proposal(tokens, subst=subst[:k] if any(subst[:k]) else None),
                                 c.source if extra else "grammar", c.buckets[:extra] if c else [],
                                 c.priors[:extra] if c else [], len(f))
            elif k and c is not None:
                out[i] = Drafted(c.proposal(k), c.source, c.buckets[:k], c.priors[:k])
            elif k:
                asks.append((i, Ask(s.seq, s.tokens, k, s.draft_sampler)))
        if asks:
            self._with_model(asks, out)
        for s, d in zip(seqs, out):
            if d.proposal.tokens:
                s.hindsight.withdraw()
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
        # per drafted token, as one sequence's figure is (``AutoDrafter``): its steps and the catch-up
        # of what the target kept, not the prompts the draft read for sequences new to it
        drafting = time.perf_counter() - t0 - self.model.read_seconds
        self.costs.observe_draft(auto.name, max(1, sum(len(a.tokens) for _, a in asks)), drafting)
        for i, a in asks:
            if a.tokens:
                out[i] = Drafted(a.proposal(), auto.name, [(confidence_bucket(x),) for x in a.confidences],
                                 list(a.confidences))

    def learn(self, d: Drafted, n_kept: int) -> None:
        """What the target kept of a draft, for auto's calibration (shared by every sequence)."""
        if self.auto is not None and n_kept >= d.n_forced:
            self.auto.learn(d.source, d.buckets, d.priors, n_kept - d.n_forced)


def _finish(forced: list[int], d: Drafted) -> Drafted:
    """The forced tokens put in front (methods other than auto), and "none" for an empty draft.
    What a grammar allows of it is the pass's to cut (``PassMasks.along``), for every drafter."""
    if forced:
        d = Drafted(Proposal(forced + d.proposal.tokens), d.source if d.proposal.tokens else "grammar",
                    d.buckets, d.priors, len(forced))
    if not d.proposal.tokens:
        return Drafted.nothing()
    return d

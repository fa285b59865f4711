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
from typing import NamedTuple

from ..drafters.auto import AutoDrafter, model_draft
from ..drafters.draft import NO_PROPOSAL, Draft
from ..drafters.model_batch import Ask, BatchModelDrafter
from ..policy.costmodel import CostModel
from ..policy.decisions import best_length, confidence_bucket, plan_pass
from ..verify.verifiers import Proposal
from .jobs import SeqSlot
from .pass_profile import NO_PROFILE, PassProfile

MODEL_STOP = 0.2  # a model draft stops before a token whose calibrated acceptance is below this


class _Option(NamedTuple):
    """What one sequence could send in a pass, as auto weighs it before the pass's plan."""

    copy: Draft | None  # the copy proposers' candidates; None: the draft model's, drafted once planned
    accept: list[float]  # per token, forced ones first: its acceptance, given the ones before it kept
    cost: float  # seconds a drafted token costs


class PassDrafter:
    """Drafts for the decoding sequences of a pass, from what each ``SeqSlot`` keeps: its
    ``tokens``, its proposers (``index``, ``edits`` and ``unsent`` under auto; ``ngram`` under
    ngram), its ``constraint``, its ``draft_sampler``, and its ``seq`` (its sequence id in the
    draft model's context too)."""

    def __init__(self, costs: CostModel, method: str | None, auto: AutoDrafter | None,
                 model: BatchModelDrafter | None, *, p_min: float, profile: PassProfile = NO_PROFILE):
        """``costs``: the engine's (what the plan and auto read, and the model drafts are timed
        into); ``auto`` under auto, ``model`` where the draft model drafts (auto or draft);
        ``p_min``: the confidence below which a forced draft-model draft stops; ``profile``: the
        scheduler's (the plan's time is the cost policy's, not the drafting's)."""
        self.method = method
        self.auto = auto
        self.model = model
        self.costs = costs
        self.p_min = p_min
        self.profile = profile

    def draft(self, seqs: list[SeqSlot], caps: list[int], n_prefill: int) -> list[Draft]:
        """``caps[i]``: the longest draft sequence i may send; ``n_prefill``: prompt tokens riding in
        the same pass. Under a grammar (``seq.constraint``) a draft starts with the tokens it
        forces; the pass cuts it before the first the grammar rejects."""
        if not seqs or self.method is None:
            return [Draft.nothing() for _ in seqs]
        forced = [s.constraint.forced_tokens()[:c] if s.constraint is not None else [] for s, c in zip(seqs, caps)]
        after = [[*s.tokens, *f] for s, f in zip(seqs, forced)]
        room = [c - len(f) for c, f in zip(caps, forced)]
        if self.method == "ngram":
            out = [Draft(Proposal(s.lookup().draft(h, r)) if r else NO_PROPOSAL, "ngram")
                   for s, h, r in zip(seqs, after, room)]
        elif self.method == "draft":
            assert self.model is not None  # the scheduler's, for this method
            asks = [Ask(s.seq, h, r, s.draft_sampler) for s, h, r in zip(seqs, after, room)]
            p_min = self.p_min
            self.model.propose(asks, stop=lambda _seq, _d, conf: conf < p_min)
            out = [Draft(a.proposal(), "draft") for a in asks]
        else:
            assert self.auto is not None  # the scheduler's, for this method
            out = self._auto(self.auto, seqs, after, room, forced, n_prefill)
            forced = [[] for _ in seqs]  # auto weighed and placed them itself
        return [_behind_forced(f, d) for f, d in zip(forced, out)]

    def _auto(self, auto: AutoDrafter, seqs: list[SeqSlot], after: list[list[int]], room: list[int],
              forced: list[list[int]], n_prefill: int) -> list[Draft]:
        """Auto over the pass: each sequence's best option, cut for the whole pass by the plan
        (``plan_pass``), the forced tokens first; the planned model drafts made together."""
        options = self._options(auto, seqs, after, room, forced)
        with self.profile.stage("cost policy"):
            plan = plan_pass([o.accept for o in options], self.costs, n_prefill=n_prefill,
                             draft_costs=[o.cost for o in options])
        out = [Draft.nothing() for _ in seqs]
        asks: list[tuple[int, Ask]] = []
        for i, (s, o, k, f) in enumerate(zip(seqs, options, plan.lengths, forced)):
            if f and k:
                out[i] = (o.copy or Draft.nothing()).behind(f, k)
            elif k and o.copy is not None:
                out[i] = o.copy.first(k)
            elif k:
                asks.append((i, Ask(s.seq, s.tokens, k, s.draft_sampler)))
        if asks and self.model is not None:  # a sequence asks the model only where there is one
            self._with_model(auto, self.model, asks, out)
        for s, d in zip(seqs, out):
            if d.tokens:
                s.copiers()[2].withdraw()
        return out

    def _options(self, auto: AutoDrafter, seqs: list[SeqSlot], after: list[list[int]], room: list[int],
                 forced: list[list[int]]) -> list[_Option]:
        """Per sequence, what auto would send: the copy proposers' candidates behind the forced
        tokens, or the draft model where its expected rate is higher (never behind forced ones)."""
        costs = self.costs
        ngram_cost, model_cost = costs.draft_seconds("ngram"), costs.draft_seconds(auto.name)
        options: list[_Option] = []
        for s, h, r, f in zip(seqs, after, room, forced):
            sure = [1.0] * len(f)  # a forced token is kept for certain
            if r <= 0:
                options.append(_Option(None, sure, 0.0))
                continue
            index, edits, unsent = s.copiers()
            c = auto.copy_candidates(index, edits, h, r, None if f else unsent)
            option = _Option(c, sure + c.accept, ngram_cost)
            if self.model is not None and not f:
                acc = [auto.model_position(i) for i in range(r)]
                if best_length(acc, costs, model_cost).rate > best_length(c.accept, costs, ngram_cost).rate:
                    option = _Option(None, acc, model_cost)
            options.append(option)
        return options

    def _with_model(self, auto: AutoDrafter, model: BatchModelDrafter, asks: list[tuple[int, Ask]],
                    out: list[Draft]) -> None:
        """The planned model drafts, one pass per step for all of them; a sequence stops early where
        the draft's calibrated confidence says its next token is unlikely to be kept."""
        cal = auto._model_conf

        def stop(_seq: int, depth: int, conf: float) -> bool:
            return depth > 0 and cal.estimate((confidence_bucket(conf),), conf) < MODEL_STOP

        t0 = time.perf_counter()
        model.propose([a for _, a in asks], stop=stop)
        # per drafted token, as one sequence's figure is (``AutoDrafter``): its steps and the catch-up
        # of what the target kept, not the prompts the draft read for sequences new to it
        drafting = time.perf_counter() - t0 - model.read_seconds
        self.costs.observe_draft(auto.name, max(1, sum(len(a.tokens) for _, a in asks)), drafting)
        for i, a in asks:
            if a.tokens:
                out[i] = model_draft(auto.name, a.proposal(), a.confidences)

    def learn(self, d: Draft, n_kept: int) -> None:
        """What the target kept of a draft, for auto's calibration (shared by every sequence)."""
        if self.auto is not None and n_kept >= d.n_forced:
            self.auto.learn(d.source, d.buckets, d.priors, n_kept - d.n_forced)


def _behind_forced(forced: list[int], d: Draft) -> Draft:
    """The forced tokens put in front (methods other than auto), and "none" for an empty draft.
    What a grammar allows of it is the pass's to cut (``PassMasks.along``), for every drafter."""
    if forced:
        d = d.behind(forced, len(forced) + len(d.tokens))
    if not d.tokens:
        return Draft.nothing()
    return d

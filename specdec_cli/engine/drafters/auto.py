"""``--method auto``: at every step, draft with whatever is expected to be fastest, or not at all.

Two proposers sit behind it: the suffix index (free to ask, strong when the output copies
the prompt or an earlier output) and, when one was loaded, a step-by-step drafter: the draft
model, or the target's own MTP layers (each costs a draft step per token and pays where a
verify pass is nearly as cheap as a decode step, as on a GPU). Below, "the model" is that
drafter, whichever it is.
Each step:

1. the index proposes up to ``n_max`` tokens; the policy turns each token's signal (context
   length, continuation share) into a calibrated acceptance and picks the best prefix;
2. the draft model is asked only if its expected rate, from the acceptance it has shown at
   each draft position so far and its measured step cost, beats that; it then decides as it
   drafts, stopping when one more token no longer pays for its step and its share of the
   verify pass. The choice is made before it draws anything, and its proposal is used as
   drafted, so a sampled proposal stays a valid draw from q (exact verification holds);
3. if neither beats plain decoding (k = 0), nothing is proposed.

llama.cpp tries its drafters in a fixed order; this chooses by expected speed, from costs
measured on this machine (``CostModel``) and acceptance learned in this run (``Calibrator``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..policy.costmodel import CostModel
from ..policy.decisions import Calibrator, best_length, confidence_bucket, extension_pays
from ..verify.verifiers import Proposal
from .base import Drafter
from .draft import Draft
from .edits import SUBSTITUTED, CopyToken, EditTracker
from .suffix import ORDERS, SuffixIndex

STOP_WALK = 0.02  # the index stops proposing once the whole prefix is this unlikely to be kept
MODEL_POSITION_PRIOR = 0.6  # acceptance assumed for a draft model's positions before any verify
MODEL_LIVE_ACCEPT = 0.9  # the acceptance per position a draft model must be able to pay at to be kept ready

# (source, buckets, priors, tokens kept): what the target kept of a draft, for the calibration
Learn = Callable[[str, list, list, int], None]


class UnsentOffers:
    """The first token each copy proposer offered at a pass that sent no draft, scored once the
    target has emitted the token it would have had to match.

    Why: the calibration starts from each signal's face value and moved only on drafts that were
    sent. Where a pass of two tokens costs two decode steps (a CPU), a draft pays only at an
    acceptance of about 0.85 or more, so a proposer whose face value sits below that was never
    sent and never learned that it was right: on bench's edit prompts, one sequence at a time,
    auto sent nothing at 108 of 171 undrafted passes of one prompt where both copy proposers had
    the next token right. A token the target emits after an undrafted pass is exactly the outcome
    a one-token draft of it would have had (greedy: the argmax; sampled: a point-mass draft is
    kept with the probability the target samples it), so each such pass is one free observation
    of the first position's signal. Drafts that were sent are learned from as before, never here.
    """

    def __init__(self) -> None:
        self._at = -1  # the index in the history the offered tokens would have taken
        self._offers: list[Draft] = []  # the candidates offered there, each with a token

    def offer(self, at: int, *cands: Draft) -> None:
        self._at = at
        self._offers = [c for c in cands if c.tokens]

    def withdraw(self) -> None:
        """A draft was sent: it is learned from when it is verified, not here."""
        self._offers = []

    def settle(self, history: list[int], learn: Learn) -> None:
        """Score what was offered against ``history`` (the same sequence, since grown)."""
        if self._offers and len(history) > self._at >= 0:
            for c in self._offers:
                learn(c.source, c.buckets[:1], c.priors[:1], int(history[self._at] == c.tokens[0]))
        self._offers = []


def _edit_signal(d: CopyToken) -> tuple[tuple, float]:
    """Bucket and face value of a token the edit tracker proposed: a copy is as likely as the
    stretch the output has followed the source is long; a substitution as its rule's record
    (confirmed against refused) says, and a copy over a place where a rule was refused more
    often than it was kept is a copy with a doubt."""
    run = min(d.run, 16).bit_length()  # 0, 1, 2-3, 4-7, 8-15, 16+
    if d.kind == SUBSTITUTED:
        record = min(d.seen - d.refused, 4)
        return ("subst", run, record), d.seen / (d.seen + d.refused + 1.0)
    doubt = d.seen > 0
    return ("copy", run, doubt), min(0.95, 0.5 + 0.08 * run) * (0.5 if doubt else 1.0)


def _ngram_prior(share: float, order: int) -> float:
    """Face value of an n-gram token: a long match that always went on this way is likely kept."""
    return share * min(0.95, 0.3 + 0.05 * order)


class AutoDrafter(Drafter):
    method = "auto"

    def __init__(self, costs: CostModel, model: Drafter | None = None):
        """``model``: a drafter that takes ``stop_rule`` and reports ``last_confidences``
        (``ModelDrafter``, ``MtpDrafter``), or None."""
        self.costs = costs
        self.index = SuffixIndex()
        self.edits = EditTracker()  # the copy with the edits learned so far (``edits.py``)
        self.unsent = UnsentOffers()
        self.attach(model)
        self.reset()
        self._model_live = False
        self._pending = Draft.nothing()  # the last proposal, learned from at ``accept``
        self._last_source = "none"

    def attach(self, model: Drafter | None) -> None:
        """The step-by-step drafter to weigh (the engine loads a draft model once the costs say it
        could pay)."""
        self.model = model
        self.name = model.method if model is not None else "draft"  # its cost and source name
        # mixed when the model samples: greedy n-gram point masses beside sampled drafts
        self.sampled_proposals = model is not None and model.sampled_proposals
        self.reads_target_states = model is not None and model.reads_target_states  # MTP does, a draft model not

    def reset(self) -> None:
        """Forget the acceptance learned so far (it is otherwise kept across generations)."""
        self._ngram_cal = Calibrator()
        self._edit_cal = Calibrator()
        self._model_conf = Calibrator()
        self._model_pos = Calibrator()

    # --- the Drafter interface ---------------------------------------------------------------
    def begin(self, prompt: list[int], sampler=None) -> None:
        self.index.begin(prompt)
        self.edits.begin(prompt)
        self.unsent = UnsentOffers()
        # the model is prefilled only when it could ever pay on this machine
        self._model_live = self.model is not None and self.model_can_pay(32)
        if self._model_live and self.model is not None:
            self.model.begin(prompt, sampler)

    def process(self, tokens: list[int], pos0: int) -> None:
        if self._model_live and self.model is not None:
            self.model.process(tokens, pos0)

    def draft(self, history: list[int], n_max: int) -> list[int]:
        return self.propose(history, n_max).tokens

    def ngram_candidates(self, index: SuffixIndex, history: list[int], n_max: int) -> Draft:
        """What ``index`` would propose after ``history``, each token with its calibrated acceptance;
        the walk stops once the whole prefix is too unlikely to be kept to matter."""
        buckets: list[tuple] = []
        priors: list[float] = []
        accept: list[float] = []
        run = [1.0]

        def keep(share: float, order: int) -> bool:
            b, p = (ORDERS.index(order), confidence_bucket(share)), _ngram_prior(share, order)
            a = self._ngram_cal.estimate(b, p)
            run[0] *= a
            if run[0] < STOP_WALK:
                return False
            buckets.append(b)
            priors.append(p)
            accept.append(a)
            return True

        tokens = index.propose(history, n_max, keep)[0]
        return Draft(Proposal(tokens), "ngram", buckets, priors, accept=accept)

    def edit_candidates(self, tracker: EditTracker, history: list[int], n_max: int) -> Draft:
        """What the edit tracker would propose after ``history``: the source from where the output
        follows it, with the edits learned so far written in; calibrated like the index's."""
        tracker.update(history)
        tokens: list[int] = []
        buckets: list[tuple] = []
        priors: list[float] = []
        accept: list[float] = []
        subst: list[bool] = []
        run = 1.0
        for d in tracker.propose(n_max):
            b, p = _edit_signal(d)
            a = self._edit_cal.estimate(b, p)
            run *= a
            if run < STOP_WALK:
                break
            tokens.append(d.token)
            buckets.append(b)
            priors.append(p)
            accept.append(a)
            subst.append(d.kind == SUBSTITUTED)
        return Draft(Proposal(tokens, subst=subst), "edit", buckets, priors, accept=accept)

    def copy_candidates(self, index: SuffixIndex, tracker: EditTracker, history: list[int], n_max: int,
                        unsent: UnsentOffers | None = None) -> Draft:
        """The better of the suffix index's and the edit tracker's candidates, by expected rate.
        With ``unsent`` (the sequence's), what it offered at the last undrafted pass is scored
        first, and both proposers' candidates are offered to it; the caller withdraws them
        (``unsent.withdraw()``) when it sends a draft."""
        costs = self.costs
        t0 = time.perf_counter()
        if unsent is not None:
            unsent.settle(history, self.learn)
        ng = self.ngram_candidates(index, history, n_max)
        ed = self.edit_candidates(tracker, history, n_max)
        cost = costs.draft_seconds("ngram")
        best = ed if best_length(ed.accept, costs, cost).rate > best_length(ng.accept, costs, cost).rate else ng
        if unsent is not None:
            unsent.offer(len(history), ng, ed)
        costs.observe_draft("ngram", max(1, len(best.tokens)), time.perf_counter() - t0)
        return best

    def propose(self, history: list[int], n_max: int) -> Proposal:
        costs = self.costs
        cand = self.copy_candidates(self.index, self.edits, history, n_max, self.unsent)
        ng = best_length(cand.accept, costs, costs.draft_seconds("ngram"))
        best_rate = ng.rate
        choice = cand.first(ng.k) if ng.k > 0 else Draft.nothing()
        if self._model_live and self._model_expected(n_max) > best_rate:
            choice = self._draft_with_model(history, n_max) or choice
        if choice.tokens:
            self.unsent.withdraw()
        self._pending = choice
        self._last_source = choice.source if choice.tokens else "none"
        return choice.proposal

    def propose_after(self, history: list[int], forced: list[int], n_max: int) -> Proposal:
        """Under a grammar: the tokens it forces (kept for certain: acceptance 1) and the copy
        candidates after them, cut where the expected rate is best, as any draft; a pass that
        is not worth even the forced tokens drafts nothing. The draft model is not asked here."""
        costs = self.costs
        unsent = None if forced else self.unsent  # after forced tokens it cannot score the offer
        cand = (self.copy_candidates(self.index, self.edits, history + forced, n_max - len(forced), unsent)
                if n_max > len(forced) else Draft.nothing())
        k = best_length([1.0] * len(forced) + cand.accept, costs, costs.draft_seconds("ngram")).k
        if k:
            self.unsent.withdraw()
        self._pending = draft = cand.behind(forced, k)
        self._last_source = draft.source
        return draft.proposal

    @property
    def last_source(self) -> str:
        return self._last_source

    def accept(self, n_accepted: int) -> None:
        d = self._pending
        if n_accepted >= d.n_forced:
            self.learn(d.source, d.buckets, d.priors, n_accepted - d.n_forced)
        self._pending = Draft.nothing()

    def learn(self, source: str, buckets: list, priors: list, n_accepted: int) -> None:
        """What the target kept of a proposal from ``source``, for the calibration of its signals
        (shared by every sequence of a run: they are the same workload)."""
        if source == "ngram":
            self._ngram_cal.observe(buckets, priors, n_accepted)
        elif source == "edit":
            self._edit_cal.observe(buckets, priors, n_accepted)
        elif source == self.name:
            self._model_conf.observe(buckets, priors, n_accepted)
            self._model_pos.observe([("pos", i) for i in range(len(buckets))], priors, n_accepted)

    def configure(self, *, n_max: int, p_min: float) -> None:
        if self.model is not None:
            self.model.configure(n_max=n_max, p_min=p_min)

    def set_active(self, active: bool) -> None:
        if self.model is not None:
            self.model.set_active(active)

    # --- the draft model ---------------------------------------------------------------------
    def model_position(self, i: int) -> float:
        return self._model_pos.estimate(("pos", i), MODEL_POSITION_PRIOR)

    def _model_expected(self, n_max: int) -> float:
        acc = [self.model_position(i) for i in range(n_max)]
        return best_length(acc, self.costs, self.costs.draft_seconds(self.name)).rate

    def model_can_pay(self, n_max: int) -> bool:
        """Could the model beat plain decoding? Keeping it ready costs: a draft model reads every
        prompt (a third of the target's prefill for a 0.5B draft of a 1.5B target), MTP catches
        up on every pass. So it is kept where it could pay at ``MODEL_LIVE_ACCEPT`` per position
        (a draft that good is rare; one that cannot pay even then never will), or, for one
        that tracks every pass, at the acceptance it has been seen to reach."""
        if self.model is None:  # nothing to keep ready
            return False
        if self.model.tracks_every_pass:
            accept = [self.model_position(i) for i in range(n_max)]
            return best_length(accept, self.costs, self.costs.draft_seconds(self.name)).k > 0
        return could_pay(self.costs, self.name, n_max, self.model_position)

    def _draft_with_model(self, history: list[int], n_max: int) -> Draft | None:
        costs = self.costs
        d = costs.draft_seconds(self.name)
        cal = self._model_conf
        accs: list[float] = []  # the expected acceptance of each token drafted so far

        def keep_going(conf: float) -> bool:
            a = cal.estimate((confidence_bucket(conf),), conf)
            if not extension_pays(accs, a, n_max, costs, d):
                return False
            accs.append(a)
            return True

        model = self.model
        assert model is not None  # asked only while one is attached
        model.stop_rule = keep_going
        t0 = time.perf_counter()
        try:
            proposal = model.propose(history, n_max)
        finally:
            model.stop_rule = None
        # per token drafted: the policy charges k tokens k times this, and drafting k tokens takes the
        # catch-up pass and k - 1 steps (counting the catch-up as a token of its own put the 0.5B
        # draft at 0.43 of a target step here, where one of its decodes costs 0.53-0.60 of one)
        costs.observe_draft(self.name, max(1, len(proposal.tokens)), time.perf_counter() - t0)
        if not proposal.tokens:
            return None
        return model_draft(self.name, proposal, model.last_confidences)


def model_draft(name: str, proposal: Proposal, confidences: Sequence[float]) -> Draft:
    """A step-wise drafter's draft, each token's signal its confidence (the draft's top-10
    probability of its best token, taken before anything was drawn)."""
    return Draft(proposal, name, [(confidence_bucket(c),) for c in confidences], list(confidences))


def could_pay(costs: CostModel, name: str, n_max: int, learned: Callable[[int], float] | None = None) -> bool:
    """Whether drafter ``name`` (a draft model that reads every prompt) could beat plain decoding at
    ``MODEL_LIVE_ACCEPT`` per position, or at the acceptance ``learned(i)`` where that is higher.
    Without ``learned`` it is the verdict on a draft model that has not drafted yet, which the
    engine reads off a cached curve before loading the model at all."""
    return best_length(_best_acceptance(n_max, learned), costs, costs.draft_seconds(name)).k > 0


def break_even(costs: CostModel, n_max: int, learned: Callable[[int], float] | None = None) -> float:
    """The draft-token cost, in seconds, below which ``could_pay`` says yes on this curve: the
    figure a draft's measured cost is compared with (0 where even a free draft cannot pay)."""
    accept = _best_acceptance(n_max, learned)
    lo, hi = 0.0, costs.step_seconds()
    if best_length(accept, costs, lo).k == 0:
        return 0.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if best_length(accept, costs, mid).k > 0 else (lo, mid)
    return lo


def _best_acceptance(n_max: int, learned: Callable[[int], float] | None) -> list[float]:
    position = learned or (lambda _i: MODEL_POSITION_PRIOR)
    return [max(MODEL_LIVE_ACCEPT, position(i)) for i in range(n_max)]

"""A job taking a sequence: every field of the job's (``SeqSlot``, ``jobs.py``) assigned afresh,
so nothing of the sequence's last job carries over. A part the scheduler owns (``scheduler.py``),
given what a job's settings, verifier and proposers are made from.

A job gets a verifier with a sampler of its own (its own RNG), so that its output never depends
on its neighbours', and proposers of its own under auto (the suffix index, over the run's earlier
outputs too; the edit tracker, with the rules the run has learned) or under ngram.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ...terminal.textstream import TextStream
from ..drafters.auto import UnsentOffers
from ..drafters.edits import EditTracker
from ..drafters.ngram import NgramDrafter
from ..drafters.suffix import OutputPool, SuffixIndex
from ..llama.model import Model
from ..options import GenOptions
from ..stats import GenerationStats
from ..structured.constraint import Constraint
from ..verify.verifiers import Sampler, SamplingParams, Verifier, make_verifier, resolve_verify
from .jobs import Job, SeqSlot


class JobStart:
    """Starts jobs on sequences for one scheduler."""

    def __init__(self, gen: GenOptions, *, target: Model, constraint: Callable[[object], Constraint],
                 method: str | None, auto: bool, sampled_drafts: bool):
        """``gen``: the settings of a job that brings none; ``target``: the model whose pieces its
        text is made of; ``constraint``: a grammar's state over its vocabulary (``Engine.constraint``);
        ``method``: the scheduler's drafting method (``auto``: whether auto drafts); ``sampled_drafts``:
        whether the draft model drafts (it samples from q where the exact rule needs it)."""
        self.gen = gen
        self.target = target
        self.constraint = constraint
        self.method = method
        self.auto = auto
        self.sampled_drafts = sampled_drafts
        self.pool = OutputPool()  # the run's finished outputs, which every job's suffix index draws on
        self.edit_rules = EditTracker()  # edits learned in one sequence apply in the others

    def start(self, slot: SeqSlot, job: Job, reused: int) -> None:
        """``job`` takes ``slot``, whose first ``reused`` cells hold its prompt's head already
        (``Admission``)."""
        gen = job.gen or self.gen
        slot.job, slot.gen, slot.wait = job, gen, None
        slot.tokens = list(job.prompt)
        slot.n_prompt = len(job.prompt)
        slot.n_cached = reused
        slot.t_admit = time.perf_counter()
        slot.t_decode = None
        slot.output = []
        slot.logprobs = [] if gen.logprobs is not None else None
        slot.stream = TextStream(self.target.piece_showing(gen.shown), gen.stop)
        slot.constraint = self.constraint(gen.grammar) if gen.grammar is not None else None
        slot.draft_sampler, slot.verifier = self._verifier(gen, job.seed, slot.constraint is not None)
        slot.stats = GenerationStats(method=self.method, rollback="partial")
        slot.stats.n_prompt = len(job.prompt)
        slot.stats.n_prompt_reused = reused
        slot.stats.queue_seconds = slot.t_admit - job.arrived
        slot.end_apart = False
        if slot.decoding:
            slot.stats.prompt_seconds = 0.0
        self._proposers(slot, job)

    def _verifier(self, gen: GenOptions, seed: int | None, constrained: bool) -> tuple[Sampler | None, Verifier]:
        """A job's verifier, with a sampler of its own (seeded by the job where it says); and the
        draft model's sampler, the same one, where the exact rule needs drafts sampled from q."""
        # under a grammar every draft is greedy (a point mass), so the exact rule needs no masked q
        sampled = self.sampled_drafts and not constrained
        rule = resolve_verify(gen.verify, gen.sampling.temp, sampled_drafts=sampled)
        sp = gen.sampling
        sampler = Sampler(SamplingParams(temp=sp.temp, top_k=sp.top_k, top_p=sp.top_p,
                                         seed=seed if seed is not None else sp.seed)) \
            if rule != "greedy" else None
        return (sampler if rule == "exact" and sampled else None), make_verifier(rule, sampler)

    def _proposers(self, slot: SeqSlot, job: Job) -> None:
        """The job's own proposers, begun on its prompt and on the copy sources the prompt holds
        in another spelling; its drafter back on, whatever the last job's did."""
        if self.auto:
            index, edits = SuffixIndex(self.pool), EditTracker(self.edit_rules)
            index.begin(job.prompt)
            edits.begin(job.prompt, job.sources)
            for source in job.sources:
                index.add_source(source)
            slot.index, slot.edits, slot.unsent = index, edits, UnsentOffers()
        else:
            slot.index, slot.edits, slot.unsent = None, None, None
        slot.draft_off = False
        slot.ngram = NgramDrafter() if self.method == "ngram" else None
        if slot.ngram is not None:
            slot.ngram.begin(job.prompt)

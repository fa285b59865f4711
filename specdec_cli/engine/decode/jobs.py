"""What the scheduler runs and keeps per job: a ``Job`` (one prompt and its settings), the
``SeqSlot`` (a sequence of the target context and the job it runs), a run's ``RunStats``, and
``cells_for``, the cache a set of jobs needs. The passes themselves are ``scheduler.py``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...terminal.textstream import Segment

if TYPE_CHECKING:
    from ...terminal.textstream import TextStream
    from ..drafters.auto import UnsentOffers
    from ..drafters.edits import EditTracker
    from ..drafters.ngram import NgramDrafter
    from ..drafters.suffix import SuffixIndex
    from ..options import GenOptions
    from ..stats import GenerationStats
    from ..structured.constraint import Constraint
    from ..verify.logprobs import TokenLogprob
    from ..verify.verifiers import Sampler, Verifier


def cells_for(lengths: list[int], n_seq: int, n_ctx: int) -> int:
    """The cells a unified cache of ``n_seq`` sequences needs for jobs whose prompt plus output
    budget is ``lengths`` (each within ``n_ctx``): a sequence holds one job's tokens at a time (a
    finished job's cells stay until its sequence takes the next one, and shared prefixes are
    stored once), and drafts never go past a job's budget, so the ``n_seq`` longest bound it."""
    longest = sorted((min(n, n_ctx) for n in lengths), reverse=True)[: max(1, n_seq)]
    return max(1, sum(longest))


@dataclass
class Job:
    """One prompt: its place in the input, its tokens and its own sampling seed; for a server,
    its own settings, a callback for its text and a flag that cancels it."""

    index: int
    prompt: list[int]
    seed: int | None = None
    gen: GenOptions | None = None  # its own settings; None: the scheduler's
    on_text: Callable[[list[Segment]], None] | None = None  # called on the engine's thread
    on_logprobs: Callable[[list[TokenLogprob]], None] | None = None  # each pass's kept tokens' (gen.logprobs)
    cancelled: bool = False  # set from any thread; the job ends at the next step ("cancelled")
    # text the output may copy that the prompt holds in another spelling (a file, JSON-escaped for a
    # tool call's arguments): drafted from as if it were in the prompt
    sources: tuple[list[int], ...] = ()
    # when the request arrived (``time.perf_counter``): a server sets it as the request comes in, so the
    # time to its first token counts what it waited to be rendered, tokenized and admitted
    arrived: float = field(default_factory=time.perf_counter)
    ready: float | None = None  # when a server had it rendered and tokenized and handed it to the engine
    # the prompt cache's entry read from disk for it off the engine's thread (``Admission``), and since when
    fetched: str | None = None
    fetched_at: float = 0.0


@dataclass
class RunStats:
    """What a run of many prompts did, over all its passes: the stderr summary, the metrics."""

    n_jobs: int = 0
    n_passes: int = 0
    n_generated: int = 0
    n_prompt: int = 0
    n_prompt_reused: int = 0
    seconds: float = 0.0  # wall time of the passes and what is done between them
    seq_passes: int = 0  # sum over passes of the sequences decoding in them
    n_filler: int = 0  # tokens that ran passes at a cheaper size (``CostModel.pass_size``), dropped after them
    n_parallel: int = 0
    by_drafter: dict[str, int] = field(default_factory=dict)  # sequence-passes per proposer
    drafted: dict[str, int] = field(default_factory=dict)  # draft tokens per proposer
    accepted: dict[str, int] = field(default_factory=dict)  # of those, kept

    @property
    def tokens_per_second(self) -> float | None:
        return self.n_generated / self.seconds if self.seconds > 0 else None

    @property
    def mean_sequences(self) -> float | None:
        return self.seq_passes / self.n_passes if self.n_passes else None

    def summary(self, method: str | None) -> str:
        parts = [f"generated {self.n_generated} tok", f"{self.tokens_per_second or 0:.2f} tok/s",
                 f"{self.n_parallel} at once", f"{self.mean_sequences or 0:.2f} seq/pass"]
        if self.n_filler:
            parts.append(f"{self.n_filler} filler tok")
        total = sum(self.by_drafter.values())
        if method and total:
            order = sorted(self.by_drafter.items(), key=lambda kv: (kv[0] == "none", -kv[1]))
            parts.append(f"{method}: " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in order))
        return " | ".join(parts)


class SeqSlot:
    """One sequence of the target context and the job it runs (or last ran: its cells stay).

    Every field is declared here. The sequence's own are set here and outlive its jobs; the
    job's are assigned by ``JobStart.start`` (``job_start.py``) each time a job takes the
    sequence (nothing reads them before the first), and stay readable after it ends, until the
    next one."""

    # --- the sequence: its cells and what they hold, across jobs
    seq: int  # its id in the target context (and in the draft model's)
    job: Job | None  # the job it runs; None: free (its cells stay for a later prompt that shares them)
    tokens: list[int]  # prompt + output; the cells hold tokens[:n_cached]
    n_cached: int  # tokens its cells hold
    n_prompt: int  # of ``tokens``, the prompt's
    last_used: float  # when its last job ended: the least recently used is reused first
    wait: tuple[SeqSlot, int] | None  # (slot, n): share its first n cells once computed (``Admission``)

    # --- the job it runs: assigned by ``JobStart.start``
    gen: GenOptions  # the job's settings: its own, or the scheduler's
    t_admit: float  # when the job took this sequence (``time.perf_counter``)
    t_decode: float | None  # when its first decoding pass began; None: still reading its prompt
    output: list[int]  # the tokens it emitted (without an end of generation)
    logprobs: list[TokenLogprob] | None  # the emitted tokens' log-probabilities, when ``gen.logprobs`` asks
    stream: TextStream  # the output as text, stop strings cut
    constraint: Constraint | None  # the grammar's state, when ``gen.grammar`` is set
    draft_sampler: Sampler | None  # the sampler the draft model draws from (exact rule, sampled drafts)
    verifier: Verifier  # what decides which draft tokens are kept, with its own sampler (its own RNG)
    stats: GenerationStats  # the job's counters and timeline
    index: SuffixIndex | None  # auto: the suffix index over the prompt, the output and the run's pool
    edits: EditTracker | None  # auto: the copy of the prompt with the edits learned (rules shared by the run)
    unsent: UnsentOffers | None  # auto: what the copy proposers offered at the last pass that sent no draft
    ngram: NgramDrafter | None  # --method ngram: prompt lookup over this job's tokens
    draft_off: bool  # its drafter faulted: set aside for the rest of this job (it goes on undrafted)
    end_apart: bool  # its prompt's last token goes in the pass after its last chunk (``Scheduler._start``)

    def __init__(self, seq: int):
        self.seq = seq
        self.job = None
        self.tokens = []
        self.n_cached = 0
        self.n_prompt = 0
        self.last_used = 0.0
        self.wait = None

    def copiers(self) -> tuple[SuffixIndex, EditTracker, UnsentOffers]:
        """Auto's copy proposers of this job (``JobStart`` sets all three under auto, none else)."""
        assert self.index is not None and self.edits is not None and self.unsent is not None, "not an auto job"
        return self.index, self.edits, self.unsent

    def lookup(self) -> NgramDrafter:
        """This job's prompt lookup (``--method ngram`` jobs have one)."""
        assert self.ngram is not None, "not an ngram job"
        return self.ngram

    def note(self, event: str, **what: object) -> None:
        """One line of its request's timeline (``GenerationStats.timeline``), up to its first token."""
        job = self.job
        assert job is not None  # a running sequence's request
        if self.stats.ttft_seconds is None:
            self.stats.timeline.append({"at": round(time.perf_counter() - job.arrived, 4), "event": event, **what})

    @property
    def unread(self) -> int:
        """Prompt tokens still to read; the last is evaluated by the first decoding pass."""
        return len(self.tokens) - 1 - self.n_cached

    @property
    def decoding(self) -> bool:
        """Its prompt is read: it is in the passes with its last token and a draft."""
        return self.unread == 0

"""Counters and timings of one generation, kept in one object rather than scattered through the loop."""

from __future__ import annotations

from dataclasses import dataclass, field

# the fields merge adds up as numbers
_SUMMED = ("n_prompt", "n_prompt_reused", "n_prompt_restored", "n_generated", "n_drafted", "n_accepted", "n_substituted", "n_forced", "n_target_passes", "n_eog", "n_filler", "prompt_seconds",
           "decode_seconds", "draft_seconds", "target_seconds", "n_checkpoints", "n_restores", "n_replayed",
           "rollback_seconds", "queue_seconds")


@dataclass
class GenerationStats:
    n_prompt: int = 0
    n_prompt_reused: int = 0  # prompt tokens whose cells another sequence (or an earlier job) computed
    n_prompt_restored: int = 0  # of those, restored from the prompt cache's RAM or disk (``restored_from``)
    restored_from: str | None = None  # "host" or "disk": the prompt cache's tier that served them
    n_generated: int = 0
    n_drafted: int = 0  # draft tokens sent to the target for checking
    n_accepted: int = 0  # of those, kept
    n_substituted: int = 0  # of those, written by an edit learned from the output (auto's edit tracker)
    n_forced: int = 0  # of those, forced by the grammar (--json-schema, --grammar-file, --regex)
    n_target_passes: int = 0  # target forward passes after the prompt (one per step)
    n_eog: int = 0  # end-of-generation tokens the target chose: decided by a pass, never emitted
    n_filler: int = 0  # tokens that ran a pass at a cheaper size (``CostModel.pass_size``), dropped after it
    prompt_seconds: float = 0.0  # prefill of target (and draft), up to the first decode step
    decode_seconds: float = 0.0  # wall time of the decode loop
    draft_seconds: float = 0.0  # time spent inside the drafter
    target_seconds: float = 0.0  # time spent in the target's verify passes (llama_decode)
    first_token_seconds: float | None = None  # from the start of the prompt to the first emitted token
    ttft_seconds: float | None = None  # from the request's arrival to its first token (queue and prompt included)
    queue_seconds: float = 0.0  # from the request's arrival to its admission to a sequence
    request_seconds: float | None = None  # from the request's arrival to its end (the scheduler's jobs)
    # what happened to the request up to its first token, in seconds since it arrived: admission (the cells it
    # reused, copied from which sequence), shared prefixes taken, each pass that read its prompt, the first token
    timeline: list[dict] = field(default_factory=list, repr=False)
    stop_reason: str = ""  # eog | stop | length | context | grammar | interrupted | cancelled | error
    fault: str | None = None  # stop_reason "error": the fault that ended this generation alone (``describe``)
    drafter_fault: str | None = None  # the fault that set this generation's drafter aside (it went on undrafted)
    stop_string: str | None = None  # the stop string that ended it (stop_reason "stop")
    accepted_per_position: list[int] = field(default_factory=list)  # how often draft position i was kept
    drafted_per_position: list[int] = field(default_factory=list)  # how often draft position i was proposed
    steps_by_drafter: dict[str, int] = field(default_factory=dict)  # target passes per proposer ("none": plain)
    draft_lengths: dict[int, int] = field(default_factory=dict)  # histogram of the draft length per pass
    method: str | None = None  # the drafting method of the generation (None: the target alone)
    rollback: str = "partial"  # how the target's memory took rejected drafts back (memory_kinds.Rollback)
    n_checkpoints: int = 0  # target states copied out before a verify pass (checkpoint rollback)
    n_restores: int = 0  # ... and copied back after a partial acceptance
    n_replayed: int = 0  # tokens re-evaluated after a restore (the next pass re-does them first)
    rollback_seconds: float = 0.0  # spent copying states
    # (drafted, accepted) of every target pass, in order: what llama.cpp logs per step at debug level
    steps: list[tuple[int, int]] = field(default_factory=list, repr=False)
    # indices into ``steps`` of the passes whose rejection restored a checkpoint
    restored_steps: list[int] = field(default_factory=list, repr=False)

    @property
    def acceptance_rate(self) -> float | None:
        return self.n_accepted / self.n_drafted if self.n_drafted else None

    @property
    def tokens_per_pass(self) -> float | None:
        """Mean tokens the target decided per pass (the end-of-generation token included, so the
        target alone gives exactly 1.0), up to draft_max + 1."""
        return (self.n_generated + self.n_eog) / self.n_target_passes if self.n_target_passes else None

    @property
    def time_per_output_token(self) -> float | None:
        """Seconds per generated token after the first (TPOT): a request's decoding speed as its
        client sees it, neighbours' passes and prompt chunks included."""
        if self.request_seconds is None or self.ttft_seconds is None or self.n_generated < 2:
            return None
        return (self.request_seconds - self.ttft_seconds) / (self.n_generated - 1)

    @property
    def tokens_per_second(self) -> float | None:
        return self.n_generated / self.decode_seconds if self.decode_seconds > 0 else None

    @property
    def overhead_seconds(self) -> float:
        """Decode-loop time spent outside the two models: Python, sampling, bookkeeping."""
        return max(0.0, self.decode_seconds - self.draft_seconds - self.target_seconds)

    @property
    def acceptance_by_position(self) -> list[float]:
        """Share of the proposals reaching draft position i whose token i was kept."""
        return [a / d if d else 0.0 for a, d in zip(self.accepted_per_position, self.drafted_per_position)]

    def record_step(self, source: str, n_drafted: int) -> None:
        self.steps_by_drafter[source] = self.steps_by_drafter.get(source, 0) + 1
        self.draft_lengths[n_drafted] = self.draft_lengths.get(n_drafted, 0) + 1

    def record_acceptance(self, n_drafted: int, n_accepted: int) -> None:
        self.n_drafted += n_drafted
        self.n_accepted += n_accepted
        for counts in (self.accepted_per_position, self.drafted_per_position):
            if len(counts) < n_drafted:
                counts.extend([0] * (n_drafted - len(counts)))
        for i in range(n_accepted):
            self.accepted_per_position[i] += 1
        for i in range(n_drafted):
            self.drafted_per_position[i] += 1

    def merge(self, other: GenerationStats) -> None:
        """Add ``other`` to these totals (run --batch's). Every field is combined: counts and times
        add up, the per-position and per-key counts add up entry by entry, the per-pass list is
        extended; the time to the first token and the method are the first generation's, and
        ``stop_reason`` and the faults stay as they are (each generation has its own, a batch none)."""
        for name in _SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in ((self.accepted_per_position, other.accepted_per_position),
                             (self.drafted_per_position, other.drafted_per_position)):
            mine.extend([0] * (len(theirs) - len(mine)))
            for i, v in enumerate(theirs):
                mine[i] += v
        counts: tuple[tuple[dict, dict], ...] = ((self.steps_by_drafter, other.steps_by_drafter),
                                                 (self.draft_lengths, other.draft_lengths))
        for mine_by, theirs_by in counts:
            for k, v in theirs_by.items():
                mine_by[k] = mine_by.get(k, 0) + v
        self.restored_steps.extend(len(self.steps) + i for i in other.restored_steps)
        self.steps.extend(other.steps)
        if self.first_token_seconds is None:
            self.first_token_seconds = other.first_token_seconds
        if self.ttft_seconds is None:
            self.ttft_seconds = other.ttft_seconds
        self.method = self.method or other.method

    def split(self) -> str:
        """How the passes were shared between proposers, e.g. ``auto: ngram 61%, none 39%``."""
        total = sum(self.steps_by_drafter.values())
        if not total:
            return ""
        order = sorted(self.steps_by_drafter.items(), key=lambda kv: (kv[0] == "none", -kv[1]))
        return f"{self.method}: " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in order)

    def to_dict(self, *, rounded: bool = True) -> dict:
        """The reported stats: the one list of them, for ``run --json`` (with ``Result.to_dict``)
        and bench's samples. Times are rounded to the microsecond and per-position shares to 4
        places; ``rounded=False`` keeps them as measured."""
        sec = (lambda x: round(x, 6)) if rounded else (lambda x: x)
        share = (lambda x: round(x, 4)) if rounded else (lambda x: x)
        return {
            "n_prompt": self.n_prompt,
            "n_prompt_reused": self.n_prompt_reused,
            "n_prompt_restored": self.n_prompt_restored,
            "restored_from": self.restored_from,
            "n_generated": self.n_generated,
            "prompt_seconds": sec(self.prompt_seconds),
            "decode_seconds": sec(self.decode_seconds),
            "first_token_seconds": self.first_token_seconds,
            "ttft_seconds": self.ttft_seconds,
            "queue_seconds": sec(self.queue_seconds),
            "request_seconds": self.request_seconds,
            "tokens_per_second": self.tokens_per_second,
            "n_drafted": self.n_drafted,
            "n_accepted": self.n_accepted,
            "n_substituted": self.n_substituted,
            "n_forced": self.n_forced,
            "acceptance_rate": self.acceptance_rate,
            "tokens_per_pass": self.tokens_per_pass,
            "n_target_passes": self.n_target_passes,
            "n_filler": self.n_filler,
            "draft_seconds": sec(self.draft_seconds),
            "target_seconds": sec(self.target_seconds),
            "overhead_seconds": sec(self.overhead_seconds),
            "accepted_per_position": list(self.accepted_per_position),
            "acceptance_by_position": [share(a) for a in self.acceptance_by_position],
            "draft_lengths": {str(k): v for k, v in sorted(self.draft_lengths.items())},
            "steps_by_drafter": dict(self.steps_by_drafter),
            "rollback": self.rollback,
            "n_checkpoints": self.n_checkpoints,
            "n_restores": self.n_restores,
            "n_replayed": self.n_replayed,
            "rollback_seconds": sec(self.rollback_seconds),
            "stop_reason": self.stop_reason,
            "fault": self.fault,
            "drafter_fault": self.drafter_fault,
        }

    def summary(self, tokens_per_second: float | None = None) -> str:
        """The one-line stderr summary of `specdec run`. ``tokens_per_second``: the rate to show
        instead of the decoding rate (a batch's: generated tokens per second of the whole batch,
        prompts included, as its many-at-once summary gives it)."""
        rate = tokens_per_second if tokens_per_second is not None else self.tokens_per_second
        parts = [
            f"prompt {self.n_prompt} tok",
            f"generated {self.n_generated} tok",
            f"{rate:.2f} tok/s" if rate else "- tok/s",
        ]
        if self.n_drafted:
            parts += [
                f"drafted {self.n_drafted}",
                f"accepted {self.n_accepted} ({100 * (self.acceptance_rate or 0):.1f}%)",
                f"{self.tokens_per_pass:.2f} tok/pass",
            ]
        elif self.n_target_passes:
            parts.append(f"{self.tokens_per_pass:.2f} tok/pass")
        if self.n_restores:
            parts.append(f"restored {self.n_restores}/{self.n_checkpoints} checkpoints")
        if self.method == "auto" and self.split():
            parts.append(self.split())
        if self.stop_reason:
            parts.append(f"stop: {self.stop_reason}")
        return " | ".join(parts)

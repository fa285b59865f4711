"""Counters and timings of one generation, kept in one object rather than scattered through the loop."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class GenerationStats:
    n_prompt: int = 0
    n_generated: int = 0
    n_drafted: int = 0  # draft tokens sent to the target for checking
    n_accepted: int = 0  # of those, kept
    n_target_passes: int = 0  # target forward passes after the prompt (one per step)
    prompt_seconds: float = 0.0  # prefill of target (and draft), up to the first decode step
    decode_seconds: float = 0.0  # wall time of the decode loop
    draft_seconds: float = 0.0  # time spent inside the drafter
    target_seconds: float = 0.0  # time spent in the target's verify passes (llama_decode)
    first_token_seconds: float | None = None  # from the start of the prompt to the first emitted token
    stop_reason: str = ""  # eog | stop | length | context | interrupted
    accepted_per_position: list[int] = field(default_factory=list)  # how often draft position i was kept
    # (drafted, accepted) of every target pass, in order: what llama.cpp logs per step at debug level
    steps: list[tuple[int, int]] = field(default_factory=list, repr=False)

    @property
    def acceptance_rate(self) -> float | None:
        return self.n_accepted / self.n_drafted if self.n_drafted else None

    @property
    def tokens_per_pass(self) -> float | None:
        """Mean tokens emitted per target pass: 1.0 without speculation, up to draft_max + 1."""
        return self.n_generated / self.n_target_passes if self.n_target_passes else None

    @property
    def tokens_per_second(self) -> float | None:
        return self.n_generated / self.decode_seconds if self.decode_seconds > 0 else None

    @property
    def overhead_seconds(self) -> float:
        """Decode-loop time spent outside the two models: Python, sampling, bookkeeping."""
        return max(0.0, self.decode_seconds - self.draft_seconds - self.target_seconds)

    def record_acceptance(self, n_drafted: int, n_accepted: int) -> None:
        self.n_drafted += n_drafted
        self.n_accepted += n_accepted
        if len(self.accepted_per_position) < n_drafted:
            self.accepted_per_position.extend([0] * (n_drafted - len(self.accepted_per_position)))
        for i in range(n_accepted):
            self.accepted_per_position[i] += 1

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["steps"]  # per-pass detail; the totals above summarise it
        d["acceptance_rate"] = self.acceptance_rate
        d["tokens_per_pass"] = self.tokens_per_pass
        d["tokens_per_second"] = self.tokens_per_second
        d["overhead_seconds"] = self.overhead_seconds
        return d

    def summary(self) -> str:
        """The one-line stderr summary of `specdec run`."""
        parts = [
            f"prompt {self.n_prompt} tok",
            f"generated {self.n_generated} tok",
            f"{self.tokens_per_second:.2f} tok/s" if self.tokens_per_second else "- tok/s",
        ]
        if self.n_drafted:
            parts += [
                f"drafted {self.n_drafted}",
                f"accepted {self.n_accepted} ({100 * (self.acceptance_rate or 0):.1f}%)",
                f"{self.tokens_per_pass:.2f} tok/pass",
            ]
        elif self.n_target_passes:
            parts.append(f"{self.tokens_per_pass:.2f} tok/pass")
        if self.stop_reason:
            parts.append(f"stop: {self.stop_reason}")
        return " | ".join(parts)

"""What one generation gives back: the text, the tokens, the stats, and how it ran.

The trace (``TracePoint``: what the target saw at each emitted token) is here rather than beside
the loop that records it (``decode/session.py``), so that ``verify/divergence.py``, which reads
traces, needs nothing from the decoding above it."""

from __future__ import annotations

from dataclasses import dataclass

from .stats import GenerationStats


@dataclass
class TracePoint:
    """What the target saw when it emitted a token: its best candidates and their logits."""

    index: int  # index of the generated token
    token: int
    top_ids: list[int]
    top_logits: list[float]

    def logit_of(self, token: int) -> float | None:
        for t, v in zip(self.top_ids, self.top_logits):
            if t == token:
                return v
        return None


@dataclass
class Result:
    text: str
    prompt_tokens: list[int]
    tokens: list[int]
    stats: GenerationStats
    seed: int | None = None
    trace: list[TracePoint] | None = None
    verify: str = "greedy"  # the rule this generation used: greedy, match or exact
    cost_model: dict | None = None  # the costs auto decided with (None for other methods)
    logprobs: list | None = None  # each output token's ``TokenLogprob``, when asked (``GenOptions.logprobs``)

    @property
    def interrupted(self) -> bool:
        return self.stats.stop_reason == "interrupted"

    def to_dict(self) -> dict:
        """``run --json``'s object: the text and tokens, the stats (``GenerationStats.to_dict``),
        and how this generation ran."""
        return {
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "tokens": self.tokens,
            **self.stats.to_dict(),
            "cost_model": self.cost_model,
            "seed": self.seed,
            "verify": self.verify,
        }

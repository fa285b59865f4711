"""What one generation gives back: the text, the tokens, the stats, and how it ran."""

from __future__ import annotations

from dataclasses import dataclass

from .session import TracePoint
from .stats import GenerationStats


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

"""Proving that a speculative run is the target's own output, or that any difference is a near-tie.

llama.cpp's logits shift slightly with batch shape (a token verified inside a batch of 5
is not computed bit-for-bit like the same token decoded alone), so a greedy speculative
run can leave plain decoding where the target's two best tokens are nearly tied. This
module finds the first divergence between a plain run and a speculative run, both traced,
and measures the two candidates' logits in the plain run: within ``TIE_LOGITS`` of each
other is a near-tie, anything wider would be a bug.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..result import TracePoint

TIE_LOGITS = 1.0


@dataclass
class Divergence:
    index: int  # position in the generated tokens
    plain_token: int
    spec_token: int
    plain_logit: float  # in the plain run, the logit of the token plain decoding chose
    spec_logit: float | None  # in the plain run, the logit of the token the speculative run chose
    margin: float | None  # plain_logit - spec_logit
    near_tie: bool

    def to_dict(self) -> dict:
        return asdict(self)


def first_divergence(
    plain_tokens: list[int],
    plain_trace: list[TracePoint],
    spec_tokens: list[int],
    *,
    tie: float = TIE_LOGITS,
) -> Divergence | None:
    """None when one output is a prefix of the other (identical up to where both stopped)."""
    for i, (a, b) in enumerate(zip(plain_tokens, spec_tokens)):
        if a != b:
            point = plain_trace[i]
            plain_logit = point.logit_of(a)
            spec_logit = point.logit_of(b)
            margin = None if spec_logit is None or plain_logit is None else plain_logit - spec_logit
            return Divergence(
                index=i,
                plain_token=a,
                spec_token=b,
                plain_logit=plain_logit if plain_logit is not None else float("nan"),
                spec_logit=spec_logit,
                margin=margin,
                near_tie=margin is not None and margin <= tie,
            )
    return None


def argmax_violations(trace: list[TracePoint]) -> list[TracePoint]:
    """Emitted tokens that were not the target's argmax at their position (greedy runs: must be none)."""
    bad = []
    for p in trace:
        own = p.logit_of(p.token)
        if own is None or own < p.top_logits[0]:
            bad.append(p)
    return bad

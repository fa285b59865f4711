"""The target's own log-probabilities of the tokens it kept, as OpenAI's ``logprobs`` report them.

Read off the verify pass's raw logits (before any grammar's mask or sampling transform), so
they are the model's belief, not the constrained or tempered distribution: what vLLM reports
by default too. One log-sum-exp per kept token, and a partial sort for the alternatives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TokenLogprob:
    token: int
    logprob: float
    top: list[tuple[int, float]]  # the most likely tokens at this place and their log-probabilities


def logprobs_of(rows, tokens: list[int], n_top: int) -> list[TokenLogprob]:
    """``tokens[i]``'s log-probability under ``rows(i)`` (a row of raw logits), with ``n_top``
    alternatives each."""
    out = []
    for i, tok in enumerate(tokens):
        row = np.asarray(rows(i), dtype=np.float64)
        peak = row.max()
        lse = peak + np.log(np.exp(row - peak).sum())
        top: list[tuple[int, float]] = []
        if n_top > 0:
            ids = np.argpartition(row, -n_top)[-n_top:]
            ids = ids[np.argsort(-row[ids], kind="stable")]
            top = [(int(t), float(row[t] - lse)) for t in ids]
        out.append(TokenLogprob(int(tok), float(row[tok] - lse), top))
    return out

"""The drafting loop the model drafter and the heads share: the draft's best token per position,
for as long as the draft is confident enough, measured as llama.cpp's draft sampler does
(softmax over the top 10 logits, probability of the best)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

TOP_K_FOR_CONFIDENCE = 10  # llama.cpp's draft sampler keeps the 10 best candidates

# (logits of a position, their argmax) -> whether to draft that position
KeepRule = Callable[[np.ndarray, int], bool]


def top_k_confidence(logits: np.ndarray, best: int) -> float:
    """Probability of ``best`` after keeping the top-k logits and renormalising."""
    top = np.partition(logits, -TOP_K_FOR_CONFIDENCE)[-TOP_K_FOR_CONFIDENCE:]
    return float(1.0 / np.exp(top - logits[best]).sum())


def p_min_rule(p_min: float) -> KeepRule | None:
    """llama.cpp's p-min cut: stop at the first position whose confidence is below ``p_min``
    (None when ``p_min`` is 0 or less: no cut)."""
    if p_min <= 0.0:
        return None
    return lambda logits, best: not top_k_confidence(logits, best) < p_min


def gated_rule(p_min: float, stop_rule: Callable[[float], bool] | None, confs: list[float]) -> KeepRule | None:
    """The keep rule of a drafter that auto may drive: ``stop_rule(confidence)`` when auto set
    one (it decides by expected speed; p-min is then off), else llama.cpp's p-min cut. The
    confidences of the kept positions go to ``confs`` (auto calibrates on them)."""
    if stop_rule is None and p_min <= 0.0:
        return None

    def keep(logits: np.ndarray, best: int) -> bool:
        conf = top_k_confidence(logits, best)
        if not (stop_rule(conf) if stop_rule is not None else conf >= p_min):
            return False
        confs.append(conf)
        return True

    return keep


def confident_argmax(
    n_max: int,
    logits_at: Callable[[int], np.ndarray],
    *,
    keep: KeepRule | None = None,
    advance: Callable[[int, int], None] | None = None,
    pick: Callable[[np.ndarray], int] | None = None,
) -> list[int]:
    """Draft up to ``n_max`` tokens (at least one position is looked at).

    ``logits_at(i)``: the logits of draft position i; ``keep(logits, argmax)``: whether to draft
    that position, decided before its token is chosen (None: always); ``pick(logits)``: the
    token of a kept position (None: the argmax; a sampled proposal draws it instead);
    ``advance(i, token)``: evaluate position i's token so that position i + 1's logits exist
    (None for a block, whose positions are all evaluated already). The last token is never
    evaluated: the target verifies it first.
    """
    out: list[int] = []
    i = 0
    while True:
        logits = logits_at(i)
        best = int(logits.argmax())
        if keep is not None and not keep(logits, best):
            break
        tok = best if pick is None else pick(logits)
        out.append(tok)
        if len(out) >= n_max:
            break
        if advance is not None:
            advance(i, tok)
        i += 1
    return out

"""The grammar in a verify pass: the draft cut to what it allows, a mask for each row, and the
check that every kept token is one its row's mask allowed (``PassMasks``), for the scheduler
and a single sequence alike (``decode/scheduler.py``, ``decode/session.py``).

Apart from ``constraint.py``, which holds the grammar and its matcher (compiling, masks,
consuming): this module is what a speculative pass adds on top of a matcher, and the one
place that says why no path keeps a token the grammar forbids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..verify.verifiers import Proposal
from .constraint import Constraint, ConstraintViolation, apply_mask

_NEG_INF = np.float32(-np.inf)


def through_end(tokens: list[int], is_eog) -> list[int]:
    """``tokens`` up to and including the first end of generation: what a grammar consumes of a
    verified pass (a draft may run past the end, and the target's token after it is never kept)."""
    for i, t in enumerate(tokens):
        if is_eog(t):
            return tokens[: i + 1]
    return tokens


def draft_under(constraint: Constraint, drafter, history: list[int], n_draft: int):
    """A drafter's proposal under a grammar: the tokens the grammar forces first (the masked target
    must choose them: drafts certain to be kept, needing no draft model and no guess), the
    drafter's after them. Auto weighs the forced tokens like any draft (``propose_after``); other
    drafters send them all. Returns (proposal, forced tokens at its head). Cutting it to what the
    grammar allows is ``PassMasks.along``'s, for every drafter alike."""
    forced = constraint.forced_tokens()[:n_draft]
    if hasattr(drafter, "propose_after"):
        proposal = drafter.propose_after(history, forced, n_draft)
    elif n_draft > len(forced):
        proposal = Proposal(forced + drafter.propose(history + forced, n_draft - len(forced)).tokens)
    else:
        proposal = Proposal(forced)
    return proposal, min(len(forced), len(proposal.tokens))


def only_allowed(masks: np.ndarray) -> list[int | None]:
    """Per row of ``masks``, the one token it allows, or None where it allows several (or none).

    Such a row needs no logits: whatever the target's scores, the masked choice is that token
    (greedy, sampled or verified exactly). On a CPU the output row of a 150k vocabulary costs
    about a quarter of a decode step (8 of 30 ms for the 1.5B target on 2 cores), so the
    structure a JSON Schema forces is cheaper to read when llama.cpp skips those rows."""
    return [int(np.argmax(m)) if np.count_nonzero(m) == 1 else None for m in masks]


@dataclass
class PassMasks:
    """The grammar's side of one verify pass, taken before it: the draft the pass carries, and a
    mask for each of its rows.

    Why no kept token can be one the grammar forbids, whatever drafted it (suffix index, edit
    tracker, forced tokens, draft model, heads, MTP, or a drafter gone wrong):

    1. ``along`` cuts the draft before the first token the grammar rejects (``validate_draft``)
       and takes the masks along that cut draft, from the grammar's state after the kept
       prefix. ``proposal`` *is* that cut draft: the pass carries it and the verifier checks it,
       so the masks and the draft they were taken along are one object, never two that could
       drift apart (a policy that shortens a draft afterwards must call ``along`` again).
    2. Every row the verifier reads comes through ``rows``, masked: row i allows only what the
       grammar allows after the first i drafted tokens. A verifier keeps draft token i only if
       it is that row's (masked) choice, and its own token is a masked choice too, so every
       token it returns was allowed by the mask of its row. A row whose mask allows nothing,
       or whose allowed scores are not numbers, is a fault (``RowFault``), never a token.
    3. ``check`` confirms that before anything is consumed: a token outside its row's mask
       raises here, naming the row, instead of corrupting the grammar's state. ``consume``
       then validates the tokens again against the matcher itself.
    """

    proposal: Proposal
    masks: np.ndarray
    only: list[int | None]  # ``only_allowed(masks)``

    @classmethod
    def along(cls, constraint: Constraint, proposal: Proposal) -> PassMasks:
        masks = constraint.masks_along(proposal.tokens)  # as many rows as the allowed prefix, plus one
        return cls(proposal.truncated(masks.shape[0] - 1), masks, only_allowed(masks))

    def wanted(self) -> list[bool]:
        """Per row, whether llama.cpp must compute its logits."""
        return [t is None for t in self.only]

    @property
    def every_row(self) -> bool:
        """No row was left without logits (the pass costs what the cost curve prices)."""
        return all(t is None for t in self.only)

    def rows(self, rows):
        return masked_rows(rows, self.masks, self.only)

    def check(self, accepted: list[int]) -> None:
        """Raise ``ConstraintViolation`` unless ``accepted[i]`` is allowed by row i's mask for every
        i (at most the pass's rows: a verifier never returns more)."""
        if len(accepted) > len(self.masks):
            raise ConstraintViolation(f"{len(accepted)} tokens from a pass of {len(self.masks)} rows")
        for i, t in enumerate(accepted):
            if not (0 <= t < self.masks.shape[1] and self.masks[i, t]):
                raise ConstraintViolation(f"token {t} at row {i} is outside that row's mask")


def masked_rows(rows, masks: np.ndarray, only: list[int | None] | None = None):
    """``rows`` (row index -> logits) with each row masked to what the grammar allows there; each
    row is copied, since the context's logits are shared with the next pass. Where ``only[i]``
    names the one token a row allows, the row is that token's alone and ``rows(i)`` is not read
    (the pass may have computed no logits there)."""
    width = masks.shape[-1]

    def row(i: int) -> np.ndarray:
        if only is not None and i < len(only) and only[i] is not None:
            out = np.full(width, _NEG_INF, dtype=np.float32)
            out[only[i]] = 0.0
            return out
        out = np.array(rows(i), dtype=np.float32)
        apply_mask(out, masks[i])
        return out

    return row

"""The draft model for many sequences at once: one context, a sequence per slot, one pass per step.

When the scheduler decodes several sequences together, their draft-model proposals are made
together too: the draft's cache of every asking sequence is caught up in one pass (each drops
what differs from its history, as ``model.py`` does for one), then each draft step is one pass
holding the next token of every sequence still drafting. A sequence stops at the length the
scheduler planned for it, or earlier when ``stop(seq, depth, confidence)`` says the next token
no longer pays (the confidence is the draft's top-10 probability of its best token, decided
before anything is drawn, so a sampled proposal stays a draw from q).

Only drafts whose memory can drop positions (attention caches) come here; the scheduler runs
recurrent and hybrid drafts one sequence at a time through ``model.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..llama.context import Context
from ..verify.verifiers import Dist, Proposal, Sampler
from .greedy import top_k_confidence


@dataclass
class Ask:
    """One sequence's request: draft up to ``n`` tokens after ``history`` (sampled from q when
    ``sampler`` is given)."""

    seq: int
    history: list[int]
    n: int
    sampler: Sampler | None = None
    # filled in by propose()
    tokens: list[int] = field(default_factory=list)
    q: list[Dist] = field(default_factory=list)
    confidences: list[float] = field(default_factory=list)

    def proposal(self) -> Proposal:
        return Proposal(self.tokens, self.q if self.sampler is not None else None)


Stop = Callable[[int, int, float], bool]  # (seq, depth, confidence) -> stop before this token
# tokens behind after which a sequence's catch-up is a prompt read, not a step's: more than a
# draft step's kept tokens can be (a draft of up to 64, and the target's own token)
READ_AFTER = 66


class BatchModelDrafter:
    method = "draft"

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._cached: dict[int, list[int]] = {}  # seq -> tokens its cells hold, positions 0..
        # seconds the last ``propose`` spent reading prompts (a sequence new to the draft, or
        # one that has not drafted for ``READ_AFTER`` tokens): a prefill, not a cost of drafting
        self.read_seconds = 0.0

    def reset(self) -> None:
        """A new run: nothing cached."""
        self.ctx.kv_clear()
        self._cached.clear()

    def forget(self, seq: int) -> None:
        """The sequence's job ended; its cells are free for the next one."""
        if self._cached.pop(seq, None) is not None:
            self.ctx.seq_rm(seq, -1, -1)

    def propose(self, asks: list[Ask], stop: Stop | None = None) -> None:
        """Fill each ask's ``tokens`` (and ``q``, ``confidences``)."""
        self.read_seconds = 0.0
        asks = [a for a in asks if a.n > 0]
        if not asks:
            return
        kept = {a.seq: self._kept(a) for a in asks}
        reading = [a for a in asks if len(a.history) - kept[a.seq] > READ_AFTER]
        rows: dict[int, np.ndarray] = {}
        if reading:  # in passes of their own, timed apart: the draft's prefill of those prompts
            t0 = time.perf_counter()
            rows = self._catch_up(reading, kept)
            self.read_seconds = time.perf_counter() - t0
        rows |= self._catch_up([a for a in asks if a not in reading], kept)
        depth = 0
        live = list(asks)
        while live:
            nxt: list[Ask] = []
            for a in live:
                logits = rows[a.seq]
                best = int(logits.argmax())
                conf = top_k_confidence(logits, best)
                if stop is not None and stop(a.seq, depth, conf):
                    continue
                if a.sampler is not None:
                    ids, probs = a.sampler.distribution(logits)
                    a.q.append((ids, probs))
                    tok = a.sampler.draw(ids, probs)
                else:
                    tok = best
                a.tokens.append(tok)
                a.confidences.append(conf)
                if len(a.tokens) < a.n:
                    nxt.append(a)
            if not nxt:
                break
            # the next step: every sequence still drafting evaluates its last drafted token
            pos = [len(a.history) + depth for a in nxt]
            self.ctx.decode_many([a.tokens[-1] for a in nxt], pos, [a.seq for a in nxt], [True] * len(nxt))
            for i, a in enumerate(nxt):
                self._cached[a.seq].append(a.tokens[-1])
                rows[a.seq] = self.ctx.logits(i)
            live = nxt
            depth += 1

    def _kept(self, a: Ask) -> int:
        """How many of ``a``'s history tokens the draft's cells already hold (never the last one:
        it is always evaluated again, for the logits after it)."""
        cached = self._cached.get(a.seq, [])
        same, limit = 0, min(len(cached), len(a.history) - 1)
        while same < limit and cached[same] == a.history[same]:
            same += 1
        return same

    def _catch_up(self, asks: list[Ask], kept: dict[int, int]) -> dict[int, np.ndarray]:
        """Make each asking sequence's cells hold its history (``kept``: what they hold of it
        already); return the logits after it.

        Everything missing goes into as few passes as the batch allows; a row is copied out
        when its sequence's last token was in a pass, since the next pass overwrites it."""
        ctx = self.ctx
        entries: list[tuple[int, int, int, bool]] = []  # token, pos, seq, output
        for a in asks:
            same = kept[a.seq]
            if same < len(self._cached.get(a.seq, [])):
                ctx.seq_rm(a.seq, same, -1)
            missing = a.history[same:]
            for i, tok in enumerate(missing):
                entries.append((tok, same + i, a.seq, i == len(missing) - 1))
            self._cached[a.seq] = list(a.history)
        rows: dict[int, np.ndarray] = {}
        cap = ctx.n_batch
        for start in range(0, len(entries), cap):
            chunk = entries[start : start + cap]
            ctx.decode_many([e[0] for e in chunk], [e[1] for e in chunk], [e[2] for e in chunk],
                            [e[3] for e in chunk])
            for i, e in enumerate(chunk):
                if e[3]:
                    rows[e[2]] = np.array(ctx.logits(i))
        return rows

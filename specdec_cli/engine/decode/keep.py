"""What each sequence keeps of a shared pass: the verification half of the scheduler.

After a pass, each decoding sequence reads its own rows (from its ``base`` in the pass),
its verifier keeps the draft's agreeing prefix and the target's own next token, the rejected
cells are taken back from that sequence alone (``seq_rm``), and what was kept goes to the
drafters' calibration, the figures, the grammar's state and the request's text. A sequence's
rows and verifier are its own, so what it keeps never depends on its neighbours in the pass.
Ending the job (``Scheduler._finish``) is the scheduler's; this says why it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..drafters.draft import Draft
from ..structured.pass_masks import PassMasks, through_end
from ..verify.logprobs import logprobs_of
from .jobs import RunStats, SeqSlot
from .pass_drafts import PassDrafter
from .pass_profile import PassProfile
from .session import Session

if TYPE_CHECKING:
    from ..llama.context import Context


class Keeper:
    """Verifies, counts and emits a sequence's part of a pass, timing each stage into ``profile``."""

    def __init__(self, ctx: Context, drafter: PassDrafter, run: RunStats, is_eog: Callable[[int], bool],
                 profile: PassProfile):
        self.ctx = ctx
        self.drafter = drafter
        self.run = run
        self.is_eog = is_eog
        self.profile = profile

    def keep(self, s: SeqSlot, d: Draft, base: int, dt: float, draft_share: float,
             masks: PassMasks | None = None) -> str:
        """What ``s`` keeps of its rows of the pass (from row ``base``) and of its draft ``d``: the
        rejected cells taken back, the kept tokens counted, emitted and streamed. Returns why its
        job ends ("" while it goes on). ``masks``: the grammar's over the pass's rows of ``s``,
        taken before the pass (for a sequence whose prompt ended in it, here)."""
        prof = self.profile
        if s.t_decode is None:
            s.t_decode = time.perf_counter() - dt
        with prof.stage("verify"):
            accepted = self._accepted(s, d, base, masks)
            n_kept = len(accepted) - 1
            if n_kept < len(d.tokens):
                self.ctx.seq_rm(s.seq, s.n_cached + 1 + n_kept, -1)
            s.n_cached += 1 + n_kept
        with prof.stage("learn"):
            self.drafter.learn(d, n_kept)
            self._count_draft(s, d, n_kept, dt, draft_share)
        with prof.stage("emit"):
            emit, reason = Session._cut(accepted, s.gen.max_tokens - len(s.output), self.is_eog)
            if s.constraint is not None:
                s.constraint.consume(through_end(accepted, self.is_eog))
                if s.constraint.is_stopped() or (reason == "eog" and s.constraint.is_accepting()):
                    reason = "grammar"
            s.tokens.extend(accepted)
            s.output.extend(emit)
            if self._emit(s, emit, n_kept, base):
                reason = "stop"
        if reason:
            s.stats.n_eog += reason in ("eog", "grammar") and len(emit) < len(accepted)
        return reason

    def _accepted(self, s: SeqSlot, d: Draft, base: int, masks: PassMasks | None) -> list[int]:
        """The tokens ``s``'s verifier keeps: the draft's agreeing prefix and the target's own next
        token, every row it reads masked under a grammar, each kept token checked against its
        row's mask before anything takes it."""
        ctx = self.ctx
        rows = lambda i: ctx.logits(base + i)  # noqa: E731
        if s.constraint is not None and masks is None:  # its prompt ended in this pass: nothing drafted
            masks = PassMasks.along(s.constraint, d.proposal)
        if masks is not None:
            rows = masks.rows(rows)
        accepted = s.verifier.verify(rows, d.proposal)
        if masks is not None:
            masks.check(accepted)  # each token within its row's mask, before anything takes it
        return accepted

    def _count_draft(self, s: SeqSlot, d: Draft, n_kept: int, dt: float, draft_share: float) -> None:
        """The pass in ``s``'s figures and the run's: its time, and what its draft's proposer sent
        and got kept (by source: the stats say which proposer paid)."""
        st, run = s.stats, self.run
        draft = d.tokens
        st.n_target_passes += 1
        st.target_seconds += dt
        st.draft_seconds += draft_share
        st.steps.append((len(draft), n_kept))
        st.record_step(d.source, len(draft))
        run.by_drafter[d.source] = run.by_drafter.get(d.source, 0) + 1
        if draft:
            st.record_acceptance(len(draft), n_kept)
            st.n_substituted += d.proposal.substituted(n_kept)
            st.n_forced += min(d.n_forced, n_kept)
            run.drafted[d.source] = run.drafted.get(d.source, 0) + len(draft)
            run.accepted[d.source] = run.accepted.get(d.source, 0) + n_kept

    def _emit(self, s: SeqSlot, emit: list[int], n_kept: int, base: int) -> bool:
        """The pass's emitted tokens of ``s`` out to its request: their log-probabilities where it
        asks, its first token's time, its text as it becomes final. Whether a stop string ended it."""
        st, job = s.stats, s.job
        assert job is not None  # a decoding sequence runs one
        n_top = s.gen.logprobs
        if s.logprobs is not None and emit and n_top is not None:  # a list where the job asks for them
            got = logprobs_of(lambda i: self.ctx.logits(base + i), emit, n_top)
            s.logprobs += got
            if job.on_logprobs is not None:
                job.on_logprobs(got)
        st.n_generated += len(emit)
        if st.first_token_seconds is None:
            now = time.perf_counter()
            st.first_token_seconds = now - s.t_admit
            st.ttft_seconds = now - job.arrived
            st.timeline.append({"at": round(st.ttft_seconds, 4), "event": "first token"})
        if not emit:
            return False
        segs = s.stream.push(emit, [i < n_kept for i in range(len(emit))])
        if segs and job.on_text is not None:
            job.on_text(segs)
        return s.stream.stopped

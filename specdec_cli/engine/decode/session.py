"""One generation: prefill, then draft -> verify -> accept -> roll back, until a stop.

Each step sends [last token, draft...] to the target in one batch with logits at those
positions only, keeps what the verifier accepts, and takes the rejected positions back out of
the target's memory (``verify/rollback.py``; the drafter keeps its own state in step). Without a
drafter the same loop is plain one-token-at-a-time decoding: the baseline runs the identical
code path.

Where the memory can only be checkpointed (recurrent and some hybrid models), a partial
acceptance restores the state from before the pass, so the kept tokens are no longer in it.
They were emitted already; the next pass re-evaluates them ahead of the last token ("replay")
and drafts nothing, exactly as llama.cpp's speculative-simple makes the accepted tokens the
next pass's draft. A fully accepted pass restores nothing.

The drafter proposes (a ``Proposal``: tokens, plus the draft's distribution per position when
it sampled them) and the verifier decides; the loop only carries the proposal between them.
``draft_sampler`` is the generation's ``Sampler`` when the drafter should sample its
proposals (exact verification at temperature > 0); the verifier holds the same sampler, so a
generation draws every random number from one RNG.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np

from ...models.memory_kinds import Rollback
from ..drafters.base import Drafter
from ..errors import describe
from ..llama.context import Context
from ..llama.library import SEQ
from ..policy.costmodel import CostModel
from ..promptcache.cache import PromptCache
from ..result import TracePoint
from ..stats import GenerationStats
from ..structured.pass_masks import PassMasks, draft_under, through_end
from ..verify.rollback import CacheRollback
from ..verify.verifiers import Proposal, Sampler, Verifier

TRACE_TOP = 8  # candidates kept per position when tracing
Rows = Callable[[int], np.ndarray]  # row index -> the target's logits there (as a verifier reads them)
_NO_PROPOSAL = Proposal([])  # shared, never mutated


@dataclass
class Step:
    """Tokens emitted by one target pass; ``from_draft[i]`` is True when the draft proposed token i."""

    tokens: list[int]
    from_draft: list[bool]


class Session:
    def __init__(
        self,
        target: Context,
        verifier: Verifier,
        drafter: Drafter | None = None,
        *,
        draft_max: int = 0,
        trace: list[TracePoint] | None = None,
        draft_sampler: Sampler | None = None,
        costs: CostModel | None = None,
        rollback: CacheRollback | None = None,
        n_ctx: int | None = None,
        constraint=None,
        prompt_cache: PromptCache | None = None,
    ):
        """``n_ctx``: the positions this generation may use (default: the context's; a context
        made for several sequences holds more than one of them may take). ``constraint``: a
        grammar's state (``constraint.Constraint``): every row the target decides from is masked
        to what it allows, drafts start with the tokens it forces and end before the first it
        rejects, and the generation stops when it is complete (stop reason "grammar").
        ``prompt_cache``: where a long prompt's head may be restored from, and its cells kept
        once read (``engine/promptcache``)."""
        self.constraint = constraint
        self.prompt_cache = prompt_cache
        self.target = target
        self.rollback = rollback or CacheRollback(target, Rollback.PARTIAL)
        self.verifier = verifier
        self.drafter = drafter
        self.draft_sampler = draft_sampler
        self.draft_max = draft_max if drafter is not None else 0
        self.trace = trace
        self.costs = costs  # every verify pass is timed into it, by batch size
        self.n_ctx = n_ctx or target.n_ctx
        self.stats = GenerationStats(method=drafter.method if drafter is not None else None,
                                     rollback=str(self.rollback.kind))

    def run(self, prompt: list[int], max_tokens: int) -> Generator[Step, None, None]:
        """Yield the emitted tokens step by step; ``self.stats`` is final once the iterator ends."""
        st = self.stats
        st.n_prompt = len(prompt)
        t_start = time.perf_counter()
        reads_states = self._prefill(prompt)
        t_loop = time.perf_counter()
        st.prompt_seconds = t_loop - t_start
        history = list(prompt)  # every token so far; its last one is not in the target's cache yet
        is_eog = self.target.model.is_eog
        rb = self.rollback
        rb.forget()
        cap = rb.max_draft
        draft_max = self.draft_max if cap is None else min(self.draft_max, cap)
        replay: list[int] = []  # tokens before the last one that a restored checkpoint took out
        cons = self.constraint
        # a pass may run at a larger size the curve says is cheaper, filled with tokens nobody reads;
        # not where the drafter reads the states of every token of the pass
        pads = self.costs is not None and self.target.can_pad and not reads_states
        try:
            while st.n_generated < max_tokens:
                n_cached = len(history) - 1 - len(replay)  # positions the target's memory holds
                room = self.n_ctx - len(history)  # free positions after the last token
                if room < 0:
                    st.stop_reason = "context"
                    return
                n_draft = 0 if replay or self.drafter is None else min(draft_max, room, max_tokens - st.n_generated - 1)
                proposal, n_forced, masks = self._proposal(history, n_draft)
                batch = [*replay, history[-1], *proposal.tokens]
                rows = self._target_pass(batch, n_cached, len(replay), masks, pads and not replay)
                accepted = self.verifier.verify(rows, proposal)
                if masks is not None:
                    masks.check(accepted)
                n_kept = len(accepted) - 1
                if self.trace is not None:
                    self._record(self.trace, rows, accepted, st.n_generated)
                self._learn(proposal, n_forced, n_kept, batch, n_cached)
                replay = self._take_back(history, accepted, n_kept, len(proposal.tokens))
                emit, reason = self._cut(accepted, max_tokens - st.n_generated, is_eog)
                if cons is not None:
                    cons.consume(through_end(accepted, is_eog))
                    if cons.is_stopped() or (reason == "eog" and cons.is_accepting()):
                        reason = "grammar"
                history.extend(accepted)
                st.n_generated += len(emit)
                if st.first_token_seconds is None:
                    st.first_token_seconds = time.perf_counter() - t_start
                if emit:
                    yield Step(emit, [i < n_kept for i in range(len(emit))])
                if reason:
                    st.stop_reason = reason
                    st.n_eog += reason in ("eog", "grammar") and len(emit) < len(accepted)
                    return
            st.stop_reason = "length"
        finally:
            st.decode_seconds = time.perf_counter() - t_loop
            st.n_checkpoints, st.n_restores, st.rollback_seconds = rb.checkpoints, rb.restores, rb.seconds

    def _prefill(self, prompt: list[int]) -> bool:
        """The prompt into the target's memory, from what it holds of it already, and to the
        drafter (heads read the target's hidden states for each chunk). Returns whether the
        drafter reads the target's states (then every pass runs at its own size)."""
        st, tgt, drafter = self.stats, self.target, self.drafter
        # the prompt's head that the target still holds from the last generation is kept, as
        # llama-server's prompt cache keeps a slot's (one prompt after another sharing a system
        # prompt or a document); the context knows what it holds, and where it cannot know
        # (``Context.held_prefix``); not for a drafter that must see every prompt token's states
        reads_states = drafter is not None and drafter.reads_target_states
        reused = 0 if reads_states else tgt.held_prefix(prompt, len(prompt) - 1)
        cache = self.prompt_cache if self.prompt_cache is not None and not reads_states and tgt.plain_kv else None
        hit = cache.lookup(prompt, len(prompt) - 1, reused, tgt.n_ctx) if cache is not None else None
        if cache is not None and hit is not None:
            n = cache.restore(tgt, SEQ, hit)
            st.n_prompt_restored, st.restored_from = n, hit.tier if n else None
            reused = n or 0  # a refused restore left the sequence empty
            tgt.note_held(prompt[:reused])
        if reused:
            tgt.kv_keep_until(reused)
        else:
            tgt.kv_clear()
        st.n_prompt_reused = reused
        if drafter is not None:
            self._guarded(lambda: drafter.begin(prompt, self.draft_sampler))
        # prefill in n_batch chunks: heads that read the target's hidden states take each chunk
        for start in range(reused, len(prompt) - 1, tgt.n_batch):
            chunk = prompt[start : min(start + tgt.n_batch, len(prompt) - 1)]
            tgt.decode(chunk, start, outputs="last")
            if self.drafter is not None:
                self._guarded(lambda: self.drafter.process(chunk, start))  # noqa: B023 - called at once
        if cache is not None:  # the prompt read, kept for the next run that begins with it
            cache.offer(prompt[:-1], lambda: tgt.seq_state(SEQ))
        return reads_states

    def _proposal(self, history: list[int], n_draft: int) -> tuple[Proposal, int, PassMasks | None]:
        """What the pass carries after the last token: up to ``n_draft`` tokens from the drafter (a
        fault sets it aside), with the tokens a grammar forced at their head; under a grammar
        the draft cut to what it allows, and the masks along that cut draft."""
        cons, drafter = self.constraint, self.drafter
        proposal, n_forced = _NO_PROPOSAL, 0
        if n_draft > 0 and drafter is not None:  # the loop asks for none without a drafter
            t0 = time.perf_counter()
            try:
                if cons is not None:
                    proposal, n_forced = draft_under(cons, drafter, history, n_draft)
                else:
                    proposal = drafter.propose(history, n_draft).truncated(n_draft)
            except Exception as exc:  # noqa: BLE001 - the drafter's fault: set aside, undrafted
                self._set_aside(exc)
            self.stats.draft_seconds += time.perf_counter() - t0
        # under a grammar the pass carries the draft cut to what it allows, and verifies that one
        masks = PassMasks.along(cons, proposal) if cons is not None else None
        if masks is not None:
            proposal = masks.proposal
            n_forced = min(n_forced, len(proposal))
        return proposal, n_forced, masks

    def _target_pass(self, batch: list[int], n_cached: int, skip: int, masks: PassMasks | None,
                     pads: bool) -> Rows:
        """One target pass over ``batch`` (the ``skip`` replayed tokens, the last one and the
        draft) from position ``n_cached``, a draft's rollback prepared before it (a checkpoint
        where the memory needs one); timed into the stats and, where it read every row, the
        cost curve. The rows the verifier reads, after the replayed ones, masked under a grammar."""
        st, rb, tgt = self.stats, self.rollback, self.target
        if len(batch) > skip + 1:  # a draft
            rb.before_pass(n_cached)
            if self.costs is not None and rb.kind is Rollback.CHECKPOINT:
                self.costs.observe_checkpoint("save", rb.last_save)
        size = self.costs.pass_size(len(batch)) if pads and self.costs is not None else len(batch)
        t0 = time.perf_counter()  # rows the grammar decides alone get no logits
        filler = tgt.decode(batch, n_cached, outputs="all", skip=skip,
                            rows=masks.wanted() if masks is not None else None, pad=size - len(batch))
        dt = time.perf_counter() - t0
        st.target_seconds += dt
        st.n_filler += filler
        if self.costs is not None and (masks is None or masks.every_row):
            self.costs.observe_pass(len(batch) + filler, dt)  # the curve prices passes with every row read
        st.n_target_passes += 1
        rows = _rows_from(tgt, skip)
        return masks.rows(rows) if masks is not None else rows

    def _learn(self, proposal: Proposal, n_forced: int, n_kept: int, batch: list[int], n_cached: int) -> None:
        """What the pass kept, to the drafter (the tokens the target evaluated, and how many of
        its own it kept) and to the stats, under the proposer that made the draft."""
        st, draft = self.stats, proposal.tokens
        source = "grammar" if draft else "none"
        drafter = self.drafter
        if drafter is not None:
            if len(draft) > n_forced:
                source = drafter.last_source

            def follow() -> None:  # the tokens the target evaluated, then how many of its own it kept
                drafter.process(batch, n_cached)
                drafter.accept(n_kept)

            self._guarded(follow)
        st.steps.append((len(draft), n_kept))
        st.record_step(source, len(draft))
        if draft:
            st.record_acceptance(len(draft), n_kept)
            st.n_substituted += proposal.substituted(n_kept)
            st.n_forced += min(n_forced, n_kept)

    def _take_back(self, history: list[int], accepted: list[int], n_kept: int, n_draft: int) -> list[int]:
        """The rejected draft out of the target's memory. Returns what a restored checkpoint took
        out with it (the kept tokens before the last one), for the next pass to replay ahead of
        the last token; nothing where the memory dropped the rejected positions alone."""
        if n_kept >= n_draft:
            return []
        rb, st = self.rollback, self.stats
        want = len(history) + n_kept  # the last token and the kept drafts stay
        kept = rb.keep_until(want)
        if kept >= want:
            return []
        if self.costs is not None:
            self.costs.observe_checkpoint("restore", rb.last_restore)
        replay = (history + accepted)[kept:want]
        st.restored_steps.append(len(st.steps) - 1)
        st.n_replayed += len(replay)
        return replay

    def _guarded(self, call) -> None:
        """Call into the drafter; a fault sets it aside (``_set_aside``)."""
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - the drafter's fault: set aside, undrafted
            self._set_aside(exc)

    def _set_aside(self, exc: BaseException) -> None:
        """The drafter faulted: this generation goes on without it, undrafted (its output is the
        target's either way), and its stats say why (``drafter_fault``)."""
        self.stats.drafter_fault = describe(exc)
        self.drafter = None

    @staticmethod
    def _cut(accepted: list[int], budget: int, is_eog) -> tuple[list[int], str]:
        for i, tok in enumerate(accepted[:budget]):
            if is_eog(tok):
                return accepted[:i], "eog"
        if len(accepted) >= budget:
            return accepted[:budget], "length"
        return accepted, ""

    @staticmethod
    def _record(trace: list[TracePoint], rows: Rows, accepted: list[int], base: int) -> None:
        for i, tok in enumerate(accepted):
            logits = rows(i)
            top = np.argpartition(logits, -TRACE_TOP)[-TRACE_TOP:]
            top = top[np.argsort(-logits[top])]
            trace.append(
                TracePoint(base + i, tok, [int(t) for t in top], [float(logits[t]) for t in top])
            )


def _rows_from(ctx: Context, skip: int) -> Rows:
    """Row index -> logits, counting from the first row that has any (after a replay)."""
    if not skip:
        return ctx.logits
    return lambda i: ctx.logits(skip + i)

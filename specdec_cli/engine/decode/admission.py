"""Which sequence a new prompt takes, and which of its cells it need not compute: the admission
half of the scheduler (``scheduler.py``), a part it owns, given the sequences, the context and
the queue of waiting jobs, and at each admission how to start a job on a sequence.

A prompt continues the sequence whose cells it extends (the next turn of a conversation), or
takes an empty or the least recently used one; either way it starts from the longest prefix any
sequence holds, copied where it is not its own (``seq_cp`` tags cells in a unified cache and
copies a KV stream whole across streams; it computes nothing), or waits for a prompt that is
still reading a longer shared prefix. Where the prompt cache (``engine/promptcache``) holds a
longer head of the prompt than any sequence, in RAM or on disk, it is restored into the sequence
instead. Each request's timeline up to its first token is written here too (``SeqSlot.note``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from ..llama.context import Context
from ..promptcache.cache import Hit, PromptCache
from .jobs import Job, SeqSlot

SHARE_MIN = 16  # a prompt waits for another's prefill when that shares at least this many more tokens

# (slot, job, cells reused): the job takes the slot, whose first cells already hold its prompt's head
StartJob = Callable[[SeqSlot, Job, int], None]


class Admission:
    """Admits waiting jobs onto free sequences, up to ``n_parallel`` running at once."""

    def __init__(self, slots: list[SeqSlot], ctx: Context, waiting: deque[Job], *, n_parallel: int,
                 cache: PromptCache | None = None):
        """``slots`` and ``waiting`` are the scheduler's own, shared (it refills them in place);
        ``cache``: the prompt cache's lower tiers, where there is one."""
        self.slots = slots
        self.ctx = ctx
        self.waiting = waiting
        self.n_parallel = n_parallel
        self.cache = cache
        # jobs whose prompt's head is in a file being read off this thread (``PromptCache.prefetch``),
        # with the entry's name: they go back to the head of the queue once it is in RAM
        self.loading: list[tuple[Job, str]] = []

    @property
    def running(self) -> int:
        """Sequences running a job."""
        return sum(s.job is not None for s in self.slots)

    def admit(self, start: StartJob) -> None:
        """Start waiting jobs while fewer than ``n_parallel`` run, each from the longest prefix
        any sequence holds, or waiting for a longer one another prompt is still reading.
        ``start``: how a job takes a sequence (``Scheduler._start``), given at each call rather
        than kept, so that the scheduler and its admission hold no cycle of references."""
        self.back_from_disk()
        while self.waiting and self.running < self.n_parallel:
            job = self.waiting.popleft()
            prompt = job.prompt
            limit = len(prompt) - 1  # the last prompt token is always evaluated by the first decode pass
            slot, own = self._place(prompt, limit)
            best, src = own, slot
            for other in self.slots:
                n = _common(other.tokens[: other.n_cached], prompt, limit)
                if n > best:
                    best, src = n, other
            hit = self._lookup(prompt, limit, best)
            if hit is not None and hit.tier == "disk" and job.fetched is None:
                assert self.cache is not None  # a hit comes from the cache
                self.cache.prefetch(hit.name)  # read off this thread; the job waits for it, the others go on
                job.fetched, job.fetched_at = hit.name, time.perf_counter()
                self.loading.append((job, hit.name))
                continue
            t0 = time.perf_counter()
            restored = self._restore(slot, job, hit)
            restore_s = time.perf_counter() - t0
            if restored is not None:  # the cells are in place, cut to the shared head (or, refused, none)
                best, src = restored[0], slot
            elif src is slot:
                self.ctx.seq_rm(slot.seq, own, -1)
            else:
                self.ctx.seq_rm(slot.seq, -1, -1)
                self.ctx.seq_cp(src.seq, slot.seq, 0, best)
            start(slot, job, best)
            if job.ready is not None:
                slot.stats.timeline.append({"at": round(job.ready - job.arrived, 4), "event": "ready"})
            slot.note("admitted", seq=slot.seq, reused=best, copied_from=None if src is slot else src.seq,
                      unread=slot.unread, running=self.running)
            if restored is not None:  # (the restore ran before the admission was noted)
                slot.stats.n_prompt_restored, slot.stats.restored_from = best, restored[1] if best else None
                read = {"file_seconds": round(t0 - job.fetched_at, 4)} if job.fetched else {}
                slot.note("restored", tier=restored[1], tokens=best, seconds=round(restore_s, 4), **read)
            # a longer prefix another prompt is still reading: wait for its cells rather than compute them twice
            for other in self.slots:
                if other is slot or other.job is None or other.decoding:
                    continue
                n = _common(other.tokens[: other.n_prompt], prompt, limit)
                if n >= best + SHARE_MIN and (slot.wait is None or n > slot.wait[1]):
                    slot.wait = (other, n)
            if slot.wait is not None:
                slot.note("waits", on=slot.wait[0].seq, cells=slot.wait[1])

    def _lookup(self, prompt: list[int], limit: int, held: int) -> Hit | None:
        """The prompt cache's longest head of ``prompt``, where it is longer than the ``held``
        tokens a sequence holds and fits in one."""
        if self.cache is None:
            return None
        room = self.ctx.n_ctx // self.ctx.params.n_seq_max if self.ctx.params.kv_streams else self.ctx.n_ctx
        return self.cache.lookup(prompt, limit, held, room)

    def _restore(self, slot: SeqSlot, job: Job, hit: Hit | None) -> tuple[int, str] | None:
        """``hit`` restored into ``slot``: (tokens restored, tier), (0, tier) where the entry failed
        and left the sequence empty, None without a hit. A file read for this job off the thread
        counts as the disk's."""
        if hit is None or self.cache is None:
            return None
        slot.tokens, slot.n_cached = [], 0  # what the sequence held is gone, whatever comes of it
        tier = "disk" if job.fetched == hit.name else hit.tier
        return self.cache.restore(self.ctx, slot.seq, hit, counted_as=tier), tier

    def back_from_disk(self, wait: float = 0.0) -> None:
        """Jobs whose files are read go back to the head of the queue, in their order (waiting up
        to ``wait`` seconds for a first one, when there is nothing else to do)."""
        if not self.loading or self.cache is None:
            return
        done = self.cache.collect(wait)
        back = [job for job, name in self.loading if name in done]
        self.loading = [(job, name) for job, name in self.loading if name not in done]
        self.waiting.extendleft(reversed(back))

    def take_cancelled(self) -> list[Job]:
        """The cancelled jobs among those waiting for a file, taken out."""
        gone = [job for job, _ in self.loading if job.cancelled]
        self.loading = [(job, name) for job, name in self.loading if not job.cancelled]
        return gone

    def drop_loading(self) -> list[Job]:
        """The jobs waiting for a file, taken out (the scheduler ends or requeues them)."""
        jobs = [job for job, _ in self.loading]
        self.loading = []
        return jobs

    def _place(self, prompt: list[int], limit: int) -> tuple[SeqSlot, int]:
        """The free sequence a prompt takes, and how many of its cells the prompt keeps in place.
        A sequence's cells are overwritten only where the prompt continues them (drops at most
        ``SHARE_MIN``: the next turn of that conversation; the longest such wins); otherwise the
        prompt takes an empty or the least recently used sequence, and ``admit`` copies its
        prefix from wherever it is longest (a copy in a unified cache tags cells, it computes
        nothing). Chosen by the longest common prefix alone, a new conversation took the sequence
        of an idle one it shared only the system prompt with (29 of 350 cells), so that one's
        next turn read its whole history again: 3.58 s to its first token beside a decoding
        neighbour, against 0.15 s with its cells kept (the real pair, 2 CPU cores)."""
        free = [s for s in self.slots if s.job is None]
        kept = {s.seq: _common(s.tokens[: s.n_cached], prompt, limit) for s in free}
        going_on = [s for s in free if s.n_cached and kept[s.seq] >= s.n_cached - SHARE_MIN]
        if going_on:
            slot = max(going_on, key=lambda s: (kept[s.seq], -s.last_used))
        else:
            slot = min(free, key=lambda s: (s.n_cached > 0, s.last_used))
        return slot, kept[slot.seq]

    def share_ready(self) -> None:
        """Waiting sequences take the shared cells their source has computed by now."""
        for slot in self.slots:
            if slot.wait is None:
                continue
            src, n = slot.wait
            if src.job is None or src.n_cached >= n:
                if _common(src.tokens[: src.n_cached], slot.tokens, n) == n:
                    self.ctx.seq_rm(slot.seq, -1, -1)
                    self.ctx.seq_cp(src.seq, slot.seq, 0, n)
                    slot.stats.n_prompt_reused = slot.n_cached = n
                    slot.note("shared", copied_from=src.seq, reused=n)
                    if slot.decoding:
                        slot.stats.prompt_seconds = time.perf_counter() - slot.t_admit
                slot.wait = None


def _common(a: list[int], b: list[int], limit: int) -> int:
    """Length of the common prefix of ``a`` and ``b``, at most ``limit``."""
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i

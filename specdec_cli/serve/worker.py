"""The loop that owns llama.cpp for ``specdec serve``: requests in, text and results out.

The HTTP side never decodes. It hands a ``Work`` (the prompt's tokens, the generation
settings with any grammar compiled, a ``Handle``) to ``submit``, having rendered and tokenized
it on its own side; this loop turns it into a scheduler job and steps the scheduler whenever
there is work, so requests that arrive while others decode join the next pass (continuous
batching). Everything it has to say goes back through the request's ``Handle``, an asyncio
queue fed thread-safely with typed events (``events.py``), a step's events together
(``handoff.py``): the text as it becomes final, the kept tokens' log-probabilities when asked,
and the result or the error that ended it.

The loop runs on the process's main thread and HTTP on a helper thread, not the other way
round: llama.cpp's passes ran 11% slower when called from a helper thread (the same two jobs
decoded alternately on the main thread and on a helper thread, in one process: 10.6 s against
11.8 s; 2 cores, llama.cpp's OpenMP build), and a server spends nearly all its time in them.

A request whose client went away is cancelled and its sequence freed at the next step; on
shutdown every request still running or queued ends that way, with its result sent, so no
response hangs. A fault while serving one request (its grammar, a drafter, NaN logits) ends
that request alone with an error in its API's format; the scheduler frees its sequence and
every other request runs on (``Scheduler.step``).
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..engine.decode.scheduler import Job
from ..engine.errors import fault_message
from ..engine.options import GenOptions
from ..engine.result import Result
from .events import Done, EngineEvent, Failed, Logprobs, Text, Tick
from .handoff import Outbox


class Handle:
    """One request's channel: the engine thread puts events, the request's coroutine reads them."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.events: asyncio.Queue[EngineEvent | Tick] = asyncio.Queue()
        self.job: Job | None = None
        self.cancelled = False

    def cancel(self) -> None:
        """From the HTTP side: the client went away; the job ends at the engine's next step."""
        self.cancelled = True
        if self.job is not None:
            self.job.cancelled = True


@dataclass
class Work:
    """A request as the engine thread needs it: its tokens, how to generate, where to answer."""

    handle: Handle
    tokens: list[int]
    gen: GenOptions  # its grammar compiled
    seed: int | None
    sources: tuple[list[int], ...] = ()  # the prompt's texts in another spelling (``Job.sources``)
    arrived: float | None = None  # when the request came in (``time.perf_counter``; ``Job.arrived``)
    ready: float | None = None  # when it was handed to the engine (``submit``; ``Job.ready``)


class Worker:
    """Runs the scheduler for as long as the server lives, on the thread that calls ``run``."""

    def __init__(self, engine, scheduler, *, queue_max: int):
        self.engine = engine
        self.scheduler = scheduler
        self.queue_max = queue_max
        self.inbox: queue.Queue[Work] = queue.Queue()
        self._handles: dict[int, Handle] = {}
        self._ids = itertools.count()
        self._stopping = threading.Event()
        self._ended = False  # run() has returned: nothing will be admitted any more
        self.failed: BaseException | None = None  # what ended the loop, if it was not a shutdown
        self.cancelled = 0  # requests ended because their client went away (read by /metrics)
        self.faulted = 0  # requests a fault in the engine ended alone (read by /metrics)
        self.outbox = Outbox()  # what a step says to the requests, sent after it (``handoff.py``)

    # --- the HTTP side ------------------------------------------------------------------------
    @property
    def queued(self) -> int:
        return self.inbox.qsize() + len(self.scheduler.waiting)

    @property
    def running(self) -> int:
        return self.scheduler.running

    @property
    def alive(self) -> bool:
        """Serving or about to: requests submitted now will be run."""
        return not self._ended and self.failed is None

    def submit(self, work: Work) -> bool:
        """False when the queue is full (the server answers 503) or the engine is stopping."""
        if self._stopping.is_set() or not self.alive or self.queued >= self.queue_max:
            return False
        work.ready = time.perf_counter()
        self.inbox.put(work)
        return True

    def stop(self) -> None:
        """End every request (its response is still sent) and the loop; safe from a signal handler."""
        self._stopping.set()

    # --- the engine's loop ----------------------------------------------------------------------
    def run(self, serving: Callable[[], bool] = lambda: True) -> None:
        """Until ``stop`` (or ``serving()`` turns False: the HTTP side is gone), then until every
        request has ended."""
        sched = self.scheduler
        sched.start()
        try:
            while True:
                if not serving():
                    self.stop()
                stopping = self._stopping.is_set()
                if sched.busy:  # requests handed over while others decode: the server's own time
                    with sched.profile.outside_step("intake"):
                        self._take(block=False)
                else:
                    self._take(block=not stopping)
                if stopping:
                    self._cancel_all()
                    if not sched.busy:
                        return
                if sched.busy:
                    ended = sched.step()  # a fault ends its request alone (``Scheduler.step``)
                    with sched.profile.outside_step("answer"):
                        self._answer(ended, stopping)
                        self.outbox.send()
        except BaseException as exc:  # noqa: BLE001 - every waiting request must hear of it
            self.failed = exc
            for handle in self._handles.values():
                self.outbox.put(handle, Failed(f"the engine stopped: {exc}"))
            self._handles.clear()
            raise
        finally:
            self.outbox.send()  # the last step's, the shutdown's or the failure's
            self._ended = True

    def _answer(self, ended: list[tuple[Job, Result]], stopping: bool) -> None:
        """Each ended job's result (or its fault) to its request."""
        for job, result in ended:
            handle = self._handles.pop(job.index, None)
            if result.stats.stop_reason == "cancelled" and not stopping:
                self.cancelled += 1
            if result.stats.stop_reason == "error":
                self.faulted += 1
                if handle is not None:
                    self.outbox.put(handle, Failed(fault_message(result.stats.fault)))
            elif handle is not None:
                self.outbox.put(handle, Done(result))

    def _take(self, block: bool) -> None:
        """Admit what arrived (waiting a little for it when there is nothing else to do)."""
        try:
            work = self.inbox.get(timeout=0.05) if block else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            self._admit(work)
            try:
                work = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _admit(self, work: Work) -> None:
        handle = work.handle
        if handle.cancelled:  # gone before the engine saw it
            self.cancelled += 1
            return
        job = Job(next(self._ids), work.tokens, seed=work.seed, gen=work.gen, sources=work.sources,
                  on_text=lambda segs: self.outbox.put(handle, Text("".join(t for t, _ in segs))),
                  on_logprobs=lambda got: self.outbox.put(handle, Logprobs(got)))
        if work.arrived is not None:
            job.arrived = work.arrived
        job.ready = work.ready
        handle.job = job
        job.cancelled = handle.cancelled
        self._handles[job.index] = handle
        self.scheduler.submit(job)

    def _cancel_all(self) -> None:
        while True:
            try:
                work = self.inbox.get_nowait()
            except queue.Empty:
                break
            self.outbox.put(work.handle, Failed("the server is shutting down"))
        for job in [s.job for s in self.scheduler.slots if s.job is not None] + list(self.scheduler.waiting):
            job.cancelled = True

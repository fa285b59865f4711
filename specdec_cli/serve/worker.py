"""The one thread that owns llama.cpp for ``specdec serve``: requests in, text and results out.

The HTTP side never touches the engine. It hands a ``Work`` (messages or a prompt, the
generation settings, a ``Handle``) to ``submit``; this thread renders and tokenizes it, turns
it into a scheduler job, and steps the scheduler whenever there is work, so requests that
arrive while others decode join the next pass (continuous batching). Everything it has to say
goes back through the request's ``Handle``, an asyncio queue fed thread-safely: "started" (or
an error the server answers with a 400), the text as it becomes final, and the result.

A request whose client went away is cancelled and its sequence freed at the next step; on
shutdown every request still running or queued ends that way, with its result sent, so no
response hangs.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from dataclasses import dataclass, replace

from ..engine.scheduler import Job
from ..errors import SpecdecError


class Handle:
    """One request's channel: the engine thread puts events, the request's coroutine reads them."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.events: asyncio.Queue = asyncio.Queue()
        self.job: Job | None = None
        self.cancelled = False

    def put(self, kind: str, value=None) -> None:
        """From the engine thread: ("started", n_prompt), ("text", str), ("done", Result), ("error", str)."""
        self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))

    def cancel(self) -> None:
        """From the HTTP side: the client went away; the job ends at the engine's next step."""
        self.cancelled = True
        if self.job is not None:
            self.job.cancelled = True


@dataclass
class Work:
    """A request as the engine thread needs it: what to render, how to generate, where to answer."""

    handle: Handle
    messages: list[dict] | None
    prompt: str | None
    gen: object  # GenOptions
    seed: int | None
    constraint: object | None = None  # a ConstraintSpec (response_format), checked already


class Worker(threading.Thread):
    """Runs the scheduler on its own thread for as long as the server lives."""

    def __init__(self, engine, scheduler, *, queue_max: int):
        super().__init__(name="specdec-engine", daemon=True)
        self.engine = engine
        self.scheduler = scheduler
        self.queue_max = queue_max
        self.inbox: queue.Queue[Work] = queue.Queue()
        self._handles: dict[int, Handle] = {}
        self._ids = itertools.count()
        self._stopping = threading.Event()
        self.failed: BaseException | None = None  # what ended the thread, if it was not a shutdown

    # --- the HTTP side ------------------------------------------------------------------------
    @property
    def queued(self) -> int:
        return self.inbox.qsize() + len(self.scheduler.waiting)

    @property
    def running(self) -> int:
        return self.scheduler.running

    def submit(self, work: Work) -> bool:
        """False when the queue is full (the server answers 503) or the engine is stopping."""
        if self._stopping.is_set() or not self.is_alive() or self.queued >= self.queue_max:
            return False
        self.inbox.put(work)
        return True

    def stop(self) -> None:
        """End every request (its response is still sent) and the thread."""
        self._stopping.set()

    # --- the engine thread --------------------------------------------------------------------
    def run(self) -> None:
        sched = self.scheduler
        sched.start()
        try:
            while True:
                stopping = self._stopping.is_set()
                self._take(block=not sched.busy and not stopping)
                if stopping:
                    self._cancel_all()
                    if not sched.busy:
                        return
                if sched.busy:
                    for job, result in sched.step():
                        handle = self._handles.pop(job.index, None)
                        if handle is not None:
                            handle.put("done", result)
        except BaseException as exc:  # noqa: BLE001 - every waiting request must hear of it
            self.failed = exc
            for handle in self._handles.values():
                handle.put("error", f"the engine stopped: {exc}")
            self._handles.clear()
            raise

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
        if handle.cancelled:
            return
        engine = self.engine
        gen = work.gen
        try:
            text = engine.render_chat(work.messages) if work.messages is not None else work.prompt
            tokens = engine.tokenize_prompt(text)
            if work.constraint is not None:
                from ..engine.constraint import compile_constraint, tokenizer_for

                gen = replace(gen, grammar=compile_constraint(work.constraint, tokenizer_for(engine.target_model)))
        except SpecdecError as exc:
            handle.put("error", exc.one_line())
            return
        job = Job(next(self._ids), tokens, seed=work.seed, gen=gen,
                  on_text=lambda segs, h=handle: h.put("text", "".join(t for t, _ in segs)))
        handle.job = job
        job.cancelled = handle.cancelled
        self._handles[job.index] = handle
        handle.put("started", len(tokens))
        self.scheduler.submit(job)

    def _cancel_all(self) -> None:
        while True:
            try:
                work = self.inbox.get_nowait()
            except queue.Empty:
                break
            work.handle.put("error", "the server is shutting down")
        for job in [s.job for s in self.scheduler.slots if s.job is not None] + list(self.scheduler.waiting):
            job.cancelled = True

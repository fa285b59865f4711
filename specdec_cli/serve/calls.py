"""One request on its way through the engine, whatever API it came by.

A ``Call`` hands the prepared request to the engine thread (a ``Work``), reads its events back
(the text as it becomes final, log-probabilities, the result), polls whether a client that waits
for a whole reply is still there, and records the end once (metrics; the conversation's tokens,
kept for its next turn). Chat Completions, completions, Responses and Messages differ only in
how they read a request and spell what comes back; this part is theirs in common.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import Request

from . import request_log
from .api_error import ApiError
from .events import Done, EngineEvent, Failed, Idle, Text
from .worker import Handle, Work

DISCONNECT_POLL = 0.5  # seconds between checks that a client waiting for a whole reply is still there
# seconds of silence after which a stream says it is still there (a long prompt read on a CPU
# takes minutes before the first token; clients and proxies drop a stream idle for long)
KEEPALIVE_SECONDS = 10.0


class Call:
    def __init__(self, worker, metrics, prompter, tokens: list[int], gen, seed: int, arrived: float, turn=None):
        """Submitted at once: a full queue is a 503 (``ApiError``), spelled by the caller's API."""
        self.metrics, self.prompter, self.turn = metrics, prompter, turn
        self.handle = Handle(asyncio.get_running_loop())
        work = Work(self.handle, tokens, gen, seed, turn.sources if turn is not None else (), arrived)
        if not worker.submit(work):
            raise ApiError(503, "the server is busy: too many requests queued", kind="server_error",
                           headers={"Retry-After": "1"})
        metrics.accepted()

    async def events(self, request: Request | None = None,
                     idle: float | None = None) -> AsyncIterator[EngineEvent | Idle]:
        """The engine's events as it sends them, up to ``Done`` or ``Failed``; with ``request``, a
        client that went away while it waited cancels the call (a stream's client going away
        cancels it through Starlette, which stops the stream). With ``idle``: an ``Idle`` after
        that many seconds without an event, for a stream to spell as its keep-alive."""
        wait = DISCONNECT_POLL if request is not None else idle
        quiet = 0.0
        while True:
            try:
                event = await asyncio.wait_for(self.handle.events.get(), wait)
            except asyncio.TimeoutError:
                if request is not None and await request.is_disconnected():
                    self.cancel()
                quiet += wait or 0.0
                if idle is not None and quiet >= idle:
                    quiet = 0.0
                    yield Idle()
                continue
            quiet = 0.0
            if isinstance(event, Failed):  # the log line names the cause (a fault, or the engine stopping)
                request_log.record(fault=event.message)
            yield event
            if isinstance(event, (Done, Failed)):
                return

    async def whole(self, request: Request):
        """The whole text and the result (a 500 if the engine stopped), the end recorded."""
        text: list[str] = []
        async for event in self.events(request):
            if isinstance(event, Text):
                text.append(event.text)
            elif isinstance(event, Failed):
                raise ApiError(500, event.message, kind="server_error")
            elif isinstance(event, Done):
                self.finished(event.result)
                return "".join(text), event.result
        raise AssertionError("the engine's events end with done or error")

    def finished(self, result) -> None:
        self.metrics.finished(result)
        request_log.record(result)
        if self.turn is not None:
            self.prompter.remember(self.turn, result)

    def cancel(self) -> None:
        self.handle.cancel()
        request_log.record(gone=True)

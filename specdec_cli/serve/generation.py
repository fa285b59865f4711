"""A request from the moment it is ready to run until its generation ends, whatever API it came by.

``Ready`` is what preparation made of a checked request: the tokens to decode, the grammar
the reply obeys, the body whose settings it runs with, and for a chat request the ``Turn``
whose tool parser reads the reply. ``Generation`` is that request in flight: a ``Handle`` the
engine thread answers on (``worker.py``), its events read back as types (``events.py``), a
client that stopped waiting for a whole answer noticed between them, a cancel. What the
request's life does with those events (answer whole, stream them, record the end) is
``lifecycle.py``'s, the same for every API; this part only carries them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request

from ..toolcalls.parse import Content, Event, Reply
from . import request_log
from .api_error import ApiError
from .events import Done, EngineEvent, Failed, Idle, Text, Tick
from .worker import Handle

if TYPE_CHECKING:
    from ..engine.result import Result
    from ..engine.structured.constraint import Grammar
    from ..toolcalls.stream import ReplyStream
    from ..toolcalls.turn import Turn
    from .schemas import ChatRequest, CompletionRequest

DISCONNECT_POLL = 0.5  # seconds between checks that a client waiting for a whole reply is still there


@dataclass(frozen=True)
class Ready:
    """A checked request, prepared: what the engine decodes and what the reply is held to."""

    body: ChatRequest | CompletionRequest  # its settings: budget, stops, sampling, seed, logprobs, stream
    tokens: list[int]
    grammar: Grammar | None = None
    shown: frozenset[int] = frozenset()  # control tokens its text renders (a tool-call family's markers)
    turn: Turn | None = None  # a chat request's: its reply read by the tool parser, its transcript kept

    def reply_stream(self) -> ReplyStream | PlainText:
        """The reader a stream feeds the reply's text through, piece by piece."""
        return self.turn.stream() if self.turn is not None else PlainText()

    def read(self, text: str) -> Reply:
        """The whole reply's content and calls, read as its stream would be."""
        return self.turn.read(text) if self.turn is not None else Reply(text)


class PlainText:
    """A completion's reply: text only, every piece passed on as it came (no tool parser)."""

    def feed(self, text: str) -> list[Event]:
        return [Content(text)]

    def finish(self) -> list[Event]:
        return []

    def reply(self, text: str = "") -> Reply:
        return Reply(text)


class Generation:
    """A request in flight: the engine thread has its ``Work`` (``lifecycle.submit``) and answers on
    ``handle``."""

    def __init__(self, ready: Ready, handle: Handle):
        self.ready = ready
        self.handle = handle

    async def events(self, request: Request | None = None,
                     idle: float | None = None) -> AsyncIterator[EngineEvent | Idle]:
        """The engine's events as it sends them, up to ``Done`` or ``Failed``; with ``request``, a
        client that went away while it waited cancels the generation (a stream's client going
        away cancels it through Starlette, which stops the stream). With ``idle``: an ``Idle``
        after that many seconds without an event, for a stream to spell as its keep-alive."""
        wait = DISCONNECT_POLL if request is not None else idle
        quiet = 0.0
        while True:
            event = await self._next(wait)
            if event is None:
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

    async def _next(self, wait: float | None) -> EngineEvent | None:
        """The next event, or None once ``wait`` seconds pass without one. The wait is a timer that
        puts a ``Tick`` in the queue, not ``asyncio.wait_for``, which wraps every wait in a task of
        its own (Python 3.10 and 3.11): a task, a timeout handle and one more round of the loop for
        each streamed token, on the thread whose time a token waits for."""
        queue = self.handle.events
        tick = Tick()
        timer = None if wait is None else asyncio.get_running_loop().call_later(wait, queue.put_nowait, tick)
        try:
            while True:
                got = await queue.get()
                if got is tick:
                    return None
                if not isinstance(got, Tick):  # an earlier wait's tick, put as its event came: passed over
                    return got
        finally:
            if timer is not None:
                timer.cancel()

    async def whole(self, request: Request) -> tuple[str, Result]:
        """The whole text and the result; a ``Failed`` generation is a 500."""
        text: list[str] = []
        async for event in self.events(request):
            if isinstance(event, Text):
                text.append(event.text)
            elif isinstance(event, Failed):
                raise ApiError(500, event.message, kind="server_error")
            elif isinstance(event, Done):
                return "".join(text), event.result
        raise AssertionError("the engine's events end with Done or Failed")

    def cancel(self) -> None:
        self.handle.cancel()
        request_log.record(gone=True)

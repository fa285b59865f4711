"""A step's events, from the engine thread to the HTTP thread in one hand-off.

Each hand-off across threads wakes the event loop (a write to its self-pipe) and takes the
interpreter from the engine thread for a moment. Sent one at a time, every ``Text`` of every
sequence in a pass woke the loop on its own. ``Outbox`` keeps what a step says to the requests
and sends it after the step in one ``call_soon_threadsafe``: one wake-up a step, however many
sequences the pass carried, each request's events still in the order they were put.

The engine does not wait for the writes. Tried on 2 cores, where the HTTP thread can only run
on a core llama.cpp's threads want: waiting, before the next pass, for the loop to have written
a step's events put 0.6 ms between passes (the loop's wake-up 0.1, its writing 0.4, the
engine's return), and tokens per second were the same as without waiting, within the rounds'
noise (docs/engine-time.md). Sending still hands the interpreter to the HTTP thread for the
length of its write more often than not (the self-pipe write lets it go): on 2 cores that is
where a stream's chunk costs its time, in the profile's ``answer`` stage.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .events import EngineEvent

if TYPE_CHECKING:
    from .worker import Handle


class Outbox:
    """The engine thread's events of one step, kept until ``send``; owned by that thread."""

    def __init__(self) -> None:
        self._pending: list[tuple[Handle, EngineEvent]] = []

    def put(self, handle: Handle, event: EngineEvent) -> None:
        self._pending.append((handle, event))

    def send(self) -> None:
        """Everything put since the last send, to each request's queue in the order put: one
        wake-up of each event loop the requests live on (``serve`` has one)."""
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        loops: dict[asyncio.AbstractEventLoop, list[tuple[Handle, EngineEvent]]] = {}
        for handle, event in batch:
            loops.setdefault(handle.loop, []).append((handle, event))
        for loop, events in loops.items():
            try:
                loop.call_soon_threadsafe(_deliver, events)
            except RuntimeError:  # that loop is closed: its requests are gone with it
                continue


def _deliver(events: list[tuple[Handle, EngineEvent]]) -> None:
    """On the loop: each event to its request's queue."""
    for handle, event in events:
        handle.events.put_nowait(event)

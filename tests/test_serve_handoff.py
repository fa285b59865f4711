"""The engine thread's events to the HTTP thread (``serve/handoff.py``, ``Generation._next``):
a step's events arrive in order with one wake-up of the loop; a closed loop loses its own
requests' events and nothing else; a timer's tick left from an earlier wait never reads as a
timeout of the next."""

from __future__ import annotations

import asyncio
import threading
import time

from specdec_cli.serve.events import Done, Text, Tick
from specdec_cli.serve.handoff import Outbox
from specdec_cli.serve.worker import Handle


class LoopThread:
    """An event loop on a thread of its own, as uvicorn's is in ``serve``."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 10.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def handle_on(lt: LoopThread) -> Handle:
    async def make() -> Handle:
        return Handle(asyncio.get_running_loop())

    return lt.run(make())


def test_a_steps_events_arrive_in_order_with_one_wake_up():
    lt = LoopThread()
    try:
        a, b = handle_on(lt), handle_on(lt)
        wakes = []
        real = lt.loop.call_soon_threadsafe

        def counted(*args):
            wakes.append(1)
            return real(*args)

        lt.loop.call_soon_threadsafe = counted  # type: ignore[method-assign, assignment]
        out = Outbox()
        out.put(a, Text("x"))
        out.put(b, Text("1"))
        out.put(a, Text("y"))
        out.put(a, Done(None))  # type: ignore[arg-type]
        out.send()
        out.send()  # nothing new: no wake-up
        assert len(wakes) == 1

        async def drain(h: Handle, n: int) -> list:
            return [await h.events.get() for _ in range(n)]

        assert lt.run(drain(a, 3)) == [Text("x"), Text("y"), Done(None)]  # type: ignore[arg-type]
        assert lt.run(drain(b, 1)) == [Text("1")]
    finally:
        lt.close()


def test_a_closed_loop_loses_its_own_requests_alone():
    live, dead = LoopThread(), LoopThread()
    try:
        a, b = handle_on(live), handle_on(dead)
        dead.close()
        out = Outbox()
        out.put(b, Text("gone"))
        out.put(a, Text("kept"))
        t0 = time.perf_counter()
        out.send()
        assert time.perf_counter() - t0 < 1.0

        async def one() -> object:
            return await a.events.get()

        assert live.run(one()) == Text("kept")
    finally:
        live.close()


def test_an_earlier_waits_tick_is_passed_over():
    from types import SimpleNamespace

    from specdec_cli.serve.generation import Generation

    async def run() -> list:
        h = Handle(asyncio.get_running_loop())
        gen = Generation(SimpleNamespace(), h)  # type: ignore[arg-type]
        h.events.put_nowait(Tick())  # a tick of a wait that already ended with an event
        h.events.put_nowait(Text("a"))
        first = await gen._next(5.0)
        timed_out = await gen._next(0.01)
        h.events.put_nowait(Text("b"))
        return [first, timed_out, await gen._next(None)]

    assert asyncio.run(run()) == [Text("a"), None, Text("b")]

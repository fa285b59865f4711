"""One line on stderr per request, when its response has been sent: how it went and what it cost.

    POST /v1/messages 200 · prompt 18,612 (18,240 cached) · generated 85 · drafted 40, kept 31 · 92.4 s

An ASGI middleware rather than uvicorn's access log: the line needs the request's token counts,
which only the engine knows, and it must come when a stream has ended, not when its headers
went out. The request that generated puts its result in a slot this middleware opened for it
(a context variable: Starlette runs a stream's body in a child task, which sees the same slot).
A client that left before the end is said as such. ``/health`` and ``/metrics`` are not logged
(a scraper would fill the log). ``specdec serve --quiet`` turns the lines off.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

from ..terminal import console

_SLOT: ContextVar[dict | None] = ContextVar("specdec_request_slot", default=None)
QUIET_PATHS = ("/health", "/metrics")


def record(result=None, *, gone: bool = False, fault: str | None = None) -> None:
    """From the request's own code: its generation ended (``result``), its client went away, or
    an error ended it (``fault``: what the line then names as the cause)."""
    slot = _SLOT.get()
    if slot is not None:
        if result is not None:
            slot["stats"] = result.stats
        slot["gone"] = slot.get("gone", False) or gone
        if fault is not None:
            slot["fault"] = fault


class RequestLog:
    def __init__(self, app, write=console.note):
        self.app = app
        self.write = write

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in QUIET_PATHS:
            await self.app(scope, receive, send)
            return
        slot: dict = {}
        token = _SLOT.set(slot)
        started = time.perf_counter()

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                slot["status"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            _SLOT.reset(token)
            self.write(line(scope["method"], scope["path"], slot, time.perf_counter() - started))


_TIERS = {"host": "memory", "disk": "disk"}  # the prompt cache's tiers, as a request line names them


def line(method: str, path: str, slot: dict, seconds: float) -> str:
    parts = [f"{method} {path} {slot.get('status', '-')}"]
    st = slot.get("stats")
    if st is not None:
        restored = f", {st.n_prompt_restored:,} from {_TIERS[st.restored_from]}" if st.restored_from else ""
        cached = f" ({st.n_prompt_reused:,} cached{restored})" if st.n_prompt_reused else ""
        parts.append(f"prompt {st.n_prompt:,}{cached}")
        parts.append(f"generated {st.n_generated:,}")
        if st.n_drafted:
            parts.append(f"drafted {st.n_drafted:,}, kept {st.n_accepted:,}")
        if st.drafter_fault:
            parts.append(f"drafter set aside: {st.drafter_fault}")
    if slot.get("gone"):
        parts.append("client gone")
    if slot.get("fault"):
        parts.append(f"error: {slot['fault']}")
    parts.append(f"{seconds:.1f} s")
    return " · ".join(parts)

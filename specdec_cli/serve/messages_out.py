"""Anthropic's response shapes, written from what the engine did: a Messages reply whole, or as
its server-sent events. The reply's text and calls come from the same parser the chat routes
use (``toolcalls/parse.py``, through the turn's ``ReplyStream``); here they are only spelled:
a text block, ``tool_use`` blocks with their input as an object, the stop reason in
Anthropic's words, and the usage with the cached prompt tokens apart."""

from __future__ import annotations

import json

from ..toolcalls.parse import ArgsDelta, CallStart, Content, Reply
from .calls import KEEPALIVE_SECONDS
from .events import Done, Failed, Idle, Text


class MessageSpelling:
    def __init__(self, mid: str, model: str, new_id, stops: list[str]):
        self.mid, self.model, self.new_id, self.stops = mid, model, new_id, stops
        self.ids: list[str] = []

    def call_id(self, index: int) -> str:
        while len(self.ids) <= index:
            self.ids.append(self.new_id())
        return self.ids[index]

    def stop(self, result, reply: Reply | None) -> tuple[str, str | None]:
        """(stop_reason, stop_sequence)."""
        st = result.stats
        if st.stop_reason in ("length", "context"):
            return "max_tokens", None
        if st.stop_reason == "stop":
            return "stop_sequence", st.stop_string
        return ("tool_use" if reply is not None and reply.calls else "end_turn"), None

    def usage(self, result) -> dict:
        st = result.stats
        return {"input_tokens": st.n_prompt - st.n_prompt_reused, "output_tokens": st.n_generated,
                "cache_read_input_tokens": st.n_prompt_reused, "cache_creation_input_tokens": 0}

    def head(self, n_prompt: int) -> dict:
        """The message as ``message_start`` announces it: no content yet."""
        return {"id": self.mid, "type": "message", "role": "assistant", "model": self.model, "content": [],
                "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": n_prompt, "output_tokens": 0}}

    def message(self, reply: Reply, result) -> dict:
        content: list[dict] = []
        if reply.content:
            content.append({"type": "text", "text": reply.content})
        for i, c in enumerate(reply.calls):
            content.append({"type": "tool_use", "id": self.call_id(i), "name": c.name, "input": _input(c.arguments)})
        reason, sequence = self.stop(result, reply)
        return {**self.head(0), "content": content, "stop_reason": reason, "stop_sequence": sequence,
                "usage": self.usage(result)}


def _input(arguments: str) -> dict:
    """A call's arguments as the object Anthropic's ``input`` is (a call cut by max_tokens: {})."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def event(kind: str, data: dict) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, ensure_ascii=False)}\n\n"


async def stream_events(call, spell: MessageSpelling, n_prompt: int):
    """``message_start``, ``ping``, then per block ``content_block_start``, its deltas
    (``text_delta``, ``input_json_delta``) and ``content_block_stop``, then ``message_delta``
    with the stop reason and usage, and ``message_stop``. A client that goes away cancels."""
    stream = call.turn.stream()
    block = {"index": -1, "kind": None}  # the open block

    def to(kind: str, start: dict) -> list[str]:
        out = []
        if block["kind"] is not None:
            out.append(event("content_block_stop", {"index": block["index"]}))
        block["index"] += 1
        block["kind"] = kind
        out.append(event("content_block_start", {"index": block["index"], "content_block": start}))
        return out

    def spelled(e) -> list[str]:
        if isinstance(e, Content):
            out = [] if block["kind"] == "text" else to("text", {"type": "text", "text": ""})
            return out + [event("content_block_delta", {"index": block["index"],
                                                        "delta": {"type": "text_delta", "text": e.text}})]
        if isinstance(e, CallStart):
            return to("tool_use", {"type": "tool_use", "id": spell.call_id(e.index), "name": e.name, "input": {}})
        assert isinstance(e, ArgsDelta)
        return [event("content_block_delta", {"index": block["index"],
                                               "delta": {"type": "input_json_delta", "partial_json": e.text}})]

    done = False
    try:
        yield event("message_start", {"message": spell.head(n_prompt)})
        yield event("ping", {})
        async for ev in call.events(idle=KEEPALIVE_SECONDS):
            if isinstance(ev, Idle):
                yield event("ping", {})  # Anthropic's own keep-alive
            elif isinstance(ev, Text):
                for e in stream.feed(ev.text):
                    for line in spelled(e):
                        yield line
            elif isinstance(ev, Failed):
                yield event("error", {"error": {"type": "api_error", "message": ev.message}})
            elif isinstance(ev, Done):
                for e in stream.finish():
                    for line in spelled(e):
                        yield line
                if block["kind"] is not None:
                    yield event("content_block_stop", {"index": block["index"]})
                call.finished(ev.result)
                reason, sequence = spell.stop(ev.result, stream.reply())  # only its calls are read
                yield event("message_delta", {"delta": {"stop_reason": reason, "stop_sequence": sequence},
                                              "usage": spell.usage(ev.result)})
                yield event("message_stop", {})
        done = True
    finally:
        if not done:
            call.cancel()

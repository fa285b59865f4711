"""OpenAI's Responses shapes, written from what the engine did: the response object with its
``output`` items (a ``message`` with ``output_text``, ``function_call`` items), whole or as the
typed server-sent events (``response.created`` ... ``response.completed``). The text and calls
come from the turn's ``ReplyStream``, as on the chat routes; here they are only spelled."""

from __future__ import annotations

import json
import secrets

from ..toolcalls.parse import ArgsDelta, CallStart, Content, Reply
from .calls import KEEPALIVE_SECONDS
from .events import Done, Failed, Idle, Text


class ResponseSpelling:
    def __init__(self, rid: str, created: int, model: str, new_id, echo: dict):
        """``echo``: the request's settings a response repeats (instructions, tools, text, ...)."""
        self.rid, self.created, self.model, self.new_id, self.echo = rid, created, model, new_id, echo
        self.call_ids: list[str] = []
        self.item_ids: dict[tuple[str, int], str] = {}

    def call_id(self, index: int) -> str:
        while len(self.call_ids) <= index:
            self.call_ids.append(self.new_id())
        return self.call_ids[index]

    def item_id(self, kind: str, index: int) -> str:
        return self.item_ids.setdefault((kind, index), f"{'msg' if kind == 'message' else 'fc'}_{secrets.token_hex(12)}")

    def message_item(self, text: str, status: str = "completed") -> dict:
        return {"type": "message", "id": self.item_id("message", 0), "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}

    def call_item(self, index: int, name: str, arguments: str, status: str = "completed") -> dict:
        return {"type": "function_call", "id": self.item_id("call", index), "call_id": self.call_id(index),
                "name": name, "arguments": arguments, "status": status}

    def items(self, reply: Reply) -> list[dict]:
        out = [self.message_item(reply.content)] if reply.content else []
        return out + [self.call_item(i, c.name, c.arguments) for i, c in enumerate(reply.calls)]

    def response(self, output: list[dict], result=None) -> dict:
        """The response object; without ``result`` it is still in progress."""
        status, incomplete, used = "in_progress", None, None
        if result is not None:
            st = result.stats
            status = "incomplete" if st.stop_reason in ("length", "context") else "completed"
            if status == "incomplete":
                incomplete = {"reason": "max_output_tokens"}
            used = {"input_tokens": st.n_prompt, "input_tokens_details": {"cached_tokens": st.n_prompt_reused},
                    "output_tokens": st.n_generated, "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": st.n_prompt + st.n_generated}
        return {"id": self.rid, "object": "response", "created_at": self.created, "model": self.model,
                "status": status, "error": None, "incomplete_details": incomplete, "output": output,
                "usage": used, **self.echo}


def assistant_message(reply: Reply, spell: ResponseSpelling) -> dict:
    """The reply as the chat message a stored conversation continues from."""
    msg: dict = {"role": "assistant", "content": reply.content}
    if reply.calls:
        msg["tool_calls"] = [{"id": spell.call_id(i), "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments}} for i, c in enumerate(reply.calls)]
    return msg


class _Events:
    """The typed events of one streamed response, numbered."""

    def __init__(self, spell: ResponseSpelling):
        self.spell = spell
        self.n = 0
        self.output: list[dict] = []  # items done
        self.open: dict | None = None  # the item being written: {"kind", "index", "text" | "name"/"args"}

    def ev(self, kind: str, **data) -> str:
        self.n += 1
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': self.n - 1, **data}, ensure_ascii=False)}\n\n"

    def close(self) -> list[str]:
        o, out = self.open, []
        if o is None:
            return out
        at = len(self.output)
        if o["kind"] == "message":
            item = self.spell.message_item(o["text"])
            part = item["content"][0]
            out += [self.ev("response.output_text.done", item_id=item["id"], output_index=at, content_index=0,
                            text=o["text"], logprobs=[]),
                    self.ev("response.content_part.done", item_id=item["id"], output_index=at, content_index=0,
                            part=part)]
        else:
            item = self.spell.call_item(o["index"], o["name"], o["args"])
            out.append(self.ev("response.function_call_arguments.done", item_id=item["id"], output_index=at,
                               name=o["name"], arguments=o["args"]))
        out.append(self.ev("response.output_item.done", output_index=at, item=item))
        self.output.append(item)
        self.open = None
        return out

    def spelled(self, e) -> list[str]:
        at = len(self.output)
        if isinstance(e, Content):
            out = []
            if self.open is None or self.open["kind"] != "message":
                out += self.close()
                at = len(self.output)
                self.open = {"kind": "message", "text": ""}
                item = self.spell.message_item("", "in_progress")
                item["content"] = []
                out += [self.ev("response.output_item.added", output_index=at, item=item),
                        self.ev("response.content_part.added", item_id=item["id"], output_index=at, content_index=0,
                                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})]
            self.open["text"] += e.text
            return out + [self.ev("response.output_text.delta", item_id=self.spell.item_id("message", 0),
                                  output_index=at, content_index=0, delta=e.text, logprobs=[])]
        if isinstance(e, CallStart):
            out = self.close()
            at = len(self.output)
            self.open = {"kind": "call", "index": e.index, "name": e.name, "args": ""}
            return out + [self.ev("response.output_item.added", output_index=at,
                                  item=self.spell.call_item(e.index, e.name, "", "in_progress"))]
        assert isinstance(e, ArgsDelta)
        self.open["args"] += e.text
        return [self.ev("response.function_call_arguments.delta", item_id=self.spell.item_id("call", e.index),
                        output_index=at, delta=e.text)]


async def stream_events(call, spell: ResponseSpelling, on_done):
    """The response's events; ``on_done(reply, result, response)`` stores it before the last event."""
    stream = call.turn.stream()
    events = _Events(spell)
    done = False
    text: list[str] = []
    try:
        yield events.ev("response.created", response=spell.response([]))
        yield events.ev("response.in_progress", response=spell.response([]))
        async for ev in call.events(idle=KEEPALIVE_SECONDS):
            if isinstance(ev, Idle):  # the API has no keep-alive event; this one is true and harmless to repeat
                yield events.ev("response.in_progress", response=spell.response(events.output))
            elif isinstance(ev, Text):
                text.append(ev.text)
                for e in stream.feed(ev.text):
                    for line in events.spelled(e):
                        yield line
            elif isinstance(ev, Failed):
                yield events.ev("error", code="server_error", message=ev.message, param=None)
            elif isinstance(ev, Done):
                for e in stream.finish():
                    for line in events.spelled(e):
                        yield line
                for line in events.close():
                    yield line
                call.finished(ev.result)
                reply = stream.reply("".join(text))
                response = spell.response(events.output, ev.result)  # the items as they were streamed
                on_done(reply, ev.result, response)
                final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
                yield events.ev(final, response=response)
        done = True
    finally:
        if not done:
            call.cancel()

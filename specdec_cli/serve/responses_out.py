"""OpenAI's Responses shapes, written from what the engine did (``ResponsesWire``): the response
object with its ``output`` items (a ``message`` with ``output_text``, ``function_call`` items),
whole or as the typed, numbered server-sent events (``response.created`` ...
``response.completed``). The text and calls come from the turn's ``ReplyStream``, as on the chat
routes; here they are only spelled. When each thing is said is the driver's (``lifecycle.py``);
what is kept of a response for ``previous_response_id`` is the API's (``responses_api.py``),
handed the reply as the chat message a stored conversation continues from
(``wire.chat_message``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..toolcalls.parse import ArgsDelta, CallStart, Content, Reply
from .api_error import ApiError
from .wire import CallIds, chat_message

if TYPE_CHECKING:
    from starlette.responses import Response

    from ..engine.result import Result
    from ..engine.verify.logprobs import TokenLogprob

Keep = Callable[[dict, dict], None]  # (the reply as a chat message, the response object): store them


class _Items:
    """A response's output items and their ids (an id per item, kept from its first event to the last)."""

    def __init__(self, ids: CallIds):
        self.ids = ids
        self.item_ids: dict[tuple[str, int], str] = {}

    def item_id(self, kind: str, index: int) -> str:
        return self.item_ids.setdefault((kind, index), f"{'msg' if kind == 'message' else 'fc'}_{secrets.token_hex(12)}")

    def message(self, text: str, status: str = "completed") -> dict:
        return {"type": "message", "id": self.item_id("message", 0), "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}

    def call(self, index: int, name: str, arguments: str, status: str = "completed") -> dict:
        return {"type": "function_call", "id": self.item_id("call", index), "call_id": self.ids(index),
                "name": name, "arguments": arguments, "status": status}

    def of(self, reply: Reply) -> list[dict]:
        out = [self.message(reply.content)] if reply.content else []
        return out + [self.call(i, c.name, c.arguments) for i, c in enumerate(reply.calls)]


class ResponsesWire:
    """One response. A stream is ``response.created`` and ``response.in_progress``, then per item
    ``output_item.added``, its deltas and ``.done`` events, then ``response.completed`` (or
    ``.incomplete``) with the whole object; each event numbered (``sequence_number``)."""

    def __init__(self, rid: str, created: int, model: str, ids: CallIds, echo: dict, keep: Keep | None):
        """``echo``: the request's settings a response repeats (instructions, tools, text, ...);
        ``keep``: where the finished response goes for ``previous_response_id`` and GET (None: not stored)."""
        self.rid, self.created, self.model, self.ids, self.echo, self.keep = rid, created, model, ids, echo, keep
        self.items = _Items(ids)
        self.n = 0  # events sent
        self.output: list[dict] = []  # items done
        self.open: dict | None = None  # the item being written: {"kind", "index", "text" | "name"/"args"}

    @staticmethod
    def error_response(exc: ApiError) -> Response:
        return exc.response()  # OpenAI's error object

    def response(self, output: list[dict], result: Result | None = None) -> dict:
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

    def _ev(self, kind: str, **data: object) -> str:
        self.n += 1
        payload = {"type": kind, "sequence_number": self.n - 1, **data}
        return f"event: {kind}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"

    def _close(self) -> list[str]:
        """End the item being written: its ``.done`` events, and it joins the output."""
        o = self.open
        out: list[str] = []
        if o is None:
            return out
        at = len(self.output)
        if o["kind"] == "message":
            item = self.items.message(o["text"])
            part = item["content"][0]
            out += [self._ev("response.output_text.done", item_id=item["id"], output_index=at, content_index=0,
                             text=o["text"], logprobs=[]),
                    self._ev("response.content_part.done", item_id=item["id"], output_index=at, content_index=0,
                             part=part)]
        else:
            item = self.items.call(o["index"], o["name"], o["args"])
            out.append(self._ev("response.function_call_arguments.done", item_id=item["id"], output_index=at,
                                name=o["name"], arguments=o["args"]))
        out.append(self._ev("response.output_item.done", output_index=at, item=item))
        self.output.append(item)
        self.open = None
        return out

    def opening(self) -> list[str]:
        return [self._ev("response.created", response=self.response([])),
                self._ev("response.in_progress", response=self.response([]))]

    def keepalive(self) -> str:
        # the API has no keep-alive event; this one is true and harmless to repeat
        return self._ev("response.in_progress", response=self.response(self.output))

    def logprobs(self, entries: list[TokenLogprob]) -> None:
        pass  # never asked: a Responses request's text carries an empty logprobs list

    def content(self, e: Content) -> list[str]:
        out = []
        if self.open is None or self.open["kind"] != "message":
            out += self._close()
            self.open = {"kind": "message", "text": ""}
            item = self.items.message("", "in_progress")
            item["content"] = []
            out += [self._ev("response.output_item.added", output_index=len(self.output), item=item),
                    self._ev("response.content_part.added", item_id=item["id"], output_index=len(self.output),
                             content_index=0, part={"type": "output_text", "text": "", "annotations": [],
                                                    "logprobs": []})]
        self.open["text"] += e.text
        return out + [self._ev("response.output_text.delta", item_id=self.items.item_id("message", 0),
                               output_index=len(self.output), content_index=0, delta=e.text, logprobs=[])]

    def call_start(self, e: CallStart) -> list[str]:
        out = self._close()
        self.open = {"kind": "call", "index": e.index, "name": e.name, "args": ""}
        return out + [self._ev("response.output_item.added", output_index=len(self.output),
                               item=self.items.call(e.index, e.name, "", "in_progress"))]

    def args_delta(self, e: ArgsDelta) -> list[str]:
        assert self.open is not None  # the parser starts a call before its arguments
        self.open["args"] += e.text
        return [self._ev("response.function_call_arguments.delta", item_id=self.items.item_id("call", e.index),
                         output_index=len(self.output), delta=e.text)]

    def failed(self, message: str) -> list[str]:
        return [self._ev("error", code="server_error", message=message, param=None)]

    def closing(self, result: Result, reply: Reply) -> list[str]:
        out = self._close()
        response = self.response(self.output, result)  # the items as they were streamed
        self.remember(reply, response)
        final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return out + [self._ev(final, response=response)]

    def whole(self, reply: Reply, result: Result) -> dict:
        return self.response(self.items.of(reply), result)

    def remember(self, reply: Reply, answer: dict) -> None:
        if self.keep is not None:
            self.keep(chat_message(reply, self.ids), answer)

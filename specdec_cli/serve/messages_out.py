"""Anthropic's response shapes, written from what the engine did: a Messages reply whole, or as
its server-sent events (``MessagesWire``). The reply's text and calls come from the same
parser the chat routes use (``toolcalls/parse.py``, through the turn's ``ReplyStream``); here
they are only spelled: a text block, ``tool_use`` blocks with their input as an object, the
stop reason in Anthropic's words, and the usage with the cached prompt tokens apart. When
each thing is said is the driver's (``lifecycle.py``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ..toolcalls.parse import ArgsDelta, CallStart, Content, Reply
from .api_error import ApiError
from .wire import CallIds

if TYPE_CHECKING:
    from starlette.responses import Response

    from ..engine.result import Result
    from ..engine.verify.logprobs import TokenLogprob


def event(kind: str, data: dict) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, ensure_ascii=False)}\n\n"


def stop(result: Result, reply: Reply | None) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) in Anthropic's words."""
    st = result.stats
    if st.stop_reason in ("length", "context"):
        return "max_tokens", None
    if st.stop_reason == "stop":
        return "stop_sequence", st.stop_string
    return ("tool_use" if reply is not None and reply.calls else "end_turn"), None


def usage(result: Result) -> dict:
    st = result.stats
    return {"input_tokens": st.n_prompt - st.n_prompt_reused, "output_tokens": st.n_generated,
            "cache_read_input_tokens": st.n_prompt_reused, "cache_creation_input_tokens": 0}


def _input(arguments: str) -> dict:
    """A call's arguments as the object Anthropic's ``input`` is (a call cut by max_tokens: {})."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class MessagesWire:
    """One Messages reply. A stream is ``message_start`` and a ``ping``, then per block
    ``content_block_start``, its deltas (``text_delta``, ``input_json_delta``) and
    ``content_block_stop``, then ``message_delta`` with the stop reason and usage, and
    ``message_stop``; a ``ping`` (Anthropic's own keep-alive) in a silence."""

    def __init__(self, mid: str, model: str, ids: CallIds, n_prompt: int):
        """``n_prompt``: the prompt's tokens, which ``message_start`` announces."""
        self.mid, self.model, self.ids, self.n_prompt = mid, model, ids, n_prompt
        self.block = -1  # the open content block's index
        self.block_kind: str | None = None  # ... and its type (None: no block open yet)

    @staticmethod
    def error_response(exc: ApiError) -> Response:
        return exc.anthropic()  # Anthropic's error object

    def head(self, n_prompt: int) -> dict:
        """The message as ``message_start`` announces it: no content yet."""
        return {"id": self.mid, "type": "message", "role": "assistant", "model": self.model, "content": [],
                "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": n_prompt, "output_tokens": 0}}

    def _open(self, kind: str, start: dict) -> list[str]:
        """End the open block (if any) and start the next."""
        out = [] if self.block_kind is None else [event("content_block_stop", {"index": self.block})]
        self.block += 1
        self.block_kind = kind
        return out + [event("content_block_start", {"index": self.block, "content_block": start})]

    def opening(self) -> list[str]:
        return [event("message_start", {"message": self.head(self.n_prompt)}), event("ping", {})]

    def keepalive(self) -> str:
        return event("ping", {})

    def logprobs(self, entries: list[TokenLogprob]) -> None:
        pass  # the Messages API has none (a Messages request never asks)

    def content(self, e: Content) -> list[str]:
        out = [] if self.block_kind == "text" else self._open("text", {"type": "text", "text": ""})
        return out + [event("content_block_delta", {"index": self.block, "delta": {"type": "text_delta",
                                                                                   "text": e.text}})]

    def call_start(self, e: CallStart) -> list[str]:
        return self._open("tool_use", {"type": "tool_use", "id": self.ids(e.index), "name": e.name, "input": {}})

    def args_delta(self, e: ArgsDelta) -> list[str]:
        return [event("content_block_delta", {"index": self.block,
                                              "delta": {"type": "input_json_delta", "partial_json": e.text}})]

    def failed(self, message: str) -> list[str]:
        return [event("error", {"error": {"type": "api_error", "message": message}})]

    def closing(self, result: Result, reply: Reply) -> list[str]:
        out = [] if self.block_kind is None else [event("content_block_stop", {"index": self.block})]
        reason, sequence = stop(result, reply)  # only the reply's calls are read
        return out + [event("message_delta", {"delta": {"stop_reason": reason, "stop_sequence": sequence},
                                              "usage": usage(result)}),
                      event("message_stop", {})]

    def whole(self, reply: Reply, result: Result) -> dict:
        content: list[dict] = []
        if reply.content:
            content.append({"type": "text", "text": reply.content})
        for i, c in enumerate(reply.calls):
            content.append({"type": "tool_use", "id": self.ids(i), "name": c.name, "input": _input(c.arguments)})
        reason, sequence = stop(result, reply)
        return {**self.head(0), "content": content, "stop_reason": reason, "stop_sequence": sequence,
                "usage": usage(result)}

    def remember(self, reply: Reply, answer: dict) -> None:
        pass  # nothing is kept of a Messages answer

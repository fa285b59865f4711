"""OpenAI's own two response shapes, written from what the engine did: a chat completion and a
text completion, each whole or as server-sent chunks (``ChatWire``, ``CompletionWire``).

Each fact is computed once and only spelled per shape: the finish reason is "length" when the
budget or the context ran out, else "tool_calls" when the reply called a tool, else "stop";
a call's id is given when its name is first known and kept for the stream and the final
message alike (``wire.CallIds``); the kept tokens' log-probabilities ride on the next chunk
after the pass that kept them. When each thing is said is the driver's (``lifecycle.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..toolcalls.parse import ArgsDelta, CallStart, Content, Reply
from .api_error import ApiError
from .wire import CallIds, chat_message, specdec_field

if TYPE_CHECKING:
    from starlette.responses import Response

    from ..engine.result import Result
    from ..engine.verify.logprobs import TokenLogprob


class TokenSpelling:
    """Log-probabilities in OpenAI's two shapes, each token spelled by the target's own pieces."""

    def __init__(self, piece: Callable[[int], bytes]):
        self.piece = piece

    def _entry(self, token: int, logprob: float) -> dict:
        raw = self.piece(token)
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(raw)}

    def chat(self, entries: list[TokenLogprob] | None) -> dict | None:
        if entries is None:
            return None
        return {"content": [{**self._entry(e.token, e.logprob),
                             "top_logprobs": [self._entry(t, lp) for t, lp in e.top]} for e in entries],
                "refusal": None}

    def text(self, entries: list[TokenLogprob] | None, offset: int = 0) -> dict | None:
        """The completions endpoint's older shape: parallel lists, and offsets into the text."""
        if entries is None:
            return None
        tokens, offsets = [], []
        for e in entries:
            tokens.append(self.piece(e.token).decode("utf-8", errors="replace"))
            offsets.append(offset)
            offset += len(tokens[-1])
        return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries],
                "top_logprobs": [{self.piece(t).decode("utf-8", errors="replace"): lp for t, lp in e.top}
                                 for e in entries] if any(e.top for e in entries) else None,
                "text_offset": offsets}


def finish_reason(result: Result, reply: Reply | None = None) -> str:
    """OpenAI's words: "length" when the budget or the context ran out (a call it cut keeps
    what was written of it), else "tool_calls" when the reply called, else "stop"."""
    if result.stats.stop_reason in ("length", "context"):
        return "length"
    return "tool_calls" if reply is not None and reply.calls else "stop"


def usage(result: Result) -> dict:
    st = result.stats
    return {
        "prompt_tokens": st.n_prompt, "completion_tokens": st.n_generated,
        "total_tokens": st.n_prompt + st.n_generated,
        "prompt_tokens_details": {"cached_tokens": st.n_prompt_reused},
        "completion_tokens_details": {"accepted_prediction_tokens": st.n_accepted,
                                      "rejected_prediction_tokens": st.n_drafted - st.n_accepted},
    }


def sse(obj: dict | str) -> str:
    return "data: " + (obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)) + "\n\n"


class _Chunks:
    """What OpenAI's chat and text completion wires share: the envelope, the log-probabilities
    held for the next chunk, the keep-alive, the error and the end of a stream."""

    whole_object = ""  # the "object" of a whole answer, and of a stream's chunks
    chunk_object = ""

    def __init__(self, rid: str, created: int, model: str, tokens: TokenSpelling, ids: CallIds, include_usage: bool):
        self.rid, self.created, self.model = rid, created, model
        self.tokens, self.ids, self.include_usage = tokens, ids, include_usage
        self.pending: list[TokenLogprob] = []  # kept tokens' log-probabilities not yet sent

    def _envelope(self, obj: str, choices: list[dict], **extra: object) -> dict:
        return {"id": self.rid, "object": obj, "created": self.created, "model": self.model, "choices": choices,
                **extra}

    def _taken(self) -> list[TokenLogprob] | None:
        """The log-probabilities the next chunk carries (None: none since the last)."""
        taken, self.pending = self.pending or None, []
        return taken

    def _last_chunk(self, finish: str, figures: dict) -> str:
        """The chunk with the finish reason, and what the engine did (``specdec``)."""
        raise NotImplementedError

    @staticmethod
    def error_response(exc: ApiError) -> Response:
        return exc.response()  # OpenAI's error object

    def keepalive(self) -> str:
        return ": keep-alive\n\n"  # an SSE comment: clients skip it

    def logprobs(self, entries: list[TokenLogprob]) -> None:
        self.pending.extend(entries)

    def failed(self, message: str) -> list[str]:
        return [sse({"error": {"message": message, "type": "server_error"}}), sse("[DONE]")]

    def closing(self, result: Result, reply: Reply) -> list[str]:
        out = [self._last_chunk(finish_reason(result, reply), specdec_field(result))]
        if self.include_usage:
            out.append(sse(self._envelope(self.chunk_object, [], usage=usage(result))))
        return out + [sse("[DONE]")]

    def remember(self, reply: Reply, answer: dict) -> None:
        pass  # nothing is kept of an OpenAI answer


class ChatWire(_Chunks):
    """``/v1/chat/completions``: a message, or deltas (the role, content, each call's index, id and
    name, then its arguments in pieces)."""

    whole_object, chunk_object = "chat.completion", "chat.completion.chunk"

    def _chunk(self, piece: dict, finish: str | None = None, **extra: object) -> str:
        choice = {"index": 0, "finish_reason": finish, "logprobs": self.tokens.chat(self._taken()), "delta": piece}
        return sse(self._envelope(self.chunk_object, [choice], **extra))

    def _last_chunk(self, finish: str, figures: dict) -> str:
        return self._chunk({}, finish, specdec=figures)

    def opening(self) -> list[str]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def content(self, event: Content) -> list[str]:
        return [self._chunk({"content": event.text})]

    def call_start(self, event: CallStart) -> list[str]:
        return [self._chunk({"tool_calls": [{"index": event.index, "id": self.ids(event.index), "type": "function",
                                             "function": {"name": event.name, "arguments": ""}}]})]

    def args_delta(self, event: ArgsDelta) -> list[str]:
        return [self._chunk({"tool_calls": [{"index": event.index, "function": {"arguments": event.text}}]})]

    def whole(self, reply: Reply, result: Result) -> dict:
        choice = {"index": 0, "message": chat_message(reply, self.ids), "finish_reason": finish_reason(result, reply),
                  "logprobs": self.tokens.chat(result.logprobs)}
        return self._envelope(self.whole_object, [choice], usage=usage(result))


class CompletionWire(_Chunks):
    """``/v1/completions``: the text, whole or in pieces; its log-probabilities carry offsets into it."""

    whole_object = chunk_object = "text_completion"

    def __init__(self, rid: str, created: int, model: str, tokens: TokenSpelling, ids: CallIds, include_usage: bool):
        super().__init__(rid, created, model, tokens, ids, include_usage)
        self.offset = 0  # characters of text sent so far

    def _chunk(self, piece: str, finish: str | None = None, **extra: object) -> str:
        choice = {"index": 0, "finish_reason": finish, "logprobs": self.tokens.text(self._taken(), self.offset),
                  "text": piece}
        self.offset += len(piece)
        return sse(self._envelope(self.chunk_object, [choice], **extra))

    def _last_chunk(self, finish: str, figures: dict) -> str:
        return self._chunk("", finish, specdec=figures)

    def opening(self) -> list[str]:
        return []

    def content(self, event: Content) -> list[str]:
        return [self._chunk(event.text)]

    def call_start(self, event: CallStart) -> list[str]:
        raise AssertionError("a completion's text is read without a tool parser")

    def args_delta(self, event: ArgsDelta) -> list[str]:
        raise AssertionError("a completion's text is read without a tool parser")

    def whole(self, reply: Reply, result: Result) -> dict:
        choice = {"index": 0, "text": reply.content or "", "finish_reason": finish_reason(result),
                  "logprobs": self.tokens.text(result.logprobs)}
        return self._envelope(self.whole_object, [choice], usage=usage(result))

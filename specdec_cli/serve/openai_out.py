"""OpenAI's response shapes, written from what the engine did: a chat completion or a text
completion, whole or as server-sent chunks; the message with its tool calls, the finish
reason, the usage, and the log-probabilities.

Each fact is computed once here and only spelled per shape: the finish reason is "tool_calls"
when the reply called a tool (else "length" when the budget or the context ran out, else
"stop"), a call's id is given when its name is first known and kept for the stream and the
final message alike, and a streamed reply's deltas come from the same ``ReplyStream`` a whole
one is read through (``toolcalls/stream.py``).
"""

from __future__ import annotations

import json

from ..toolcalls.parse import ArgsDelta, CallStart, Content, Reply


class Spelling:
    """How one response spells tokens and calls: the target's token pieces for log-probabilities,
    the tool-call family's ids."""

    def __init__(self, piece, new_id):
        self.piece = piece
        self.new_id = new_id
        self.ids: list[str] = []  # one per call, in order

    def call_id(self, index: int) -> str:
        while len(self.ids) <= index:
            self.ids.append(self.new_id())
        return self.ids[index]

    # --- log-probabilities -----------------------------------------------------------------
    def _entry(self, token: int, logprob: float) -> dict:
        raw = self.piece(token)
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(raw)}

    def chat_logprobs(self, entries) -> dict | None:
        if entries is None:
            return None
        return {"content": [{**self._entry(e.token, e.logprob),
                             "top_logprobs": [self._entry(t, lp) for t, lp in e.top]} for e in entries],
                "refusal": None}

    def text_logprobs(self, entries, offset: int = 0) -> dict | None:
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

    # --- a whole reply ---------------------------------------------------------------------
    def message(self, reply: Reply) -> dict:
        msg: dict = {"role": "assistant", "content": reply.content}
        if reply.calls:
            msg["tool_calls"] = [{"id": self.call_id(i), "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for i, c in enumerate(reply.calls)]
        return msg

    # --- a streamed reply ------------------------------------------------------------------
    def delta(self, event) -> dict:
        """One parser event as a chat chunk's delta."""
        if isinstance(event, Content):
            return {"content": event.text}
        if isinstance(event, CallStart):
            return {"tool_calls": [{"index": event.index, "id": self.call_id(event.index), "type": "function",
                                    "function": {"name": event.name, "arguments": ""}}]}
        assert isinstance(event, ArgsDelta)
        return {"tool_calls": [{"index": event.index, "function": {"arguments": event.text}}]}


def finish_reason(result, reply: Reply | None = None) -> str:
    """OpenAI's words: "length" when the budget or the context ran out (a call it cut keeps
    what was written of it), else "tool_calls" when the reply called, else "stop"."""
    if result.stats.stop_reason in ("length", "context"):
        return "length"
    return "tool_calls" if reply is not None and reply.calls else "stop"


def usage(result) -> dict:
    st = result.stats
    return {
        "prompt_tokens": st.n_prompt, "completion_tokens": st.n_generated,
        "total_tokens": st.n_prompt + st.n_generated,
        "prompt_tokens_details": {"cached_tokens": st.n_prompt_reused},
        "completion_tokens_details": {"accepted_prediction_tokens": st.n_accepted,
                                      "rejected_prediction_tokens": st.n_drafted - st.n_accepted},
    }


def specdec_field(result) -> dict:
    st = result.stats
    return {"stop_reason": st.stop_reason, "steps_by_drafter": dict(st.steps_by_drafter),
            "n_drafted": st.n_drafted, "n_accepted": st.n_accepted, "n_target_passes": st.n_target_passes,
            "first_token_seconds": st.first_token_seconds, "tokens_per_second": st.tokens_per_second,
            # from the request's arrival: to its first token, in the queue, and what happened up to the first token
            "ttft": st.ttft_seconds, "queue_seconds": st.queue_seconds, "timeline": st.timeline}


def sse(obj) -> str:
    return "data: " + (obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)) + "\n\n"

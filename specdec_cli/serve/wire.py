"""What an API's wire format must say about one request, and what every format shares.

The driver of a request's life (``lifecycle.py``) decides *when* each thing is said: the
opening events, a keep-alive in a long silence, each piece of the reply as the tool parser
reads it (``Content``, ``CallStart``, ``ArgsDelta``), an error that ended the generation, the
closing events, or the whole answer at once. A ``Wire`` says only *how*, in one API's words:
OpenAI's chat and text completion chunks (``openai_out.py``), Anthropic's Messages events
(``messages_out.py``), the Responses API's typed events (``responses_out.py``). So a stop
reason, a keep-alive or a new kind of event is taught to the driver once, and each format
only spells it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from starlette.responses import Response

    from ..engine.result import Result
    from ..engine.verify.logprobs import TokenLogprob
    from ..toolcalls.parse import ArgsDelta, CallStart, Content, Reply
    from .api_error import ApiError


class Wire(Protocol):
    """One response in one API's format. The stream methods return the server-sent events to
    write, in order (none is a valid answer); a wire may keep state between them (the block or
    item that is open, log-probabilities not yet sent)."""

    def opening(self) -> list[str]:
        """What a stream says before the first token (a role, a created response)."""
        ...

    def keepalive(self) -> str:
        """What a stream says after a silence, so that clients and proxies keep it open."""
        ...

    def logprobs(self, entries: list[TokenLogprob]) -> None:
        """Kept tokens' log-probabilities, to ride on what is said next (a format without them drops them)."""
        ...

    def content(self, event: Content) -> list[str]:
        """Text of the reply."""
        ...

    def call_start(self, event: CallStart) -> list[str]:
        """A tool call whose name is now known."""
        ...

    def args_delta(self, event: ArgsDelta) -> list[str]:
        """More of a tool call's arguments."""
        ...

    def failed(self, message: str) -> list[str]:
        """The generation ended on an error (a fault in this request, the engine stopping): the stream's end."""
        ...

    def closing(self, result: Result, reply: Reply) -> list[str]:
        """The stream's end after the generation's: stop reason, usage, the last events."""
        ...

    def whole(self, reply: Reply, result: Result) -> dict:
        """The answer of a request that did not stream (``lifecycle.final_answer`` adds what every API's carries)."""
        ...

    def remember(self, reply: Reply, answer: dict) -> None:
        """Keep what the API keeps of a whole answer once it is final (Responses: its store)."""
        ...

    @staticmethod
    def error_response(exc: ApiError) -> Response:
        """A request this API's route refused or could not run, as its error object."""
        ...


class CallIds:
    """A response's tool-call ids, in the family's own form (``call_...``, Mistral's nine
    characters): made when a call's name is first known and kept, so a stream's deltas and
    the whole answer (and a stored conversation) name each call alike."""

    def __init__(self, new_id: Callable[[], str]):
        self.new_id = new_id
        self.ids: list[str] = []  # one per call, in order

    def __call__(self, index: int) -> str:
        while len(self.ids) <= index:
            self.ids.append(self.new_id())
        return self.ids[index]


def chat_message(reply: Reply, ids: CallIds) -> dict:
    """The reply as an assistant's chat message, its tool calls with their ids: a chat answer's
    message, the turn a stored Responses conversation continues from, a ``run --batch`` line's calls."""
    msg: dict = {"role": "assistant", "content": reply.content}
    if reply.calls:
        msg["tool_calls"] = [{"id": ids(i), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                             for i, c in enumerate(reply.calls)]
    return msg


def specdec_field(result: Result) -> dict:
    """What the engine did for one request (drafting, passes, timings), for the ``specdec`` field an
    answer carries beside its API's own (clients ignore a top-level field they do not know)."""
    st = result.stats
    return {"stop_reason": st.stop_reason, "steps_by_drafter": dict(st.steps_by_drafter),
            "n_drafted": st.n_drafted, "n_accepted": st.n_accepted, "n_target_passes": st.n_target_passes,
            "first_token_seconds": st.first_token_seconds, "tokens_per_second": st.tokens_per_second,
            # from the request's arrival: to its first token, in the queue, and what happened up to the first token
            "ttft": st.ttft_seconds, "queue_seconds": st.queue_seconds, "timeline": st.timeline}

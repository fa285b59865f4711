"""A request's life on the server, written once for every API: from a checked body to the
engine and back, as one whole answer or as a stream.

An API module (``completions_api.py``, ``messages_api.py``, ``responses_api.py``) only reads
its body into the common request, a Chat Completions ``ChatRequest`` (Messages and Responses
bodies are translated: their ``to_chat``) or a completion's prompt, and says how its answers
are spelled (a ``Wire``, ``wire.py``). Everything else is here, so that every API behaves
alike and a change to how requests run is made in one place:

- ``prepare``, ``ready_chat``: render, tokenize and compile the grammar on a helper thread,
  never the event loop's, so a long prompt holds up no other request; a foreseen failure is a
  400 naming the field the caller says (each API names its conversation its own way);
- ``submit``: the engine's settings from the body, the ``Work`` handed to the engine thread
  (``worker.py``), a 503 when its queue is full;
- ``answer``: whole, through ``final_answer``, the one function every API's whole answer
  passes through; or streamed by ``drive``, the one loop every stream runs: keep-alives in a
  silence, the reply's text through the tool parser, an error that ended the generation (that
  request's alone: its stream ends with the error in its API's format), a client gone
  (cancelled), and the end, recorded by ``finished`` (metrics, the request's log line, the
  conversation's tokens kept for its next turn).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..errors import UsageError
from ..terminal.prompts import parse_messages
from ..toolcalls.parse import ArgsDelta, CallStart, Content, Event, Reply
from ..toolcalls.request import ToolsError, read_tools
from . import request_log
from .api_error import ApiError
from .events import Done, Failed, Idle, Logprobs, Text
from .generation import Generation, Ready
from .wire import Wire, specdec_field
from .worker import Handle, Work

if TYPE_CHECKING:
    from ..engine.options import GenOptions
    from ..engine.result import Result
    from ..toolcalls.turn import ChatPrompter
    from .metrics import Metrics
    from .schemas import ChatRequest, CompletionRequest
    from .worker import Worker

# seconds of silence after which a stream says it is still there (a long prompt read on a CPU
# takes minutes before the first token; clients and proxies drop a stream idle for long)
KEEPALIVE_SECONDS = 10.0

T = TypeVar("T")
Handler = Callable[[Request, float], Awaitable[Response]]  # (the request, when it arrived) -> the response


@dataclass(frozen=True)
class ServeContext:
    """What every route needs, made once by ``create_app`` and shared by the API modules."""

    worker: Worker  # the engine thread's loop: requests in, events out
    metrics: Metrics
    prompter: ChatPrompter  # the loaded target's: renders chats, compiles grammars, keeps transcripts
    make_gen: Callable[[ChatRequest | CompletionRequest], GenOptions]  # a body's generation settings
    model: str  # the name the server answers as
    api_key: str | None  # None: any key, or none, is accepted


def endpoint(handler: Handler,
             error_response: Callable[[ApiError], Response]) -> Callable[[Request], Awaitable[Response]]:
    """A route's function: ``handler(request, arrived)``, a request it refuses or cannot run
    answered as ``error_response`` spells it (the route's API's error object). ``arrived``:
    when the request came in, which its time to first token counts from."""

    async def route(request: Request) -> Response:
        arrived = time.perf_counter()
        try:
            return await handler(request, arrived)
        except ApiError as exc:
            return error_response(exc)

    return route


async def prepare(build: Callable[[], T], *, param: str, names: Mapping[str, str] | None = None) -> T:
    """``build()`` on a helper thread, its foreseen failures as 400s: a ``ToolsError`` names its
    own field, any other ``UsageError`` (a prompt past the context) names ``param``. ``names``:
    the caller's own name for a field of the common request (``bodies.validated``)."""
    def own(field: str | None) -> str | None:
        return names.get(field, field) if names and field is not None else field

    def run() -> T:
        try:
            return build()
        except ApiError as exc:  # a setting of the common request it cannot honour (response_format)
            exc.param = own(exc.param)
            raise
        except ToolsError as exc:
            raise ApiError(400, exc.one_line(), param=own(exc.param)) from None
        except UsageError as exc:
            raise ApiError(400, exc.one_line(), param=param) from None

    return await asyncio.to_thread(run)


async def ready_chat(ctx: ServeContext, chat: ChatRequest, *, param: str,
                     names: Mapping[str, str] | None = None) -> Ready:
    """The common request made ready: its messages checked, its tools read, rendered by the
    model's template, its grammar compiled. ``param``: the field a bad conversation is named by
    in the caller's API (``messages``, or the Responses API's ``input``); ``names``: its names
    for the common request's other fields."""

    def build() -> Ready:
        try:
            messages = parse_messages(chat.messages)
        except UsageError as exc:
            raise ToolsError(str(exc), param) from None
        tools = read_tools(chat.tools, chat.tool_choice, chat.parallel_tool_calls)
        turn = ctx.prompter.turn(messages, tools, chat.response_constraint())
        return Ready(chat, turn.tokens, turn.grammar, turn.shown, turn)

    return await prepare(build, param=param, names=names)


def submit(ctx: ServeContext, ready: Ready, arrived: float) -> Generation:
    """Hand ``ready`` to the engine thread with its body's settings; a full queue is a 503."""
    from ..engine.verify.verifiers import resolve_seed

    body = ready.body
    gen = replace(ctx.make_gen(body), grammar=ready.grammar, shown=ready.shown, logprobs=body.n_logprobs())
    seed = body.seed if body.seed is not None else resolve_seed(None)
    handle = Handle(asyncio.get_running_loop())
    sources = ready.turn.sources if ready.turn is not None else ()
    if not ctx.worker.submit(Work(handle, ready.tokens, gen, seed, sources, arrived)):
        raise ApiError(503, "the server is busy: too many requests queued", kind="server_error",
                       headers={"Retry-After": "1"})
    ctx.metrics.accepted()
    return Generation(ready, handle)


async def answer(ctx: ServeContext, request: Request, ready: Ready, wire: Wire, arrived: float) -> Response:
    """Run ``ready`` and answer it as its body asks: whole, or as server-sent events."""
    generation = submit(ctx, ready, arrived)
    if ready.body.stream:
        return StreamingResponse(drive(ctx, generation, wire), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    text, result = await generation.whole(request)
    finished(ctx, ready, result)
    return JSONResponse(final_answer(wire, ready.read(text), result))


def final_answer(wire: Wire, reply: Reply, result: Result) -> dict:
    """Every API's whole answer: its own shape, with what the engine did beside it (``specdec``).
    A field every API's answer should carry is added here, once."""
    answered = {**wire.whole(reply, result), "specdec": specdec_field(result)}
    wire.remember(reply, answered)
    return answered


def finished(ctx: ServeContext, ready: Ready, result: Result) -> None:
    """The end of a generation that ran to its result: counted, logged, its transcript kept."""
    ctx.metrics.finished(result)
    request_log.record(result)
    if ready.turn is not None:
        ctx.prompter.remember(ready.turn, result)


async def drive(ctx: ServeContext, generation: Generation, wire: Wire) -> AsyncIterator[str]:
    """Every stream: ``wire``'s opening, then the generation's events as they come, spelled by
    ``wire``: a keep-alive after each silence of ``KEEPALIVE_SECONDS``, log-probabilities handed
    on, the text through the reply's parser, and the end (``Failed``: the error; ``Done``: the
    parser's last events, the end recorded, the closing). A client that goes away (Starlette
    stops the stream) cancels the generation."""
    stream = generation.ready.reply_stream()
    text: list[str] = []  # the reply so far (a reply without a parser is its text)
    over = False
    try:
        for line in wire.opening():
            yield line
        async for event in generation.events(idle=KEEPALIVE_SECONDS):
            match event:
                case Idle():
                    lines = [wire.keepalive()]
                case Logprobs(entries=entries):
                    wire.logprobs(entries)
                    lines = []
                case Text(text=piece):
                    text.append(piece)
                    lines = _spelled(wire, stream.feed(piece))
                case Failed(message=message):
                    lines = wire.failed(message)
                case Done(result=result):
                    lines = _spelled(wire, stream.finish())
                    finished(ctx, generation.ready, result)
                    lines += wire.closing(result, stream.reply("".join(text)))
            for line in lines:
                yield line
        over = True
    finally:
        if not over:
            generation.cancel()


def _spelled(wire: Wire, events: list[Event]) -> list[str]:
    """The tool parser's events in ``wire``'s format."""
    lines: list[str] = []
    for event in events:
        match event:
            case Content():
                lines += wire.content(event)
            case CallStart():
                lines += wire.call_start(event)
            case ArgsDelta():
                lines += wire.args_delta(event)
    return lines

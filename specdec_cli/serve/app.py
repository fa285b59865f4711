"""The HTTP side of ``specdec serve``: OpenAI's chat and completions endpoints, over Starlette.

Each request is checked here (JSON, its depth, types, limits, fields that cannot be honoured,
the key) and answered with an OpenAI-style error object when it cannot run; the model is
never touched for a bad request. A good one is made ready off the engine's thread (rendered,
tokenized, its grammar compiled: ``toolcalls/turn.py``), so a long prompt never holds up
other requests' passes, and becomes a ``Work`` for the engine thread (``worker.py``), whose
events are turned into one JSON response or into server-sent events (``openai_out.py``).
Starlette and uvicorn, as llama-cpp-python's own server uses, do the HTTP; pydantic
(``schemas.py``) the request bodies.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import replace

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import UsageError
from ..terminal.constraint_args import ConstraintSpec
from ..terminal.prompts import parse_messages
from ..toolcalls.request import ToolsError, closed, read_tools
from . import messages_api, responses_api
from .api_error import ApiError
from .bodies import check_key, read_body
from .calls import KEEPALIVE_SECONDS, Call
from .events import Done, Failed, Idle, Logprobs, Text
from .metrics import Metrics
from .openai_out import Spelling, finish_reason, specdec_field, sse, usage
from .request_log import RequestLog
from .schemas import ChatRequest, CompletionRequest
from .worker import Worker


def create_app(worker: Worker, *, model: str, api_key: str | None, make_gen: Callable, metrics: Metrics,
               prompter, log: bool = True) -> Starlette:
    """``make_gen(request_body) -> GenOptions``: the generation settings of a checked request;
    ``prompter``: the loaded target's ``ChatPrompter``; ``log``: a line on stderr per request."""
    target = prompter.model

    async def body_of(request: Request, model_cls):
        return await read_body(request, model_cls, api_key)

    def text_constraint(body) -> ConstraintSpec | None:
        """``response_format``: json_object and json_schema become a JSON Schema the output obeys."""
        fmt = body.response_format or {"type": "text"}
        kind = fmt.get("type")
        if kind == "text":
            return None
        if kind == "json_object":
            return ConstraintSpec("json_schema", '{"type": "object"}', "response_format")
        if kind == "json_schema" and isinstance(fmt.get("json_schema"), dict):
            schema = fmt["json_schema"].get("schema", True)
            if fmt["json_schema"].get("strict") is True:  # OpenAI's strict: objects take no other keys
                schema = closed(schema)
            return ConstraintSpec("json_schema", json.dumps(schema), "response_format.json_schema")
        raise ApiError(400, "response_format takes type text, json_object, or json_schema with a "
                       "json_schema object", param="response_format")

    def prepared(fn, *args):
        """``fn(*args)`` on a worker thread, its foreseen failures as 400s."""
        def call():
            try:
                return fn(*args)
            except ToolsError as exc:
                raise ApiError(400, exc.one_line(), param=exc.param) from None
            except UsageError as exc:
                raise ApiError(400, exc.one_line(), param="messages" if fn is chat_turn else "prompt") from None
        return asyncio.to_thread(call)

    def chat_turn(body: ChatRequest):
        try:
            messages = parse_messages(body.messages)
        except UsageError as exc:
            raise ToolsError(str(exc), "messages") from None
        tools = read_tools(body.tools, body.tool_choice, body.parallel_tool_calls)
        return prompter.turn(messages, tools, text_constraint(body))

    def completion_prompt(body: CompletionRequest):
        prompt = body.text()
        spec = text_constraint(body)
        tokens = worker.engine.tokenize_prompt(prompt)
        return tokens, prompter.constraint(spec) if spec is not None else None

    async def run(request: Request, body, kind: str, tokens: list[int], gen, arrived: float, turn=None) -> Response:
        """``arrived``: when the request came in (its time to first token counts from there)."""
        from ..engine.verify.verifiers import resolve_seed

        seed = body.seed if body.seed is not None else resolve_seed(None)
        call = Call(worker, metrics, prompter, tokens, gen, seed, arrived, turn)
        rid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{secrets.token_hex(12)}"
        created = int(time.time())
        spell = Spelling(target.piece, prompter.format.new_id)
        if body.stream:
            return StreamingResponse(_stream(call, body, kind, rid, created, model, spell),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        text, result = await call.whole(request)
        if kind == "chat":
            reply = turn.read(text)
            choice = {"index": 0, "message": spell.message(reply), "finish_reason": finish_reason(result, reply),
                      "logprobs": spell.chat_logprobs(result.logprobs)}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish_reason(result),
                      "logprobs": spell.text_logprobs(result.logprobs)}
            obj = "text_completion"
        return JSONResponse({"id": rid, "object": obj, "created": created, "model": model, "choices": [choice],
                             "usage": usage(result), "specdec": specdec_field(result)})

    async def chat(request: Request) -> Response:
        arrived = time.perf_counter()
        try:
            body = await body_of(request, ChatRequest)
            turn = await prepared(chat_turn, body)
            gen = replace(make_gen(body), grammar=turn.grammar, shown=turn.shown, logprobs=body.n_logprobs())
            return await run(request, body, "chat", turn.tokens, gen, arrived, turn)
        except ApiError as exc:
            return exc.response()

    async def completions(request: Request) -> Response:
        arrived = time.perf_counter()
        try:
            body = await body_of(request, CompletionRequest)
            try:
                prompt = body.text()
            except ValueError as exc:
                raise ApiError(400, str(exc), param="prompt") from None
            if not prompt.strip():
                raise ApiError(400, "the prompt is empty", param="prompt")
            tokens, grammar = await prepared(completion_prompt, body)
            gen = replace(make_gen(body), grammar=grammar, logprobs=body.n_logprobs())
            return await run(request, body, "completion", tokens, gen, arrived)
        except ApiError as exc:
            return exc.response()

    async def models(request: Request) -> Response:
        try:
            check_key(request, api_key)
        except ApiError as exc:
            return exc.response()
        return JSONResponse({"object": "list", "data": [
            {"id": model, "object": "model", "created": metrics.started, "owned_by": "specdec"}]})

    async def health(_request: Request) -> Response:
        if not worker.alive:
            return JSONResponse({"status": "error"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def prometheus(_request: Request) -> Response:
        return PlainTextResponse(metrics.render(worker), media_type="text/plain; version=0.0.4")

    machinery = (worker, metrics, prompter, make_gen, model, api_key, prepared, chat_turn)
    return Starlette(routes=[
        *messages_api.Door(*machinery).routes(),
        *responses_api.Door(*machinery).routes(),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ], middleware=[Middleware(RequestLog)] if log else [])


async def _stream(call: Call, body, kind: str, rid: str, created: int, model: str, spell: Spelling):
    """Server-sent events: the text as the engine makes it final (a chat reply's tool calls as
    OpenAI's deltas: a call's index, id and name, then its arguments in pieces), the finish
    reason, the usage when asked for, then ``[DONE]``. Log-probabilities ride on the next
    chunk after the pass that kept their tokens. A client that goes away cancels the request."""
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    turn = call.turn
    stream = turn.stream() if turn is not None else None
    pending: list = []  # kept tokens' log-probabilities not yet sent
    offset = [0]  # a completion's text sent so far (its log-probabilities' text offsets)

    def chunk(delta: dict | None = None, text: str = "", finish=None, **extra) -> str:
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        if pending:
            if kind == "chat":
                choice["logprobs"] = spell.chat_logprobs(pending)
            else:
                choice["logprobs"] = spell.text_logprobs(pending, offset[0])
            pending.clear()
        if kind == "chat":
            choice["delta"] = delta or {}
        else:
            choice["text"] = text
            offset[0] += len(text)
        return sse({"id": rid, "object": obj, "created": created, "model": model, "choices": [choice], **extra})

    done = False
    try:
        if kind == "chat":
            yield chunk({"role": "assistant", "content": ""})
        async for event in call.events(idle=KEEPALIVE_SECONDS):
            if isinstance(event, Idle):
                yield ": keep-alive\n\n"  # an SSE comment: clients skip it
            elif isinstance(event, Logprobs):
                pending.extend(event.entries)
            elif isinstance(event, Text):
                if stream is None:
                    yield chunk(text=event.text)
                else:
                    for e in stream.feed(event.text):
                        yield chunk(spell.delta(e))
            elif isinstance(event, Failed):
                yield sse({"error": {"message": event.message, "type": "server_error"}})
            elif isinstance(event, Done):
                result = event.result
                reply = None
                if stream is not None:
                    for e in stream.finish():
                        yield chunk(spell.delta(e))
                    reply = stream.reply()
                call.finished(result)
                yield chunk({}, "", finish_reason(result, reply), specdec=specdec_field(result))
                if body.include_usage():
                    yield sse({"id": rid, "object": obj, "created": created, "model": model,
                               "choices": [], "usage": usage(result)})
        yield sse("[DONE]")
        done = True
    finally:
        if not done:
            call.cancel()

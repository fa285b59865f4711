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

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import UsageError
from ..terminal.constraint_args import ConstraintSpec
from ..terminal.prompts import parse_messages
from ..toolcalls.request import ToolsError, closed, read_tools
from .metrics import Metrics
from .openai_out import Spelling, finish_reason, specdec_field, sse, usage
from .schemas import ChatRequest, CompletionRequest
from .worker import Handle, Work, Worker

MAX_BODY = 8 * 1024 * 1024  # bytes of a request body
MAX_DEPTH = 64  # JSON nesting of a body: far past any real request, far short of Python's recursion limit
DISCONNECT_POLL = 0.5  # seconds between checks that a non-streaming client is still there


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error",
                 param: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.headers = status, message, kind, param, headers

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def create_app(worker: Worker, *, model: str, api_key: str | None, make_gen: Callable, metrics: Metrics,
               prompter) -> Starlette:
    """``make_gen(request_body) -> GenOptions``: the generation settings of a checked request;
    ``prompter``: the loaded target's ``ChatPrompter``."""
    target = prompter.model

    def check_key(request: Request) -> None:
        if not api_key:
            return  # no key set: any bearer token (or none) is accepted
        given = request.headers.get("authorization", "")
        token = given[7:] if given.lower().startswith("bearer ") else ""
        if not secrets.compare_digest(token.encode(), api_key.encode()):
            raise ApiError(401, "invalid or missing API key (send Authorization: Bearer KEY)",
                           kind="authentication_error")

    async def body_of(request: Request, model_cls):
        check_key(request)
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > MAX_BODY:
            raise ApiError(413, f"request body over {MAX_BODY // (1024 * 1024)} MiB")
        raw = await request.body()
        if len(raw) > MAX_BODY:
            raise ApiError(413, f"request body over {MAX_BODY // (1024 * 1024)} MiB")
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"the body is not valid JSON ({exc})") from None
        except RecursionError:
            data = None
        if data is None or _depth(data) > MAX_DEPTH:
            raise ApiError(400, f"the body nests JSON more than {MAX_DEPTH} levels deep")
        if not isinstance(data, dict):
            raise ApiError(400, "the body must be a JSON object")
        try:
            body = model_cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"] if not isinstance(p, str) or p not in ("str", "list[str]"))
            param = str(err["loc"][0]) if err["loc"] else None
            raise ApiError(400, f"{where}: {err['msg']}" if where else err["msg"], param=param) from None
        refused = body.unsupported()
        if refused is not None:
            raise ApiError(400, refused[1], param=refused[0])
        return body

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
        from ..engine.verify import resolve_seed

        handle = Handle(asyncio.get_running_loop())
        seed = body.seed if body.seed is not None else resolve_seed(None)
        if not worker.submit(Work(handle, tokens, gen, seed, turn.sources if turn is not None else (), arrived)):
            raise ApiError(503, "the server is busy: too many requests queued", kind="server_error",
                           headers={"Retry-After": "1"})
        metrics.accepted()
        rid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{secrets.token_hex(12)}"
        created = int(time.time())
        spell = Spelling(target.piece, prompter.format.new_id)
        if body.stream:
            return StreamingResponse(_stream(handle, body, kind, rid, created, model, metrics, turn, spell, prompter),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        text = []
        while True:
            try:
                event, value = await asyncio.wait_for(handle.events.get(), DISCONNECT_POLL)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    handle.cancel()
                continue
            if event == "text":
                text.append(value)
            elif event == "error":
                raise ApiError(500, value, kind="server_error")
            elif event == "done":
                result = value
                break
        metrics.finished(result)
        if kind == "chat":
            prompter.remember(turn, result)
            reply = turn.read("".join(text))
            choice = {"index": 0, "message": spell.message(reply), "finish_reason": finish_reason(result, reply),
                      "logprobs": spell.chat_logprobs(result.logprobs)}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": "".join(text), "finish_reason": finish_reason(result),
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
            check_key(request)
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

    return Starlette(routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ])


async def _stream(handle: Handle, body, kind: str, rid: str, created: int, model: str, metrics: Metrics,
                  turn, spell: Spelling, prompter):
    """Server-sent events: the text as the engine makes it final (a chat reply's tool calls as
    OpenAI's deltas: a call's index, id and name, then its arguments in pieces), the finish
    reason, the usage when asked for, then ``[DONE]``. Log-probabilities ride on the next
    chunk after the pass that kept their tokens. A client that goes away cancels the request."""
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
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
        while True:
            event, value = await handle.events.get()
            if event == "logprobs":
                pending.extend(value)
            elif event == "text":
                if stream is None:
                    yield chunk(text=value)
                else:
                    for e in stream.feed(value):
                        yield chunk(spell.delta(e))
            elif event == "error":
                yield sse({"error": {"message": value, "type": "server_error"}})
                break
            elif event == "done":
                result = value
                reply = None
                if stream is not None:
                    for e in stream.finish():
                        yield chunk(spell.delta(e))
                    reply = stream.reply()
                metrics.finished(result)
                if turn is not None:
                    prompter.remember(turn, result)
                yield chunk({}, "", finish_reason(result, reply), specdec=specdec_field(result))
                if body.include_usage():
                    yield sse({"id": rid, "object": obj, "created": created, "model": model,
                               "choices": [], "usage": usage(result)})
                break
        yield sse("[DONE]")
        done = True
    finally:
        if not done:
            handle.cancel()


def _depth(value, limit: int = MAX_DEPTH) -> int:
    """How deep ``value`` nests lists and objects (counted without recursion, up to past ``limit``)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest

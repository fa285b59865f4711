"""The HTTP side of ``specdec serve``: OpenAI's chat and completions endpoints, over Starlette.

Each request is checked here (JSON, types, limits, key) and answered with an OpenAI-style
error object when it cannot run; the model is never touched for a bad request. A good one
becomes a ``Work`` for the engine thread (``worker.py``), whose events are turned into one
JSON response or into server-sent events (``data: {...}`` chunks, then ``data: [DONE]``).
Starlette and uvicorn, as llama-cpp-python's own server uses, do the HTTP; pydantic
(``schemas.py``) the request bodies.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import UsageError
from ..terminal.constraint_args import ConstraintSpec
from ..terminal.prompts import parse_messages
from .metrics import Metrics
from .schemas import ChatRequest, CompletionRequest
from .worker import Handle, Work, Worker

MAX_BODY = 8 * 1024 * 1024  # bytes of a request body
DISCONNECT_POLL = 0.5  # seconds between checks that a non-streaming client is still there


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error",
                 param: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.headers = status, message, kind, param, headers

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def create_app(worker: Worker, *, model: str, api_key: str | None, make_gen: Callable, metrics: Metrics) -> Starlette:
    """``make_gen(request_body) -> GenOptions``: the generation settings of a checked request."""

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
        if not isinstance(data, dict):
            raise ApiError(400, "the body must be a JSON object")
        try:
            body = model_cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"] if not isinstance(p, str) or p not in ("str", "list[str]"))
            param = str(err["loc"][0]) if err["loc"] else None
            raise ApiError(400, f"{where}: {err['msg']}" if where else err["msg"], param=param) from None
        if body.n != 1:
            raise ApiError(400, "n must be 1: one completion per request", param="n")
        return body

    def constraint_of(body) -> ConstraintSpec | None:
        """``response_format``: json_object and json_schema become a JSON Schema the output obeys;
        a schema that does not compile is a 400 before the request is queued."""
        from ..engine.constraint import compile_constraint

        fmt = body.response_format or {"type": "text"}
        kind = fmt.get("type")
        if kind == "text":
            return None
        if kind == "json_object":
            spec = ConstraintSpec("json_schema", '{"type": "object"}', "response_format")
        elif kind == "json_schema" and isinstance(fmt.get("json_schema"), dict):
            schema = fmt["json_schema"].get("schema", True)
            spec = ConstraintSpec("json_schema", json.dumps(schema), "response_format.json_schema")
        else:
            raise ApiError(400, "response_format takes type text, json_object, or json_schema with a "
                           "json_schema object", param="response_format")
        try:
            compile_constraint(spec)
        except UsageError as exc:
            raise ApiError(400, exc.one_line(), param="response_format") from None
        return spec

    async def run(request: Request, body, messages, prompt, kind: str) -> Response:
        from ..engine.verify import resolve_seed

        handle = Handle(asyncio.get_running_loop())
        gen = make_gen(body)
        seed = body.seed if body.seed is not None else resolve_seed(None)
        if not worker.submit(Work(handle, messages, prompt, gen, seed, constraint_of(body))):
            raise ApiError(503, "the server is busy: too many requests queued", kind="server_error",
                           headers={"Retry-After": "1"})
        metrics.requests += 1
        event, value = await handle.events.get()
        if event == "error":
            raise ApiError(400, value)
        n_prompt = value
        rid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{secrets.token_hex(12)}"
        created = int(time.time())
        if body.stream:
            return StreamingResponse(_stream(handle, body, kind, rid, created, model, n_prompt, metrics),
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
            else:
                result = value
                break
        metrics.finished(result)
        choice = {"index": 0, "finish_reason": finish_reason(result), "logprobs": None}
        if kind == "chat":
            choice["message"] = {"role": "assistant", "content": "".join(text)}
            obj = "chat.completion"
        else:
            choice["text"] = "".join(text)
            obj = "text_completion"
        return JSONResponse({"id": rid, "object": obj, "created": created, "model": model, "choices": [choice],
                             "usage": usage(result), "specdec": specdec_field(result)})

    async def chat(request: Request) -> Response:
        try:
            body = await body_of(request, ChatRequest)
            try:
                messages = parse_messages(body.messages)
            except UsageError as exc:
                raise ApiError(400, str(exc), param="messages") from None
            return await run(request, body, messages, None, "chat")
        except ApiError as exc:
            return exc.response()

    async def completions(request: Request) -> Response:
        try:
            body = await body_of(request, CompletionRequest)
            try:
                prompt = body.text()
            except ValueError as exc:
                raise ApiError(400, str(exc), param="prompt") from None
            if not prompt.strip():
                raise ApiError(400, "the prompt is empty", param="prompt")
            return await run(request, body, None, prompt, "completion")
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


async def _stream(handle: Handle, body, kind: str, rid: str, created: int, model: str, n_prompt: int,
                  metrics: Metrics):
    """Server-sent events: the text as the engine makes it final, the finish reason, the usage
    when asked for, then ``[DONE]``. A client that goes away cancels the request."""
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"

    def chunk(delta: dict | None = None, text: str | None = None, finish=None, **extra) -> str:
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        if kind == "chat":
            choice["delta"] = delta or {}
        else:
            choice["text"] = text or ""
        return "data: " + json.dumps({"id": rid, "object": obj, "created": created, "model": model,
                                      "choices": [choice], **extra}) + "\n\n"

    done = False
    try:
        if kind == "chat":
            yield chunk({"role": "assistant", "content": ""})
        while True:
            event, value = await handle.events.get()
            if event == "text":
                yield chunk({"content": value}, text=value)
            elif event == "error":
                yield "data: " + json.dumps({"error": {"message": value, "type": "server_error"}}) + "\n\n"
                break
            else:
                result = value
                metrics.finished(result)
                yield chunk({}, "", finish_reason(result), specdec=specdec_field(result))
                if body.include_usage():
                    yield "data: " + json.dumps({"id": rid, "object": obj, "created": created, "model": model,
                                                 "choices": [], "usage": usage(result)}) + "\n\n"
                break
        yield "data: [DONE]\n\n"
        done = True
    finally:
        if not done:
            handle.cancel()


def finish_reason(result) -> str:
    """OpenAI's words: "length" when the budget or the context ran out, else "stop"."""
    return "length" if result.stats.stop_reason in ("length", "context") else "stop"


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
            "first_token_seconds": st.first_token_seconds, "tokens_per_second": st.tokens_per_second}

"""``POST /v1/responses`` and ``GET /v1/responses/{id}``: OpenAI's Responses API, as Codex CLI and
the ``openai-agents`` SDK's default model speak it, translated onto the chat request the rest of
the server runs.

``input`` (a string, or items: ``message`` with text parts, ``function_call``,
``function_call_output``) and ``instructions`` become chat messages, function ``tools`` and
``tool_choice`` the chat's, ``text.format`` its ``response_format``, ``max_output_tokens`` its
budget (``to_chat``). A response is kept in memory (``ResponseStore``: the conversation it ended,
bounded, the oldest dropped; none with ``store: false``), so a client may send
``previous_response_id`` and only its new items: the conversation is rebuilt from the store, and
the prefix cache already holds it. Refused by name: hosted tools (web search, file search, ...),
non-text input parts, ``background``, ``reasoning`` other than effort ``none`` (the model
reasons not at all), ``truncation: auto``.
"""

from __future__ import annotations

import copy
import json
import secrets
import threading
import time
from collections import OrderedDict
from functools import partial
from typing import Any

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .api_error import ApiError
from .bodies import check_key, read_body, validated
from .lifecycle import ServeContext, answer, ready_chat
from .responses_out import ResponsesWire
from .schemas import ChatRequest, RequestBody
from .wire import CallIds

STORE_MAX = 512  # responses kept for previous_response_id and GET, the oldest dropped first
# the chat request's fields by the names a Responses client sent them under (errors name these)
CHAT_NAMES = {"messages": "input", "max_completion_tokens": "max_output_tokens", "response_format": "text"}


class ResponsesRequest(RequestBody):
    model: str | None = None
    input: str | list[Any]
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    metadata: dict[str, Any] | None = None
    background: bool = False
    reasoning: dict[str, Any] | None = None
    truncation: str | None = None

    def unsupported(self) -> tuple[str, str] | None:
        if self.background:
            return "background", "background responses are not supported"
        if self.reasoning and (self.reasoning.get("effort") not in (None, "none")
                               or self.reasoning.get("summary") not in (None, "none")
                               or set(self.reasoning) - {"effort", "summary"}):
            return "reasoning", "reasoning is not supported by this model: leave it out, or effort \"none\""
        if self.truncation not in (None, "disabled"):
            return "truncation", "truncation must be disabled (a prompt past the context is a 400)"
        return None


class ResponseStore:
    """Responses by id: the conversation each ended (chat messages, instructions apart) and the object."""

    def __init__(self, limit: int = STORE_MAX):
        self.limit = limit
        self._items: OrderedDict[str, tuple[list[dict], dict]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, rid: str, conversation: list[dict], response: dict) -> None:
        with self._lock:
            self._items[rid] = (conversation, response)
            while len(self._items) > self.limit:
                self._items.popitem(last=False)

    def get(self, rid: str) -> tuple[list[dict], dict] | None:
        with self._lock:
            return self._items.get(rid)


def to_chat(body: ResponsesRequest, before: list[dict]) -> tuple[dict, list[dict]]:
    """(the chat body that asks the same, the conversation without instructions): ``before`` is the
    stored conversation of ``previous_response_id`` (or nothing)."""
    history = copy.deepcopy(before)  # the stored conversation stays as it was
    called = {c["id"] for m in history for c in m.get("tool_calls") or []}
    items = [{"type": "message", "role": "user", "content": body.input}] if isinstance(body.input, str) else body.input
    for i, item in enumerate(items):
        at = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            role = {"developer": "system"}.get(item.get("role"), item.get("role"))
            if role not in ("user", "system", "assistant"):
                raise ApiError(400, f"{at}: role must be user, system, developer or assistant", param="input")
            history.append({"role": role, "content": _text(item.get("content"), at)})
        elif kind == "function_call":
            if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
                raise ApiError(400, f"{at}: a function_call needs call_id, name and arguments strings", param="input")
            called.add(item["call_id"])
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = history[-1] if history else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                history.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            if item.get("call_id") not in called:
                raise ApiError(400, f"{at}: function_call_output for {json.dumps(item.get('call_id'))}, which no "
                               "function_call in the conversation has as its call_id", param="input")
            out = item.get("output")
            history.append({"role": "tool", "tool_call_id": item["call_id"],
                            "content": out if isinstance(out, str) else _text(out, at + ".output")})
        elif kind == "reasoning":
            continue  # this server writes none; a client echoing one back loses nothing
        else:
            raise ApiError(400, f"{at}: items of type {json.dumps(kind)} are not supported (message, "
                           "function_call, function_call_output)", param="input")
    messages = ([{"role": "system", "content": body.instructions}] if body.instructions else []) + history
    chat: dict = {"messages": messages, "temperature": body.temperature, "top_p": body.top_p, "stream": body.stream}
    if body.max_output_tokens:
        chat["max_completion_tokens"] = body.max_output_tokens
    if body.tools:
        chat["tools"] = [_tool(t, k) for k, t in enumerate(body.tools)]
    if body.tool_choice is not None:
        chat["tool_choice"] = _choice(body.tool_choice)
    if body.parallel_tool_calls is not None:
        chat["parallel_tool_calls"] = body.parallel_tool_calls
    fmt = (body.text or {}).get("format")
    if fmt is not None:
        chat["response_format"] = _format(fmt)
    return chat, history


def _text(content, at: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text", "text") \
                    or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else None
                raise ApiError(400, f"{at}.content[{j}]: only text parts are supported (not {json.dumps(kind)})",
                               param="input")
            texts.append(part["text"])
        return "\n".join(texts)
    raise ApiError(400, f"{at}: content must be a string or a list of text parts", param="input")


def _tool(t, k: int) -> dict:
    if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("name"), str):
        kind = t.get("type") if isinstance(t, dict) else None
        raise ApiError(400, f"tools[{k}]: only function tools with a name are supported (not {json.dumps(kind)})",
                       param="tools")
    fn = {k2: t[k2] for k2 in ("name", "description", "parameters", "strict") if t.get(k2) is not None}
    return {"type": "function", "function": fn}


def _choice(choice) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise ApiError(400, "tool_choice takes auto, none, required or {\"type\": \"function\", \"name\": ...}",
                   param="tool_choice")


def _format(fmt) -> dict:
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind == "json_schema" and isinstance(fmt.get("schema"), dict):
        return {"type": "json_schema", "json_schema": {k: fmt[k] for k in ("name", "schema", "strict") if k in fmt}}
    raise ApiError(400, "text.format takes type text, json_object, or json_schema with a schema", param="text")


def _echo(body: ResponsesRequest) -> dict:
    """The request's settings a response object repeats."""
    return {"instructions": body.instructions, "tools": body.tools or [], "tool_choice": body.tool_choice or "auto",
            "parallel_tool_calls": bool(body.parallel_tool_calls), "temperature": body.temperature,
            "top_p": body.top_p, "max_output_tokens": body.max_output_tokens,
            "previous_response_id": body.previous_response_id, "store": body.store,
            "text": body.text or {"format": {"type": "text"}}, "truncation": "disabled",
            "metadata": body.metadata or {}, "reasoning": None}


class ResponsesApi:
    """The Responses routes' handlers, over the server's context, and the responses they keep."""

    def __init__(self, ctx: ServeContext):
        self.ctx = ctx
        self.store = ResponseStore()

    async def retrieve(self, request: Request, arrived: float) -> Response:
        check_key(request, self.ctx.api_key)
        found = self.store.get(request.path_params["rid"])
        if found is None:
            raise ApiError(404, f"no stored response {request.path_params['rid']}", param="response_id")
        return JSONResponse(found[1])

    async def create(self, request: Request, arrived: float) -> Response:
        ctx = self.ctx
        body = await read_body(request, ResponsesRequest, ctx.api_key)
        chat, history = to_chat(body, self._before(body))
        ready = await ready_chat(ctx, validated(ChatRequest, chat, CHAT_NAMES), param="input", names=CHAT_NAMES)
        rid = f"resp_{secrets.token_hex(12)}"
        keep = partial(self._keep, rid, history) if body.store else None
        wire = ResponsesWire(rid, int(time.time()), ctx.model, CallIds(ctx.prompter.format.new_id), _echo(body), keep)
        return await answer(ctx, request, ready, wire, arrived)

    def _before(self, body: ResponsesRequest) -> list[dict]:
        """The conversation ``previous_response_id`` ended (none without one)."""
        if body.previous_response_id is None:
            return []
        found = self.store.get(body.previous_response_id)
        if found is None:
            raise ApiError(404, f"no stored response {body.previous_response_id} (responses are kept in "
                           "memory while the server runs, the oldest dropped)", param="previous_response_id")
        return found[0]

    def _keep(self, rid: str, history: list[dict], reply: dict, response: dict) -> None:
        """A finished response, and the conversation it ended (``history`` and its ``reply``)."""
        self.store.put(rid, history + [reply], response)

"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: Anthropic's Messages API, as Claude
Code and the ``anthropic`` SDK speak it, translated onto the chat request the rest of the
server runs.

A Messages body becomes a Chat Completions body (``to_chat``): ``system`` the first message,
``tool_use`` blocks an assistant's ``tool_calls``, ``tool_result`` blocks ``tool`` messages,
``tools`` with ``input_schema`` function tools, ``tool_choice`` auto / any / tool / none the
chat's auto / required / named / none, ``stop_sequences`` its stops. From there the request is
rendered, constrained and run exactly as a chat request (one tool parser, one grammar, one
stream assembly); only the reply is spelled Anthropic's way (``messages_out.py``). Errors are
Anthropic's error object. What the API has and this server cannot do is refused by name:
extended ``thinking``, image and document blocks, server tools (``bash_20250124``, web search).
Claude Code's attribution block in ``system`` is read as the metadata it is (``BILLING_LINE``).
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import replace
from typing import Any

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .api_error import ApiError
from .bodies import read_body, validated
from .calls import Call
from .messages_out import MessageSpelling, stream_events
from .schemas import ChatRequest, RequestBody


class MessagesRequest(RequestBody):
    model: str | None = None
    max_tokens: int = Field(ge=1)  # required, as Anthropic requires it
    system: str | list[Any] | None = None
    messages: list[Any]
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None
    stop_sequences: list[str] | None = None
    temperature: float = Field(default=1.0, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    stream: bool = False
    thinking: dict[str, Any] | None = None

    def unsupported(self) -> tuple[str, str] | None:
        if self.thinking and self.thinking.get("type") not in (None, "disabled"):
            return "thinking", "extended thinking is not supported by this server; leave thinking out"
        return None


# Claude Code 2.1 opens ``system`` with a text block "x-anthropic-billing-header: cc_version=...;
# cch=...;" that Anthropic's API reads as metadata (the model never sees it). Its hash changes with
# each session, so kept as prompt text it made every new session's prompt differ from the last
# at its 23rd token and read all 18,900 tokens again (18.5 minutes here, against 22 s for the
# next turn of the same session). The block is dropped, as Anthropic's API drops it.
BILLING_LINE = "x-anthropic-billing-header:"


class CountRequest(MessagesRequest):
    max_tokens: int | None = Field(default=None, ge=1)  # count_tokens takes none


def to_chat(body: MessagesRequest) -> dict:
    """The Chat Completions body that asks the same (a 400 ``ApiError`` naming what cannot be)."""
    messages: list[dict] = []
    system = _text(body.system, "system") if body.system else ""
    if isinstance(body.system, list):  # Claude Code's attribution line is metadata, not prompt
        system = "\n".join(b["text"] for b in body.system if not b["text"].startswith(BILLING_LINE))
    if system:
        messages.append({"role": "system", "content": system})
    called: set[str] = set()
    for i, m in enumerate(body.messages):
        at = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
            raise ApiError(400, f"{at}: each message needs a role, user, assistant or system", param="messages")
        role, content = m["role"], m.get("content")
        if role == "system":  # Claude Code sends reminders as system messages between the turns
            messages.append({"role": "system", "content": _text(content, at + ".content")})
            continue
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        if not isinstance(content, list) or not content:
            raise ApiError(400, f"{at}.content must be a string or a non-empty list of blocks", param="messages")
        texts, calls, results = [], [], []
        for j, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            here = f"{at}.content[{j}]"
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_use" and role == "assistant":
                if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) \
                        or not isinstance(block.get("input"), dict):
                    raise ApiError(400, f"{here}: a tool_use block needs id, name and an input object",
                                   param="messages")
                called.add(block["id"])
                calls.append({"id": block["id"], "type": "function",
                              "function": {"name": block["name"], "arguments": json.dumps(block["input"])}})
            elif kind == "tool_result" and role == "user":
                use = block.get("tool_use_id")
                if use not in called:
                    raise ApiError(400, f"{here}: tool_result for {json.dumps(use)}, which no earlier tool_use "
                                   "block has as its id", param="messages")
                out = block.get("content", "")
                text = out if isinstance(out, str) else _text(out, here + ".content")
                results.append({"role": "tool", "tool_call_id": use,
                                "content": f"(error) {text}" if block.get("is_error") else text})
            elif kind in ("thinking", "redacted_thinking") and role == "assistant":
                continue  # this server writes none; a client echoing one back loses nothing
            else:
                raise ApiError(400, f"{here}: a {json.dumps(kind)} block is not supported in a {role} message "
                               "(text, tool_use from the assistant, tool_result from the user)", param="messages")
        if role == "assistant":
            msg: dict = {"role": "assistant", "content": "\n".join(texts) if texts else None}
            if calls:
                msg["tool_calls"] = calls
            messages.append(msg)
        else:
            messages += results
            if texts:
                messages.append({"role": "user", "content": "\n".join(texts)})
    chat: dict = {"messages": messages, "max_tokens": body.max_tokens, "temperature": body.temperature,
                  "stream": body.stream}
    if body.stop_sequences:
        chat["stop"] = body.stop_sequences
    if body.top_p is not None:
        chat["top_p"] = body.top_p
    if body.top_k is not None:
        chat["top_k"] = body.top_k
    if body.tools:
        chat["tools"] = [_tool(t, k) for k, t in enumerate(body.tools)]
    if body.tool_choice is not None:
        chat["tool_choice"], parallel = _choice(body.tool_choice)
        if parallel is not None:
            chat["parallel_tool_calls"] = parallel
    return chat


def _text(value, at: str) -> str:
    """A string, or a list of text blocks joined by newlines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                       and isinstance(b.get("text"), str) for b in value):
        return "\n".join(b["text"] for b in value)
    raise ApiError(400, f"{at} must be a string or a list of text blocks", param=at.split("[")[0].split(".")[0])


def _tool(t, k: int) -> dict:
    if not isinstance(t, dict) or t.get("type") not in (None, "custom") or not isinstance(t.get("name"), str):
        kind = t.get("type") if isinstance(t, dict) else None
        raise ApiError(400, f"tools[{k}]: only client tools with a name and an input_schema are supported"
                       + (f" (not the server tool {json.dumps(kind)})" if kind else ""), param="tools")
    fn = {"name": t["name"], "parameters": t.get("input_schema") or {"type": "object"}}
    if t.get("description"):
        fn["description"] = t["description"]
    return {"type": "function", "function": fn}


def _choice(choice: dict) -> tuple[Any, bool | None]:
    """Anthropic's tool_choice as the chat's, and whether calls may come several at once."""
    kind = choice.get("type")
    parallel = False if choice.get("disable_parallel_tool_use") else None
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", parallel
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise ApiError(400, "tool_choice takes type auto, any, tool (with a name) or none", param="tool_choice")


class Door:
    """The Messages routes, over the server's own request machinery: ``prepared(fn, body)`` runs
    ``chat_turn(body)`` off the engine thread, its failures as 400s."""

    def __init__(self, worker, metrics, prompter, make_gen, model: str, api_key: str | None, prepared, chat_turn):
        self.worker, self.metrics, self.prompter = worker, metrics, prompter
        self.make_gen, self.model, self.api_key = make_gen, model, api_key
        self.prepared, self.chat_turn = prepared, chat_turn

    def routes(self) -> list[Route]:
        return [Route("/v1/messages", self.messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"])]

    async def _turn(self, request: Request, model_cls):
        body = await read_body(request, model_cls, self.api_key)
        chat = validated(ChatRequest, to_chat(body))
        return body, chat, await self.prepared(self.chat_turn, chat)

    async def count_tokens(self, request: Request) -> Response:
        try:
            _body, _chat, turn = await self._turn(request, CountRequest)
        except ApiError as exc:
            return exc.anthropic()
        return JSONResponse({"input_tokens": len(turn.tokens)})

    async def messages(self, request: Request) -> Response:
        from ..engine.verify.verifiers import resolve_seed

        arrived = time.perf_counter()
        try:
            body, chat, turn = await self._turn(request, MessagesRequest)
            gen = replace(self.make_gen(chat), grammar=turn.grammar, shown=turn.shown, logprobs=None)
            call = Call(self.worker, self.metrics, self.prompter, turn.tokens, gen, resolve_seed(None), arrived, turn)
            spell = MessageSpelling(f"msg_{secrets.token_hex(12)}", self.model, self.prompter.format.new_id,
                                    body.stop_sequences or [])
            if body.stream:
                return StreamingResponse(stream_events(call, spell, len(turn.tokens)),
                                         media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
            text, result = await call.whole(request)
            return JSONResponse(spell.message(turn.read(text), result))
        except ApiError as exc:
            return exc.anthropic()

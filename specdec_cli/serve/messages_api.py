"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: Anthropic's Messages API, as Claude
Code and the ``anthropic`` SDK speak it, translated onto the chat request the rest of the
server runs.

A Messages body becomes a Chat Completions body (``to_chat``): ``system`` the first message,
``tool_use`` blocks an assistant's ``tool_calls``, ``tool_result`` blocks ``tool`` messages,
``tools`` with ``input_schema`` function tools, ``tool_choice`` auto / any / tool / none the
chat's auto / required / named / none, ``stop_sequences`` its stops. From there the request is
rendered, constrained and run exactly as a chat request (``lifecycle.py``: one tool parser, one
grammar, one stream driver); only the reply is spelled Anthropic's way (``messages_out.py``),
and every error is Anthropic's error object, a field it names said in its message. What the API
has and this server cannot do is refused by name: extended ``thinking``, image and document
blocks, server tools (``bash_20250124``, web search). Claude Code's attribution block in
``system`` is read as the metadata it is (``BILLING_LINE``).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .api_error import ApiError
from .bodies import read_body, validated
from .generation import Ready
from .lifecycle import ServeContext, answer, ready_chat
from .messages_out import MessagesWire
from .schemas import ChatRequest, RequestBody
from .wire import CallIds

# the chat request's fields by the names a Messages client sent them under (errors name these)
CHAT_NAMES = {"stop": "stop_sequences", "parallel_tool_calls": "tool_choice"}


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
    max_tokens: int | None = Field(default=None, ge=1)  # type: ignore[assignment]  # count_tokens takes none


def to_chat(body: MessagesRequest) -> dict:
    """The Chat Completions body that asks the same (a 400 ``ApiError`` naming what cannot be)."""
    messages: list[dict] = []
    system = _text(body.system, "system") if body.system else ""
    if isinstance(body.system, list):  # Claude Code's attribution line is metadata, not prompt
        system = "\n".join(b["text"] for b in body.system if not b["text"].startswith(BILLING_LINE))
    if system:
        messages.append({"role": "system", "content": system})
    called: set[str] = set()  # the tool_use ids so far, which a tool_result must name
    for i, m in enumerate(body.messages):
        messages += _message(f"messages[{i}]", m, called)
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



def _message(at: str, m: Any, called: set[str]) -> list[dict]:
    """One Messages message as chat messages (a user's ``tool_result`` blocks each a ``tool`` message)."""
    if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
        raise ApiError(400, f"{at}: each message needs a role, user, assistant or system", param="messages")
    role, content = m["role"], m.get("content")
    if role == "system":  # Claude Code sends reminders as system messages between the turns
        return [{"role": "system", "content": _text(content, at + ".content")}]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list) or not content:
        raise ApiError(400, f"{at}.content must be a string or a non-empty list of blocks", param="messages")
    blocks = _Blocks()
    for j, block in enumerate(content):
        blocks.add(f"{at}.content[{j}]", role, block, called)
    if role == "assistant":
        msg: dict = {"role": "assistant", "content": "\n".join(blocks.texts) if blocks.texts else None}
        if blocks.calls:
            msg["tool_calls"] = blocks.calls
        return [msg]
    return blocks.results + ([{"role": "user", "content": "\n".join(blocks.texts)}] if blocks.texts else [])


@dataclass
class _Blocks:
    """One message's content blocks, sorted into what a chat request says apart."""

    texts: list[str] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)  # an assistant's tool_use blocks, as tool_calls
    results: list[dict] = field(default_factory=list)  # a user's tool_result blocks, as tool messages

    def add(self, here: str, role: str, block: Any, called: set[str]) -> None:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            self.texts.append(block["text"])
        elif kind == "tool_use" and role == "assistant":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) \
                    or not isinstance(block.get("input"), dict):
                raise ApiError(400, f"{here}: a tool_use block needs id, name and an input object", param="messages")
            called.add(block["id"])
            self.calls.append({"id": block["id"], "type": "function",
                               "function": {"name": block["name"], "arguments": json.dumps(block["input"])}})
        elif kind == "tool_result" and role == "user":
            use = block.get("tool_use_id")
            if use not in called:
                raise ApiError(400, f"{here}: tool_result for {json.dumps(use)}, which no earlier tool_use "
                               "block has as its id", param="messages")
            out = block.get("content", "")
            text = out if isinstance(out, str) else _text(out, here + ".content")
            self.results.append({"role": "tool", "tool_call_id": use,
                                 "content": f"(error) {text}" if block.get("is_error") else text})
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            pass  # this server writes none; a client echoing one back loses nothing
        else:
            raise ApiError(400, f"{here}: a {json.dumps(kind)} block is not supported in a {role} message "
                           "(text, tool_use from the assistant, tool_result from the user)", param="messages")


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


class MessagesApi:
    """The Messages routes' handlers, over the server's context."""

    def __init__(self, ctx: ServeContext):
        self.ctx = ctx

    async def _ready(self, request: Request, model_cls: type[MessagesRequest]) -> tuple[MessagesRequest, Ready]:
        body = await read_body(request, model_cls, self.ctx.api_key)
        chat = validated(ChatRequest, to_chat(body), CHAT_NAMES)
        return body, await ready_chat(self.ctx, chat, param="messages", names=CHAT_NAMES)

    async def create(self, request: Request, arrived: float) -> Response:
        body, ready = await self._ready(request, MessagesRequest)
        ctx = self.ctx
        wire = MessagesWire(f"msg_{secrets.token_hex(12)}", ctx.model, CallIds(ctx.prompter.format.new_id),
                            len(ready.tokens))
        return await answer(ctx, request, ready, wire, arrived)

    async def count_tokens(self, request: Request, arrived: float) -> Response:
        _body, ready = await self._ready(request, CountRequest)
        return JSONResponse({"input_tokens": len(ready.tokens)})

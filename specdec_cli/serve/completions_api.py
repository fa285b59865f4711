"""``POST /v1/chat/completions`` and ``POST /v1/completions``: OpenAI's own two, read into the
request the server runs.

A Chat Completions body is the common request itself (``ChatRequest``), which Messages and
Responses bodies are translated into; it is made ready as theirs are (``lifecycle.ready_chat``).
A completion has its own prompt path: its text is tokenized as given, with no chat template
and no tools, and its reply is plain text. Everything after that (submitting, answering whole
or streaming, the end) is ``lifecycle.py``'s; the answers are spelled by ``openai_out.py``.
"""

from __future__ import annotations

import secrets
import time
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response

from .api_error import ApiError
from .bodies import read_body
from .generation import Ready
from .lifecycle import ServeContext, answer, prepare, ready_chat
from .openai_out import ChatWire, CompletionWire, TokenSpelling
from .schemas import ChatRequest, CompletionRequest
from .wire import CallIds

W = TypeVar("W", ChatWire, CompletionWire)


class CompletionsApi:
    """The two routes' handlers, over the server's context."""

    def __init__(self, ctx: ServeContext):
        self.ctx = ctx

    async def chat(self, request: Request, arrived: float) -> Response:
        ctx = self.ctx
        body = await read_body(request, ChatRequest, ctx.api_key)
        ready = await ready_chat(ctx, body, param="messages")
        return await answer(ctx, request, ready, self._wire(ChatWire, "chatcmpl", body), arrived)

    async def completions(self, request: Request, arrived: float) -> Response:
        ctx = self.ctx
        body = await read_body(request, CompletionRequest, ctx.api_key)
        try:
            prompt = body.text()
        except ValueError as exc:
            raise ApiError(400, str(exc), param="prompt") from None
        if not prompt.strip():
            raise ApiError(400, "the prompt is empty", param="prompt")
        ready = await prepare(lambda: self._ready(body, prompt), param="prompt")
        return await answer(ctx, request, ready, self._wire(CompletionWire, "cmpl", body), arrived)

    def _wire(self, kind: type[W], prefix: str, body: ChatRequest | CompletionRequest) -> W:
        """A new answer's wire: its id, when it was made, the target's token pieces, the family's call ids."""
        prompter = self.ctx.prompter
        return kind(f"{prefix}-{secrets.token_hex(12)}", int(time.time()), self.ctx.model,
                    TokenSpelling(prompter.model.piece), CallIds(prompter.format.new_id), body.include_usage())

    def _ready(self, body: CompletionRequest, prompt: str) -> Ready:
        """The prompt's tokens as written, and its ``response_format`` compiled (on a helper thread)."""
        spec = body.response_constraint()
        tokens = self.ctx.worker.engine.tokenize_prompt(prompt)
        return Ready(body, tokens, self.ctx.prompter.constraint(spec) if spec is not None else None)

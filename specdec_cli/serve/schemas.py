"""The OpenAI request bodies ``specdec serve`` takes, as pydantic models.

Clients send more than these fields (``user``, ``metadata``, vendor extras): unknown fields are
ignored, as OpenAI-compatible servers do. A field the server knows but cannot honour
(``logit_bias``, ``n`` above 1, penalties, audio, ...) is refused with a 400 that names it
(``unsupported``), never dropped in silence: the client would get an answer to a question it
did not ask. What is checked here is what a request must hold to be run at all; each failure
becomes a 400 naming the parameter (``bodies.validated``). ``ChatRequest`` is also the common
request the Messages and Responses bodies are translated into, so these checks hold for them too.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..terminal.constraint_args import ConstraintSpec
from ..toolcalls.request import closed
from .api_error import ApiError


class RequestBody(BaseModel):
    """Any route's body: unknown fields ignored, known ones that cannot be honoured refused."""

    model_config = ConfigDict(extra="ignore")

    def unsupported(self) -> tuple[str, str] | None:
        """(parameter, why) for a known field set to something this server cannot do."""
        return None


class _Request(RequestBody):
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)  # not OpenAI's, llama-server's and vLLM's: 0 = off
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int = 1
    response_format: dict[str, Any] | None = None
    # known, and refused unless left at what changes nothing (``unsupported``)
    logit_bias: dict[str, Any] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        if isinstance(v, list) and (len(v) > 4 or not all(isinstance(s, str) and s for s in v)):
            raise ValueError("stop takes up to 4 non-empty strings")
        return v

    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def token_budget(self, default: int) -> int:
        """``max_completion_tokens``, else the older ``max_tokens``, else the server's default."""
        return self.max_completion_tokens or self.max_tokens or default

    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.get("include_usage"))

    def response_constraint(self) -> ConstraintSpec | None:
        """``response_format``: json_object and json_schema become a JSON Schema the output obeys."""
        fmt = self.response_format or {"type": "text"}
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

    def n_logprobs(self) -> int | None:
        """How many alternatives each kept token's log-probability comes with (None: none asked)."""
        return None

    def unsupported(self) -> tuple[str, str] | None:
        """(parameter, why) for a known field set to something this server cannot do."""
        if self.n != 1:
            return "n", "n must be 1: one completion per request"
        if self.logit_bias:
            return "logit_bias", "logit_bias is not supported (the verify pass keeps the target's own choices)"
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name):
                return name, f"{name} is not supported; leave it out or 0"
        return None


class ChatRequest(_Request):
    messages: list[Any]  # checked as --batch checks them (terminal.prompts.parse_messages)
    tools: Any = None  # checked by toolcalls.request.read_tools
    tool_choice: Any = None
    parallel_tool_calls: Any = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    # known, and refused unless empty (``unsupported``)
    functions: Any = None
    function_call: Any = None
    audio: Any = None
    modalities: list[str] | None = None
    prediction: Any = None
    web_search_options: Any = None

    def unsupported(self) -> tuple[str, str] | None:
        found = super().unsupported()
        if found:
            return found
        if self.functions is not None or self.function_call is not None:
            name = "functions" if self.functions is not None else "function_call"
            return name, f"{name} (the legacy form) is not supported; send tools and tool_choice"
        if self.top_logprobs is not None and not self.logprobs:
            return "top_logprobs", "top_logprobs needs logprobs: true"
        if self.modalities not in (None, ["text"]) or self.audio is not None:
            return "modalities", "only text output is supported"
        for name in ("prediction", "web_search_options"):
            if getattr(self, name) is not None:
                return name, f"{name} is not supported"
        return None

    def n_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(_Request):
    prompt: str | list[str]
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    def unsupported(self) -> tuple[str, str] | None:
        found = super().unsupported()
        if found:
            return found
        if self.echo:
            return "echo", "echo is not supported"
        if self.suffix:
            return "suffix", "suffix (insertion) is not supported"
        if self.best_of not in (None, 1):
            return "best_of", "best_of must be 1"
        return None

    def n_logprobs(self) -> int | None:
        return self.logprobs

    def text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise ValueError("prompt takes one string (a list of several prompts is not supported)")
        return self.prompt[0]


FinishReason = Literal["stop", "length", "tool_calls"]

"""The OpenAI request bodies ``specdec serve`` takes, as pydantic models.

Clients send more than these fields (``logprobs``, ``user``, ``tools``, vendor extras): unknown
fields are ignored, not rejected, as OpenAI-compatible servers do. What is checked here is
what a request must hold to be run at all; each failure becomes a 400 with an OpenAI error
object naming the parameter (``app.py``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")

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


class ChatRequest(_Request):
    messages: list[Any]  # checked as --batch checks them (terminal.prompts.parse_messages)


class CompletionRequest(_Request):
    prompt: str | list[str]

    def text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise ValueError("prompt takes one string (a list of several prompts is not supported)")
        return self.prompt[0]


FinishReason = Literal["stop", "length"]

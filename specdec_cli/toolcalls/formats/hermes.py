"""Hermes-style calls: Qwen2.5, Qwen3, QwQ, Hermes 2 Pro / 3 and the many fine-tunes that copied
them. Each call is a JSON object of name and arguments between ``<tool_call>`` tags (added
tokens in Qwen's vocabulary), one per line::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
"""

from __future__ import annotations

from ..syntax import ARGS, NAME, CallSyntax, Lit
from .base import ToolFormat

HERMES = CallSyntax(
    call=(Lit("<tool_call>"), Lit('\n{"name": "'), NAME, Lit('", "arguments": '), ARGS, Lit("}\n"),
          Lit("</tool_call>")),
    sep=(Lit("\n"),),
)


class Hermes(ToolFormat):
    name = "hermes"
    syntax = HERMES

    @staticmethod
    def matches(template: str) -> bool:
        # Qwen3-Coder writes <tool_call><function=...><parameter=...> (XML arguments): not this
        return "<tool_call>" in template and "<parameter=" not in template

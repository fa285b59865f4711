"""Command R7B (Cohere): an action block holding a JSON list of calls, each with a numbered id,
the tool's name and its ``parameters``::

    <|START_ACTION|>[
        {"tool_call_id": "0", "tool_name": "f", "parameters": {...}}
    ]<|END_ACTION|>
"""

from __future__ import annotations

from ..syntax import ARGS, ID, NAME, CallSyntax, Lit
from .base import ToolFormat

COMMAND_R = CallSyntax(
    open=(Lit("<|START_ACTION|>"), Lit("[\n    ")),
    call=(Lit('{"tool_call_id": "'), ID, Lit('", "tool_name": "'), NAME, Lit('", "parameters": '), ARGS, Lit("}")),
    sep=(Lit(",\n    "),),
    close=(Lit("\n]"), Lit("<|END_ACTION|>")),
    id_regex="[0-9]{1,3}",
)


class CommandR(ToolFormat):
    name = "command-r"
    syntax = COMMAND_R

    @staticmethod
    def matches(template: str) -> bool:
        return "<|START_ACTION|>" in template

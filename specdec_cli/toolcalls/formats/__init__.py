"""One module per family of tool-call syntax, and ``format_for``, which picks the family a chat
template writes (the first that matches, in the order below), else the generic fallback.

The order matters where templates share words: Functionary v3.1 is a Llama 3.1 template, and
Qwen3-Coder's ``<tool_call>`` wraps XML arguments, which no family here reads.
"""

from __future__ import annotations

from .base import ToolFormat
from .command_r import CommandR
from .deepseek import DeepSeek
from .functionary import Functionary
from .generic import Generic
from .hermes import Hermes
from .llama3 import Llama3
from .mistral import Mistral

FAMILIES: tuple[type[ToolFormat], ...] = (Functionary, Mistral, DeepSeek, CommandR, Hermes, Llama3)


def format_for(template: str | None) -> ToolFormat:
    """The tool-call family of a chat template's source (the generic fallback if none)."""
    template = template or ""
    for family in FAMILIES:
        if family.matches(template):
            return family(template)
    return Generic(template)


__all__ = ["FAMILIES", "Generic", "ToolFormat", "format_for"]

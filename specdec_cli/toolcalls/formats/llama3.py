"""Llama 3.1, 3.2 and 3.3: a reply that calls a tool is one JSON object naming the function and
its ``parameters``, from the reply's first character; one call per reply::

    {"name": "get_weather", "parameters": {"city": "Paris"}}

(Meta's built-in tools, ``<|python_tag|>brave_search.call(...)``, are not function tools and are
not offered.)
"""

from __future__ import annotations

from ..syntax import ARGS, NAME, CallSyntax, Lit
from .base import ToolFormat

LLAMA3 = CallSyntax(
    call=(Lit('{"name": "'), NAME, Lit('", "parameters": '), ARGS, Lit("}")),
    sep=None,
    text_before=False,
)


class Llama3(ToolFormat):
    name = "llama3"
    syntax = LLAMA3

    @staticmethod
    def matches(template: str) -> bool:
        return "<|start_header_id|>" in template and '"parameters": ' in template

"""Functionary v3.1 (MeetKai, on Llama 3.1): ``<function=NAME>{...}</function>``, one call per
reply, after any text.
"""

from __future__ import annotations

from ..syntax import ARGS, NAME, CallSyntax, Lit
from .base import ToolFormat

FUNCTIONARY = CallSyntax(call=(Lit("<function="), NAME, Lit(">"), ARGS, Lit("</function>")), sep=None)


class Functionary(ToolFormat):
    name = "functionary"
    syntax = FUNCTIONARY

    @staticmethod
    def matches(template: str) -> bool:
        return "<function=" in template and "</function>" in template and "<parameter=" not in template

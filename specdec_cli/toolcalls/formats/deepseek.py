"""DeepSeek's tool-call tokens, in its two shapes:

- R1 (and its Qwen and Llama distills): each call names its type and sits in a JSON fence,
  ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\\n```json\\n{...}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>``;
- V3.1: ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>``.

R1's template renders past calls but not the tools themselves; they are then described in the
system message (``ToolFormat.prepare``). V3.2 and V4 write calls in DSML, which is not read here.
"""

from __future__ import annotations

from ..syntax import ARGS, NAME, CallSyntax, Lit
from .base import ToolFormat

BEGIN, END = Lit("<｜tool▁calls▁begin｜>"), Lit("<｜tool▁calls▁end｜>")
CALL, SEP, CALL_END = Lit("<｜tool▁call▁begin｜>"), Lit("<｜tool▁sep｜>"), Lit("<｜tool▁call▁end｜>")

DEEPSEEK_R1 = CallSyntax(
    open=(BEGIN,),
    call=(CALL, Lit("function"), SEP, NAME, Lit("\n```json\n"), ARGS, Lit("\n```"), CALL_END),
    sep=(Lit("\n"),),
    close=(END,),
)
DEEPSEEK_V3 = CallSyntax(open=(BEGIN,), call=(CALL, NAME, SEP, ARGS, CALL_END), sep=(), close=(END,))


class DeepSeek(ToolFormat):
    name = "deepseek"

    def __init__(self, template: str = ""):
        super().__init__(template)
        self.syntax = DEEPSEEK_R1 if "```json" in template else DEEPSEEK_V3

    @staticmethod
    def matches(template: str) -> bool:
        return "tool▁calls▁begin" in template

"""The grammar that makes every started call well formed, built from a family's ``CallSyntax``.

Written in llguidance's Lark (``engine/structured/constraint.py`` compiles it, as it does ``--grammar-file``):
each callable tool is its own alternative, its name literal and its arguments an inline
``%json`` of the tool's schema, so a call can only name a given tool and only carry arguments
that validate. What the choice asks:

- ``required`` / a named tool: the reply is the calls, from its first token.
- ``auto``: free text until the family's trigger, then the calls, as llama.cpp's lazy
  grammars do (or, under a ``response_format`` schema, that JSON or the calls). A trigger written as text is read by a *lazy*
  rule, which ends the text the moment the trigger appears (llguidance's documented
  tool-calling pattern), so no call escapes the grammar; where the trigger is one special
  token of the vocabulary it is named by its id, and its spelled-out form leads to the same
  calls. A family whose calls open the reply (``text_before`` False) gets text that may not
  begin like a call instead.

After the calls nothing but the end of the reply may follow. The JSON is written as the
chat templates render arguments back (``json.dumps``' separators, no free whitespace), so a
call the model wrote is token for token what the next turn's prompt holds, and the prefix
cache and the suffix index see the same text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ..engine.structured.constraint import JSON_DEFAULTS
from .request import ToolRequest
from .syntax import CallSyntax, Lit

TEXT = "/(?s:.*)/"


def call_grammar(syntax: CallSyntax, req: ToolRequest, specials: Mapping[str, int] | None = None,
                 text_schema: dict | bool | None = None, lenient: frozenset[str] = frozenset()) -> str:
    """The Lark grammar for a reply to ``req`` (whose choice is not "none"). ``specials``: the
    literal texts of the syntax that are one special token of the vocabulary, and its id.
    ``text_schema``: under auto, the JSON Schema a reply without calls must follow.
    ``lenient``: tools whose schemas are compiled ignoring the keywords llguidance lacks."""
    specials = specials or {}
    tools = req.callable()
    lines = ["%llguidance {}"]

    def lit(part: Lit) -> str:
        tid = specials.get(part.text)
        return f"<[{tid}]>" if tid is not None else json.dumps(part.text)

    def seq(parts, i: int) -> str:
        out = []
        for p in parts:
            if isinstance(p, Lit):
                out.append(lit(p))
            elif p.kind == "name":
                out.append(json.dumps(tools[i].name))
            elif p.kind == "args":
                out.append(f"args_{i}")
            else:
                out.append(f"/{syntax.id_regex}/")
        return " ".join(out)

    call, lead = syntax.call, len(syntax.open) == 0
    for i, tool in enumerate(tools):
        schema = tool.argument_schema()
        schema = {**schema, "x-guidance": {**JSON_DEFAULTS, **schema.get("x-guidance", {}),
                                           **({"lenient": True} if tool.name in lenient else {})}}
        lines.append(f"args_{i}: %json {json.dumps(schema)}")
        lines.append(f"call_{i}: {seq(call, i)}")
        if lead:
            lines.append(f"tail_{i}: {seq(call[1:], i)}")  # the call after its trigger
    alts = " | ".join(f"call_{i}" for i in range(len(tools)))
    lines.append(f"call: {alts}")
    more = f"({seq(syntax.sep, 0)} call)*" if syntax.sep is not None and req.parallel else ""
    close = seq(syntax.close, 0)
    lines.append(f"calls: {seq(syntax.open, 0)} call {more} {close}")
    first = " | ".join(f"tail_{i}" for i in range(len(tools))) if lead else f"{seq(syntax.open[1:], 0)} call"
    lines.append(f"after_trigger: ({first}) {more} {close}")

    if req.must_call:
        lines.append("start: calls")
        return "\n".join(lines) + "\n"
    text = None
    if text_schema is not None:
        lines.append(f"text_json: %json {json.dumps({**_schema(text_schema), 'x-guidance': JSON_DEFAULTS})}")
        text = "text_json"
    trig = syntax.trigger
    if text is not None:  # JSON text: it cannot run into a trigger, so no text before the calls
        lines.append(f"start: {text} | calls")
    elif syntax.text_before:
        lines.append("start: TEXT | head after_trigger")
        tid = specials.get(trig)
        if tid is not None:  # the token, or the same text spelled out
            lines.append(f"head: TEXT <[{tid}]> | head_text")
            lines.append(f"head_text[lazy]: TEXT {json.dumps(trig)}")
        else:
            lines.append(f"head[lazy]: TEXT {json.dumps(trig)}")
        lines.append(f"TEXT: {TEXT}")
    else:
        lines.append("start: PLAIN | calls")
        lines.append(f"PLAIN: {TEXT} & ~/\\s*{_regex_literal(trig)}(?s:.*)/")
    return "\n".join(lines) + "\n"


def _schema(value) -> dict:
    if value is True:
        return {}
    return value if isinstance(value, dict) else {}


def _regex_literal(text: str) -> str:
    """``text`` as a regex matching itself, inside Lark's ``/.../``."""
    return re.escape(text).replace("/", "\\/")

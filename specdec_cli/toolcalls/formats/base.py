"""What every tool-call family shares: its syntax, how its template is spotted, and how the
conversation is handed to that template.

A family module subclasses ``ToolFormat`` with its ``CallSyntax`` and ``matches``; most need
nothing else. The history goes to the template in the shape Hugging Face templates read
(``tool_calls[].function.arguments`` as an object, ``tool`` messages with the name of the
call they answer); a template that never mentions ``tools`` (DeepSeek R1's, or any plain
chat template) gets the tools described in the system message, in this family's syntax.
"""

from __future__ import annotations

import json
import re
import secrets
import string

from ..request import ToolRequest
from ..syntax import CallSyntax, Lit

_ALNUM = string.ascii_letters + string.digits


class ToolFormat:
    name = "base"
    syntax: CallSyntax

    @staticmethod
    def matches(template: str) -> bool:
        """Whether ``template`` (a chat template's source) writes calls in this syntax."""
        return False

    def __init__(self, template: str = ""):
        self.template = template
        self.describes_tools = re.search(r"\btools\b", template) is not None  # it renders them itself

    # --- ids ------------------------------------------------------------------------------
    def new_id(self) -> str:
        """A call's id, as OpenAI spells them (some families' templates want another shape)."""
        return "call_" + "".join(secrets.choice(_ALNUM) for _ in range(24))

    # --- the prompt -----------------------------------------------------------------------
    def prepare(self, messages: list[dict], req: ToolRequest | None, *,
                system: bool = True) -> tuple[list[dict], list[dict] | None]:
        """The conversation and the tools as this family's template reads them. ``system``
        False: tools this family describes itself go before the first user message instead
        of in a system message (for templates that refuse the system role)."""
        tools = [t.as_openai() for t in req.tools] if req is not None and req.active else None
        out = self.history(messages)
        if tools and req is not None and not self.describes_tools:
            return _preamble(out, self.describe(req), system), None
        return out, tools

    def history(self, messages: list[dict]) -> list[dict]:
        names = {c["id"]: c["function"]["name"] for m in messages for c in (m.get("tool_calls") or [])}
        out = []
        for m in messages:
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [self.call_for_template(c) for c in m["tool_calls"]]
                if m.get("content") is None:
                    m["content"] = ""
            else:
                m.pop("tool_calls", None)  # templates test `'tool_calls' in message`
            if m["role"] == "tool" and "name" not in m and m.get("tool_call_id") in names:
                m["name"] = names[m["tool_call_id"]]
            out.append(m)
        return out

    def call_for_template(self, call: dict) -> dict:
        """One past call: its arguments decoded (templates ``tojson`` them back)."""
        fn = call["function"]
        return {"id": call["id"], "type": "function",
                "function": {"name": fn["name"], "arguments": _decoded(fn["arguments"])}}

    def describe(self, req: ToolRequest) -> str:
        """The tools and how to call them, for a template that has no words for them."""
        listed = "\n".join(json.dumps(t.as_openai(), ensure_ascii=False) for t in req.tools)
        example = self.write_calls([("function_name", '{"argument": "value"}', "012345678")])
        return ("# Tools\n\nYou may call one or more of these functions to answer:\n<tools>\n" + listed +
                "\n</tools>\n\nTo call a function, reply with exactly:\n" + example)

    def write_calls(self, calls: list[tuple[str, str, str]]) -> str:
        """Calls (name, arguments JSON text, id) as the model writes them."""
        s = self.syntax

        def one(name: str, args: str, cid: str) -> str:
            out = []
            for p in s.call:
                if isinstance(p, Lit):
                    out.append(p.text)
                else:
                    out.append({"name": name, "args": args, "id": cid}[p.kind])
            return "".join(out)

        sep = "".join(p.text for p in (s.sep or ()))
        return "".join(p.text for p in s.open) + sep.join(one(*c) for c in calls) + \
            "".join(p.text for p in s.close)


def _decoded(arguments):
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _preamble(messages: list[dict], text: str, system: bool) -> list[dict]:
    """``text`` added to the system message (made if there is none), or with ``system`` False,
    to the first user message."""
    role = "system" if system else "user"
    at = next((i for i, m in enumerate(messages) if m["role"] == role), None)
    if at is None or (system and at != 0):
        return [{"role": "system", "content": text}, *messages] if system else messages
    first = dict(messages[at])
    first["content"] = f"{text}\n\n{first['content']}" if not system else \
        (f"{first['content']}\n\n{text}" if first.get("content") else text)
    return [*messages[:at], first, *messages[at + 1:]]

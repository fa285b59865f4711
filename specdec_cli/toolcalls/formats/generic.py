"""The fallback for a chat template with no tool format of its own (plain ChatML, Llama 2, Gemma
2, SmolLM2 and most small models): the tools are described in the system message and calls are
asked for in the Hermes syntax, which many open models have seen in training; past calls and
tool results go back to the template as ordinary assistant and user text, since it knows no
``tool_calls`` or ``tool`` role, written exactly as a reply writes them so the next turn's
prompt repeats the reply token for token.
"""

from __future__ import annotations

import json

from ..request import ToolRequest
from .base import ToolFormat, _preamble
from .hermes import HERMES


class Generic(ToolFormat):
    name = "generic"
    syntax = HERMES

    def __init__(self, template: str = ""):
        super().__init__(template)
        self.describes_tools = False

    def prepare(self, messages: list[dict], req: ToolRequest | None, *,
                system: bool = True) -> tuple[list[dict], list[dict] | None]:
        out: list[dict] = []
        for m in messages:
            if m.get("tool_calls"):
                calls = self.write_calls([(c["function"]["name"], _text(c["function"]["arguments"]), "")
                                          for c in m["tool_calls"]])
                content = m.get("content") or ""
                out.append({"role": "assistant", "content": f"{content}\n{calls}" if content else calls})
            elif m["role"] == "tool":
                result = f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"
                if out and out[-1].get("_results"):
                    out[-1]["content"] += "\n" + result
                else:
                    out.append({"role": "user", "content": result, "_results": True})
            else:
                out.append({k: v for k, v in m.items() if k != "tool_calls"})
        for m in out:
            m.pop("_results", None)
        if req is not None and req.active:
            out = _preamble(out, self.describe(req), system)
        return out, None


def _text(arguments) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)

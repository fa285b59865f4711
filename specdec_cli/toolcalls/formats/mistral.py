"""Mistral's ``[TOOL_CALLS]`` marker (a control token), in the three shapes its templates use:

- Mistral 7B v0.3 / Nemo / Large 2: a JSON list after it,
  ``[TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "a1b2c3d4e"}]``;
- Devstral and Magistral (``[ARGS]``): ``[TOOL_CALLS]f[ARGS]{...}``, once per call;
- Mistral Small 3.2 (``[CALL_ID]``): ``[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{...}``.

Their templates refuse a call id that is not nine letters and digits, so this family's ids
are those.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from ..syntax import ARGS, ID, NAME, CallSyntax, Lit
from .base import _ALNUM, ToolFormat

MISTRAL_LIST = CallSyntax(
    open=(Lit("[TOOL_CALLS]"), Lit("[")),
    call=(Lit('{"name": "'), NAME, Lit('", "arguments": '), ARGS, Lit(', "id": "'), ID, Lit('"}')),
    sep=(Lit(", "),),
    close=(Lit("]"),),
)
MISTRAL_ARGS = CallSyntax(call=(Lit("[TOOL_CALLS]"), NAME, Lit("[ARGS]"), ARGS), sep=())
MISTRAL_CALL_ID = CallSyntax(call=(Lit("[TOOL_CALLS]"), NAME, Lit("[CALL_ID]"), ID, Lit("[ARGS]"), ARGS), sep=())


class Mistral(ToolFormat):
    name = "mistral"

    def __init__(self, template: str = ""):
        super().__init__(template)
        if "[CALL_ID]" in template:
            self.syntax = MISTRAL_CALL_ID
        elif "[ARGS]" in template:
            self.syntax = MISTRAL_ARGS
        else:
            self.syntax = MISTRAL_LIST

    @staticmethod
    def matches(template: str) -> bool:
        return "[TOOL_CALLS]" in template

    def new_id(self) -> str:
        return "".join(secrets.choice(_ALNUM) for _ in range(9))

    def history(self, messages: list[dict]) -> list[dict]:
        """Past calls with their ids made nine letters and digits (the same for a call and the
        result that answers it), where a client sent ids of another shape."""
        out = super().history(messages)
        for m in out:
            if m.get("tool_calls"):
                m["tool_calls"] = [{**c, "id": _nine(c["id"])} for c in m["tool_calls"]]
            if m["role"] == "tool" and isinstance(m.get("tool_call_id"), str):
                m["tool_call_id"] = _nine(m["tool_call_id"])
        return out


def _nine(call_id: str) -> str:
    if re.fullmatch("[A-Za-z0-9]{9}", call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in digest[:9])

"""The call small models write instead of their template's markup: a fenced JSON object.

Qwen2.5-Coder 1.5B, offered tools under ``auto``, answers "call get_weather" with::

    ```json
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    ```

and no ``<tool_call>`` tag, so a parser that reads only the template's markup (llama-server's)
returns it as text and the agent never calls the tool. ``fenced_call`` accepts that form, and
only when nothing else could be meant: the whole reply is that one object (fenced or bare),
its ``name`` is one of the request's tools, it has no keys but the name and its arguments
(``arguments`` or ``parameters``), and the arguments validate against that tool's schema
(``jsonschema``, the reference validator). A reply that merely holds JSON, as an answer to
"give me this as JSON" does, fails one of those; how often it does on such prompts is
measured in docs/structured-output-and-tools.md, "Tool calling".
"""

from __future__ import annotations

import json
import re

from .parse import ParsedCall
from .request import ToolRequest

_FENCE = re.compile(r"^```(?:json|JSON)?[ \t]*\n(?P<body>.*)\n```$", re.DOTALL)


def fenced_call(text: str, req: ToolRequest) -> ParsedCall | None:
    """The one call ``text`` (a whole reply) spells as a JSON object, or None."""
    import jsonschema

    body = text.strip()
    fence = _FENCE.match(body)
    if fence is not None:
        body = fence.group("body").strip()
    if not body.startswith("{"):
        return None
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    keys = set(obj) - {"name"}
    if len(keys) != 1 or not keys <= {"arguments", "parameters"}:
        return None
    args = obj[keys.pop()]
    tool = next((t for t in req.callable() if t.name == obj["name"]), None)
    if tool is None or not isinstance(args, dict):
        return None
    try:
        jsonschema.validate(args, tool.argument_schema())
    except (jsonschema.ValidationError, jsonschema.SchemaError):
        return None
    return ParsedCall(tool.name, json.dumps(args, ensure_ascii=False), complete=True)

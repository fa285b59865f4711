"""What a request offers the model: OpenAI's ``tools``, ``tool_choice`` and ``parallel_tool_calls``,
checked and read into plain data (``--batch`` lines and the server read them alike).

Each failure is a ``ToolsError`` naming the parameter, which the server answers with a 400 in
OpenAI's error object and ``--batch`` lists with the line's number. Only function tools
exist for a local model; any other type is refused rather than dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..errors import UsageError

# OpenAI's rule for function names; it also keeps a name safe inside every family's call syntax
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
CHOICES = ("none", "auto", "required")


class ToolsError(UsageError):
    """A ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` value that cannot be run."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Tool:
    """One function the model may call: its name, what it does, and its arguments' JSON Schema."""

    name: str
    description: str | None
    parameters: dict
    strict: bool = False

    def as_openai(self) -> dict:
        """The tool as OpenAI sends it, which is what chat templates read."""
        fn: dict = {"name": self.name}
        if self.description is not None:
            fn["description"] = self.description
        fn["parameters"] = self.parameters
        return {"type": "function", "function": fn}

    def argument_schema(self) -> dict:
        """The schema the arguments are held to: an object schema that says nothing of
        ``additionalProperties`` takes none, as llama.cpp's grammars and OpenAI's strict mode
        read it (a model left free to add keys can add them without end). So ``strict`` is
        always honoured: every call's arguments validate against this schema."""
        return closed(self.parameters)


@dataclass(frozen=True)
class ToolChoice:
    """``mode``: "none" (tools are not offered), "auto" (text or calls), "required" (at least one
    call) or "named" (a call of ``name``)."""

    mode: str
    name: str | None = None


@dataclass(frozen=True)
class ToolRequest:
    """``parallel``: whether a reply may call more than once. Off unless the request says
    ``parallel_tool_calls: true``, as llama-server has it: offered several, Qwen2.5-Coder 1.5B
    repeated the same call until the token budget ran out (under ``required``, 4 and a half
    calls in 100 tokens), while one call per reply still lets an agent make the next one on
    its next turn. A named tool is called once, as vLLM's named choice does."""

    tools: tuple[Tool, ...]
    choice: ToolChoice
    parallel: bool = False

    @property
    def active(self) -> bool:
        """Whether the model is offered tools at all (``tool_choice: none`` renders none)."""
        return bool(self.tools) and self.choice.mode != "none"

    @property
    def must_call(self) -> bool:
        return self.choice.mode in ("required", "named")

    def callable(self) -> tuple[Tool, ...]:
        """The tools a call may name: the named one, else all."""
        if self.choice.mode == "named":
            return tuple(t for t in self.tools if t.name == self.choice.name)
        return self.tools

    def by_name(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)


def read_tools(tools, tool_choice=None, parallel_tool_calls=None) -> ToolRequest | None:
    """The request's tools (None when it offers none and asks for none)."""
    if tools is None and tool_choice is None:
        return None
    read = _tools(tools)
    choice = _choice(tool_choice, read)
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise ToolsError("parallel_tool_calls must be true or false", "parallel_tool_calls")
    if not read:
        return None
    return ToolRequest(read, choice, parallel_tool_calls is True and choice.mode != "named")


def _tools(tools) -> tuple[Tool, ...]:
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise ToolsError("tools must be a list of {\"type\": \"function\", \"function\": {...}} objects", "tools")
    out: list[Tool] = []
    for i, t in enumerate(tools):
        at = f"tools[{i}]"
        if not isinstance(t, dict):
            raise ToolsError(f"{at} must be an object", "tools")
        kind = t.get("type", "function")
        if kind != "function":
            raise ToolsError(f"{at} has type {json.dumps(kind)}; only function tools run on a local model", "tools")
        fn = t.get("function")
        if not isinstance(fn, dict):
            raise ToolsError(f"{at} needs a 'function' object", "tools")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ToolsError(f"{at}.function.name must be 1-64 letters, digits, _ or -, not {json.dumps(name)}",
                             "tools")
        if any(o.name == name for o in out):
            raise ToolsError(f"{at}: a second tool named {json.dumps(name)}", "tools")
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise ToolsError(f"{at}.function.description must be a string", "tools")
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise ToolsError(f"{at}.function.parameters must be a JSON Schema object", "tools")
        if params.get("type", "object") != "object":
            raise ToolsError(f"{at}.function.parameters must describe an object (arguments are named)", "tools")
        strict = fn.get("strict", False)
        if strict is not None and not isinstance(strict, bool):
            raise ToolsError(f"{at}.function.strict must be true or false", "tools")
        out.append(Tool(name, desc, params, bool(strict)))
    return tuple(out)


def _choice(choice, tools: tuple[Tool, ...]) -> ToolChoice:
    if choice is None:
        return ToolChoice("auto")
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise ToolsError(f"tool_choice {json.dumps(choice)} is none of {', '.join(CHOICES)} "
                             "or {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")
        if choice == "required" and not tools:
            raise ToolsError("tool_choice \"required\" needs tools", "tool_choice")
        return ToolChoice(choice)
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise ToolsError("tool_choice needs function.name", "tool_choice")
        if not any(t.name == name for t in tools):
            raise ToolsError(f"tool_choice names {json.dumps(name)}, which is not among the tools", "tool_choice")
        return ToolChoice("named", name)
    shown = choice.get("type") if isinstance(choice, dict) else type(choice).__name__
    raise ToolsError(f"tool_choice of type {json.dumps(shown)} is not supported; use none, auto, required or "
                     "{\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")


_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")  # name -> schema
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")


def closed(schema):
    """``schema`` with every object schema that leaves ``additionalProperties`` unsaid closed,
    walked by keyword (a property may itself be named "properties")."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: closed(v) for k, v in out[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [closed(s) for s in out[key]]
    for key in _SCHEMA_ONE:
        if isinstance(out.get(key), dict):
            out[key] = closed(out[key])
    if (out.get("type") == "object" or "properties" in out) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out

"""Where prompts come from: an argument, ``-f FILE``, stdin, or a ``--batch`` JSONL file.

Every source goes through one decoding path (``decode_text``): strict UTF-8, a leading
byte-order mark dropped, and a foreseen error naming the source and the offset of the first
bad byte otherwise. Text that Python has already decoded (an argument, a text-mode stream)
is turned back into its bytes first, so undecodable bytes (lone surrogates) are caught the
same way instead of failing later in the tokenizer.
"""

from __future__ import annotations

import codecs
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

# Roles the chat templates llama.cpp applies know; anything else is a typo or a format
# (e.g. "human"/"gpt") the templates would render wrongly.
ROLES = ("system", "user", "assistant", "tool")

# How many bad lines of a --batch file one error lists before "and N more".
MAX_LISTED = 10

EXAMPLE_LINES = '{"prompt": "Summarise: ...", "id": 1} or {"messages": [{"role": "user", "content": "hi"}]}'
_BOM = codecs.BOM_UTF8


@dataclass
class PromptItem:
    """One prompt: plain text, or chat messages (rendered with the target's template)."""

    text: str | None = None
    messages: list[dict] | None = None
    id: object = None  # carried through to the output line in batch mode
    json_schema: str | None = None  # a --batch line's own JSON Schema (JSON text), its output obeys it
    tools: dict | None = None  # a --batch line's tools, tool_choice and parallel_tool_calls, as written

    def as_messages(self, system: str | None) -> list[dict]:
        if self.messages is not None:
            return self.messages
        msgs = [{"role": "system", "content": system}] if system else []
        return msgs + [{"role": "user", "content": self.text or ""}]


# --- decoding -------------------------------------------------------------------------------


_ICONV = "convert it to UTF-8 first, e.g. with iconv -f latin1 -t utf-8"


def decode_text(data: bytes | str, what: str, hint: str = _ICONV) -> str:
    """``data`` as text: strict UTF-8 with a leading BOM dropped, or a UsageError naming ``what``.

    ``what`` names the source in the message ("stdin", "-f notes.txt", "the prompt argument"),
    ``hint`` says how to fix it.
    A ``str`` is first turned back into the bytes it came from (undecodable bytes that Python
    kept as lone surrogates come back as themselves), so it meets the same check.
    """
    if isinstance(data, str):
        data = _str_bytes(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        where = f"first bad byte at offset {exc.start}" + (f", line {line}" if line > 1 else "")
        raise UsageError(f"{what} is not UTF-8 text ({where})", hint=hint) from None
    return text[1:] if text.startswith("\ufeff") else text


def _str_bytes(text: str) -> bytes:
    """The bytes a str stands for: surrogate escapes (undecodable argv/stdin bytes) come back
    as the original bytes; any other lone surrogate (e.g. a JSON ``\\ud800`` escape) is kept as
    its (invalid) UTF-8 form, so decoding it fails at its offset."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _show(path) -> str:
    """A path as printable text (an undecodable file name would not print)."""
    return _str_bytes(str(path)).decode("utf-8", "replace")


def _where(path, flag: str | None) -> str:
    return f"{flag} {_show(path)}" if flag else _show(path)


def _read_file(path: Path, flag: str | None = None) -> str:
    """The text of a file, with one foreseen error for each way reading it can go wrong."""
    where = _where(path, flag)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        cwd = "" if Path(path).is_absolute() else f" (relative paths are read from {_show(os.getcwd())})"
        raise UsageError(f"{where}: no such file", hint=f"check the path{cwd}") from None
    except IsADirectoryError:
        raise UsageError(f"{where}: is a directory, not a file", hint="pass the path of a file in it") from None
    except PermissionError:
        raise UsageError(
            f"{where}: permission denied",
            hint=f"check its permissions (ls -l {_show(path)}), or run as a user who may read it",
        ) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UsageError(f"{where}: cannot read it ({reason})", hint="check the path and the file") from None
    except ValueError as exc:  # e.g. an embedded NUL byte in the path
        raise UsageError(f"{where}: not a usable path ({exc})", hint="check the path") from None
    shown = _show(path)
    return decode_text(data, where, hint=f"convert it first, e.g. iconv -f latin1 -t utf-8 {shown} > {shown}.utf8")


def _read_stdin(stdin) -> str:
    """All of stdin, read as bytes when the stream has them (``sys.stdin.buffer``)."""
    try:
        buf = getattr(stdin, "buffer", None)
        data = buf.read() if buf is not None else stdin.read()
    except OSError as exc:
        raise UsageError(
            f"cannot read stdin ({exc.strerror or exc})",
            hint="pass the prompt as an argument or with -f FILE",
        ) from None
    return decode_text(
        data, "stdin", hint="convert it on the way in, e.g. ... | iconv -f latin1 -t utf-8 | specdec run ..."
    )


# --- the prompt of `specdec run` --------------------------------------------------------------


def read_prompt(prompt: str | None, file: Path | None, stdin=None) -> str:
    """The single prompt of ``specdec run``: exactly one of argument, -f, or piped stdin."""
    stdin = stdin or sys.stdin
    if prompt is not None and file is not None:
        raise UsageError("give the prompt as an argument or with -f, not both")
    if prompt is not None:
        text = decode_text(
            prompt, "the prompt argument",
            hint="use a UTF-8 terminal and locale, or convert the text (iconv -f latin1 -t utf-8) and pass it with -f FILE",
        )
        empty = ("the prompt is empty", 'pass some text (specdec run ... "prompt"), -f FILE, or pipe it on stdin')
    elif file is not None:
        text = _read_file(file, "-f")
        empty = (f"the prompt is empty: -f {_show(file)} holds no text",
                 "put the prompt in the file, or pass it as an argument")
    elif stdin is not None and not stdin.isatty():
        text = _read_stdin(stdin)
        empty = ("the prompt is empty: stdin held no text",
                 "pipe some text in, pass it as an argument, or use -f FILE")
    else:
        raise UsageError(
            "no prompt given",
            hint='pass it as an argument (specdec run ... "prompt"), with -f FILE, or pipe it on stdin',
        )
    if not text.strip():
        raise UsageError(empty[0], hint=empty[1])
    return text


# --- --batch files ----------------------------------------------------------------------------


class _Bad(Exception):
    """What is wrong with one line of a batch file."""


def read_batch(path: Path, flag: str | None = "--batch") -> list[PromptItem]:
    """JSONL objects with ``prompt`` or ``messages`` (and an optional ``id``), or plain text lines.

    A line starting with ``{`` must be a JSON object; one that parses as a JSON array is an
    error; in a file that holds JSON objects, a line that parses as another JSON value (a
    quoted string, a number) is an error too; any other non-blank line is a plain-text prompt.
    The whole file is checked, and every bad line is reported (the first ``MAX_LISTED``) in
    one error, before any model is loaded.
    """
    lines = _read_file(path, flag).splitlines()
    parsed: list[tuple[int, str, object]] = []  # (line number, raw line, JSON value or _TEXT)
    bad: list[tuple[int, str]] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue  # blank lines separate prompts
        parsed.append((n, line, _parse_line(line)))
    jsonl = any(isinstance(v, dict) for _, _, v in parsed)

    items: list[PromptItem] = []
    for n, line, value in parsed:
        try:
            if isinstance(value, _Bad):
                raise value
            if value is _TEXT:
                items.append(PromptItem(text=line))
            elif isinstance(value, dict):
                items.append(_item(value))
            elif isinstance(value, list):
                raise _Bad("a JSON array, not an object (wrap a message list as {\"messages\": [...]})")
            elif jsonl:
                raise _Bad(f"{_kind(value)} in JSON, not an object (write {{\"prompt\": ...}})")
            else:
                items.append(PromptItem(text=line))  # "42" or "quoted" in a plain-text file
        except _Bad as exc:
            bad.append((n, str(exc)))
    shown = _show(path)
    if bad:
        listed = "; ".join(f"{shown}:{n}: {why}" for n, why in bad[:MAX_LISTED])
        if len(bad) > MAX_LISTED:
            listed += f"; and {len(bad) - MAX_LISTED} more"
        message = listed if len(bad) == 1 else f"{_where(path, flag)} has {len(bad)} bad lines: {listed}"
        raise UsageError(message, hint=f"each line is plain text or a JSON object, e.g. {EXAMPLE_LINES}")
    if not items:
        raise UsageError(
            f"{_where(path, flag)} holds no prompts",
            hint=f"one prompt per line, or JSONL such as {EXAMPLE_LINES}",
        )
    return items


_TEXT = object()  # a plain-text line


def _parse_line(line: str):
    """The JSON value of a line, ``_TEXT`` for plain text, or a ``_Bad`` for broken JSON."""
    s = line.strip()
    if s.startswith("{"):
        try:
            return json.loads(s)
        except json.JSONDecodeError as exc:
            return _Bad(f"invalid JSON ({exc.msg} at column {exc.colno + len(line) - len(line.lstrip())})")
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        return _TEXT


def _kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _check_text(text: str, what: str) -> str:
    """``text`` if it is valid Unicode (no lone surrogates from a JSON ``\\ud800`` escape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Bad(f"{what} holds a lone surrogate (\\u{ord(text[exc.start]):04x}), not valid Unicode") from None
    return text


def _item(obj: dict) -> PromptItem:
    prompt, msgs = obj.get("prompt"), obj.get("messages")
    if prompt is not None and msgs is not None:
        raise _Bad("has both 'prompt' and 'messages'; keep one")
    schema = _schema(obj.get("json_schema"))
    tools = {k: obj[k] for k in ("tools", "tool_choice", "parallel_tool_calls") if k in obj} or None
    if msgs is not None:
        return PromptItem(messages=_messages(msgs), id=obj.get("id"), json_schema=schema, tools=tools)
    if isinstance(prompt, str):
        _check_text(prompt, "'prompt'")
        if not prompt.strip():
            raise _Bad("the prompt is empty")
        return PromptItem(text=prompt, id=obj.get("id"), json_schema=schema, tools=tools)
    if prompt is not None:
        raise _Bad(f"needs a 'prompt' string or a 'messages' list ('prompt' is {_kind(prompt)})")
    raise _Bad("needs a 'prompt' string or a 'messages' list")


def _messages(msgs) -> list[dict]:
    """The messages of a line, each with a string ``content`` (text parts joined), except an
    assistant message that calls tools, whose content may be null; tool calls and the ids
    tool results answer are checked here too."""
    if not isinstance(msgs, list):
        raise _Bad(f"'messages' must be a list of {{role, content}} objects, not {_kind(msgs)}")
    if not msgs:
        raise _Bad("'messages' is an empty list")
    out = []
    for i, m in enumerate(msgs):
        at = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _Bad(f"{at} is {_kind(m)}, not a {{role, content}} object")
        role = m.get("role")
        if role is None:
            raise _Bad(f"{at} has no 'role'")
        if role not in ROLES:
            shown = json.dumps(role, ensure_ascii=True)
            raise _Bad(f"{at} has role {shown}; use one of {', '.join(ROLES)}")
        calls = _tool_calls(m.get("tool_calls"), at) if role == "assistant" else None
        if role != "assistant" and m.get("tool_calls") is not None:
            raise _Bad(f"{at}: only assistant messages carry tool_calls")
        if role == "tool" and not isinstance(m.get("tool_call_id", ""), str):
            raise _Bad(f"{at} 'tool_call_id' must be a string naming the call it answers")
        if calls:
            content = None if m.get("content") is None else _content(m["content"], at)
            out.append({**m, "content": content, "tool_calls": calls})
            continue
        if "content" not in m:
            raise _Bad(f"{at} has no 'content'")
        out.append({**m, "content": _content(m["content"], at)})
    if not any((m["content"] or "").strip() or m.get("tool_calls") for m in out):
        raise _Bad("the prompt is empty (every message's content is empty)")
    return out


def _tool_calls(calls, at: str) -> list[dict] | None:
    """An assistant message's ``tool_calls`` in OpenAI's shape, arguments as JSON text."""
    if calls is None:
        return None
    if not isinstance(calls, list):
        raise _Bad(f"{at} 'tool_calls' must be a list, not {_kind(calls)}")
    out = []
    for j, c in enumerate(calls):
        here = f"{at}.tool_calls[{j}]"
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(c.get("id"), str):
            raise _Bad(f"{here} needs an 'id' string and a 'function' with a 'name'")
        args = fn.get("arguments", "{}")
        if isinstance(args, dict):
            args = json.dumps(args, ensure_ascii=False)
        if not isinstance(args, str):
            raise _Bad(f"{here}.function.arguments must be a JSON string")
        out.append({"id": c["id"], "type": "function",
                    "function": {"name": _check_text(fn["name"], f"{here} name"),
                                 "arguments": _check_text(args, f"{here} arguments")}})
    return out


def _schema(value) -> str | None:
    """A line's ``json_schema``: a JSON object (or true/false), kept as JSON text."""
    if value is None:
        return None
    if not isinstance(value, (dict, bool)):
        raise _Bad(f"'json_schema' must be a JSON Schema object, not {_kind(value)}")
    return json.dumps(value)


def parse_messages(msgs) -> list[dict]:
    """A ``messages`` list as ``--batch`` reads it (roles, text parts joined); a one-line
    ``UsageError`` says what is wrong with it (the server answers it with a 400)."""
    try:
        return _messages(msgs)
    except _Bad as exc:
        raise UsageError(str(exc)) from None


def _content(content, at: str) -> str:
    """A message's content as text: a string, or OpenAI-style text parts joined by newlines."""
    if isinstance(content, str):
        return _check_text(content, f"{at} content")
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            here = f"{at} content[{j}]"
            if isinstance(part, str):
                texts.append(part)
                continue
            if not isinstance(part, dict):
                raise _Bad(f"{here} is {_kind(part)}, not a text part {{\"type\": \"text\", \"text\": ...}}")
            kind = part.get("type", "text")
            if kind != "text":
                raise _Bad(f"{here} is a part of type {json.dumps(kind, ensure_ascii=True)}; only text parts are supported")
            if not isinstance(part.get("text"), str):
                raise _Bad(f"{here} needs a 'text' string")
            texts.append(part["text"])
        return _check_text("\n".join(texts), f"{at} content")
    raise _Bad(f"{at} 'content' must be a string, not {_kind(content)}")

"""Where prompts come from: an argument, ``-f FILE``, stdin, or a ``--batch`` JSONL file."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError


@dataclass
class PromptItem:
    """One prompt: plain text, or chat messages (rendered with the target's template)."""

    text: str | None = None
    messages: list[dict] | None = None
    id: object = None  # carried through to the output line in batch mode

    def as_messages(self, system: str | None) -> list[dict]:
        if self.messages is not None:
            return self.messages
        msgs = [{"role": "system", "content": system}] if system else []
        return msgs + [{"role": "user", "content": self.text or ""}]


def read_prompt(prompt: str | None, file: Path | None, stdin=None) -> str:
    """The single prompt of ``specdec run``: exactly one of argument, -f, or piped stdin."""
    stdin = stdin or sys.stdin
    if prompt is not None and file is not None:
        raise UsageError("give the prompt as an argument or with -f, not both")
    if prompt is not None:
        text = prompt
    elif file is not None:
        text = _read_file(file)
    elif stdin is not None and not stdin.isatty():
        text = stdin.read()
    else:
        text = None
    if text is not None:
        if not text.strip():
            raise UsageError("the prompt is empty", hint="pass some text, -f FILE, or pipe it on stdin")
        return text
    raise UsageError(
        "no prompt given",
        hint='pass it as an argument (specdec run ... "prompt"), with -f FILE, or pipe it on stdin',
    )


def read_batch(path: Path) -> list[PromptItem]:
    """JSONL objects with ``prompt`` or ``messages`` (and an optional ``id``), or plain text lines."""
    items: list[PromptItem] = []
    for n, line in enumerate(_read_file(path).splitlines(), start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{n}: invalid JSON ({exc.msg})", hint="one JSON object per line") from None
            items.append(_item(obj, path, n))
        else:
            items.append(PromptItem(text=line))
    if not items:
        raise UsageError(f"{path} holds no prompts", hint="one prompt per line, or JSONL with a 'prompt' field")
    return items


def _item(obj: dict, path: Path, n: int) -> PromptItem:
    if "messages" in obj:
        msgs = obj["messages"]
        ok = isinstance(msgs, list) and msgs and all(
            isinstance(m, dict) and "role" in m and "content" in m for m in msgs
        )
        if not ok:
            raise UsageError(
                f"{path}:{n}: 'messages' must be a list of {{role, content}} objects",
                hint='e.g. {"messages": [{"role": "user", "content": "hi"}]}',
            )
        return PromptItem(messages=msgs, id=obj.get("id"))
    if isinstance(obj.get("prompt"), str):
        return PromptItem(text=obj["prompt"], id=obj.get("id"))
    raise UsageError(f"{path}:{n}: needs a 'prompt' string or a 'messages' list")


def _read_file(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory, not a file") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None

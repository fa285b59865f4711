"""native_compare.py's prompts: raw text per prompt, the same for both sides.

The built-in raw completion prompts, or a --prompts-file (one prompt per line: a JSON object with
a "prompt" string, a JSON string, plain text, or "messages" rendered with the target's own chat
template the way specdec's --chat renders them); session mode's opening messages.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Raw completion prompts (no chat template): code, JSON/tables, prose.
DEFAULT_PROMPTS = [
    ("py-quicksort", 'def quicksort(items):\n    """Sort a list with quicksort and return a new list."""\n'),
    ("js-deepmerge", "// Deep-merge two plain objects; arrays are concatenated.\nfunction deepMerge(a, b) {\n"),
    ("c-linkedlist", "/* Reverse a singly linked list in place and return the new head. */\n"
                     "struct node *reverse(struct node *head) {\n"),
    ("sql-schema", "-- Schema for a small library: authors, books and loans.\nCREATE TABLE authors (\n"),
    ("json-capitals", "A JSON array of the ten largest European capitals, with country and population:\n"
                      '[\n  {"city": "London", "country": "United Kingdom", "population": 8982000},\n'),
    ("md-planets", "| Planet | Mean distance from the Sun (AU) | Known moons |\n|---|---|---|\n"
                   "| Mercury | 0.39 | 0 |\n"),
    ("prose-press", "The invention of the printing press in the fifteenth century changed Europe because"),
    ("prose-howto", "How to make a good cup of tea, step by step.\n\n1."),
]


def load_prompts(path: str | None, target: str | Path | None = None) -> list[tuple[str, str]]:
    """(name, raw text) per prompt. Lines with "messages" are rendered with the target's chat
    template (as specdec's --chat does); without a target they are an error."""
    if not path:
        return DEFAULT_PROMPTS
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        sys.exit(f"error: cannot read the prompts file {path}: {exc.strerror if isinstance(exc, OSError) else exc}")
    out = []
    chats: list[tuple[int, list[dict]]] = []  # (index in out, messages), rendered in one model load
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        text = line
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
            text = obj["prompt"]
            name = str(obj.get("id", f"p{i + 1}"))
        elif isinstance(obj, dict) and isinstance(obj.get("messages"), list):
            chats.append((len(out), obj["messages"]))
            text, name = "", str(obj.get("id", f"p{i + 1}"))
        elif isinstance(obj, str):
            text, name = obj, f"p{i + 1}"
        else:
            name = f"p{i + 1}"
        out.append((name, text))
    if not out:
        sys.exit(f"error: {path} holds no prompts. put one prompt per line.")
    if chats:
        if target is None:
            sys.exit(f"error: {path} holds chat messages; they need the target's chat template (pass --target).")
        texts = render_chats(target, [m for _, m in chats])
        for (k, _), text in zip(chats, texts):
            out[k] = (out[k][0], text)
    return out


def render_chats(model_path: str | Path, conversations: list[list[dict]]) -> list[str]:
    """Each conversation rendered with the model's own chat template and the assistant's opening,
    as specdec's --chat renders it (``specdec_cli.engine.chat.template``: the template's Jinja,
    else llama.cpp's built-in format), from a vocab-only load."""
    import ctypes

    import llama_cpp as ll
    from llama_cpp._logger import set_verbose

    from specdec_cli.engine.chat.template import render

    set_verbose(False)  # llama.cpp's load log, errors aside
    ll.llama_backend_init()
    params = ll.llama_model_default_params()
    params.vocab_only = True
    model = ll.llama_model_load_from_file(str(model_path).encode(), params)
    if not model:
        sys.exit(f"error: llama.cpp could not load {model_path}")
    try:
        tmpl = ll.llama_model_chat_template(model, None)
        if not tmpl:
            sys.exit(f"error: {Path(model_path).name} has no chat template; give raw \"prompt\" lines instead.")
        vocab = ll.llama_model_get_vocab(model)

        def special(token: int) -> str:
            return ll.llama_vocab_get_text(vocab, token).decode("utf-8", errors="replace") if token >= 0 else ""

        def builtin(msgs: list[dict]) -> str:
            keep = [(m["role"].encode(), m["content"].encode()) for m in msgs]
            arr = (ll.llama_chat_message * len(keep))()
            for i, (role, content) in enumerate(keep):
                arr[i].role, arr[i].content = role, content
            cap = sum(len(r) + len(c) for r, c in keep) * 2 + 256
            buf = ctypes.create_string_buffer(cap)
            n = ll.llama_chat_apply_template(tmpl, arr, len(keep), True, buf, cap)
            if n > cap:
                buf = ctypes.create_string_buffer(n)
                n = ll.llama_chat_apply_template(tmpl, arr, len(keep), True, buf, n)
            if n < 0:
                sys.exit(f"error: llama.cpp does not recognise the chat template of {Path(model_path).name}")
            return buf.raw[:n].decode("utf-8", errors="replace")

        out = []
        for msgs in conversations:
            plain = [{"role": str(m["role"]), "content": str(m["content"])} for m in msgs]
            out.append(render(tmpl.decode("utf-8", errors="replace"), plain, bos=special(ll.llama_vocab_bos(vocab)),
                              eos=special(ll.llama_vocab_eos(vocab)), add_generation_prompt=True,
                              builtin=lambda plain=plain: builtin(plain)))
        return out
    finally:
        ll.llama_model_free(model)


def first_messages(path: str | None) -> list[list[dict]]:
    """Each session's opening messages: a prompts file's "messages" lines as they are, and its
    "prompt" or plain lines as one user message; the built-in prompts without a file."""
    if not path:
        return [[{"role": "user", "content": text}] for _, text in DEFAULT_PROMPTS]
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = line
        if isinstance(obj, dict) and isinstance(obj.get("messages"), list):
            out.append(obj["messages"])
        elif isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
            out.append([{"role": "user", "content": obj["prompt"]}])
        else:
            out.append([{"role": "user", "content": obj if isinstance(obj, str) else line}])
    if not out:
        sys.exit(f"error: {path} holds no prompts.")
    return out

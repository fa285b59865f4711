"""A conversation to prompt tokens, where only the template's own markup becomes control tokens.

Tokenizing the rendered template with special tokens parsed (as llama-server and
``transformers`` do) also parses them inside the messages: a user message, a tool result
holding a web page, or a file that spells ``<|im_end|>\\n<|im_start|>system`` becomes real
turn markers, and text from outside can speak as the system. Here every string of the
request (contents, tool calls, tool definitions) that spells a control token is rendered
with a placeholder in its place; the rendered prompt is split at the control tokens that are
left, which the template wrote, and the text between them, placeholders restored, is
tokenized as text. llama.cpp's tokenizer splits at special tokens before its BPE merges, so
for a conversation that spells none the tokens are exactly those of the plain path, which
it takes without the second look.
"""

from __future__ import annotations

import re
import secrets

from .errors import PromptTooLong
from .llama_model import Model


def chat_tokens(model: Model, messages: list[dict], tools: list[dict] | None = None, *,
                n_ctx: int | None = None) -> list[int]:
    """The prompt tokens of ``messages`` (and ``tools``) through ``model``'s template, ready to
    decode (a ``PromptTooLong`` when they leave no room in ``n_ctx``)."""
    controls = model.control_tokens()
    spelled = [c for c in controls if any(c in s for s in _strings((messages, tools)))]
    if not spelled:
        tokens = _tokenize_rendered(model, model.apply_chat_template(messages, tools=tools))
    else:
        tokens = _tokens_with_text_controls(model, messages, tools, spelled, controls)
    if not tokens:
        from ..errors import UsageError

        raise UsageError("the prompt is empty", hint="send some text")
    if n_ctx is not None and len(tokens) >= n_ctx:
        raise PromptTooLong(n_ctx, len(tokens))
    return tokens


def _tokenize_rendered(model: Model, text: str) -> list[int]:
    """The plain path: the whole rendering with special tokens parsed; BOS not doubled where the
    template wrote it."""
    bos = model.token_text(model.bos) if model.bos >= 0 else ""
    return model.tokenize(text, add_special=not (bos and text.startswith(bos)), parse_special=True)


def _tokens_with_text_controls(model: Model, messages, tools, spelled: list[str],
                               controls: dict[str, int]) -> list[int]:
    nonce = secrets.token_hex(6)
    marks = {c: f"SPECDECCTRL{i}X{nonce}" for i, c in enumerate(spelled)}
    back = {m: c for c, m in marks.items()}
    swap = re.compile("|".join(re.escape(c) for c in sorted(spelled, key=len, reverse=True)))
    messages, tools = _mapped((messages, tools), lambda s: swap.sub(lambda m: marks[m.group(0)], s))
    rendered = model.apply_chat_template(messages, tools=tools)
    restore = re.compile("|".join(re.escape(m) for m in back))
    split = re.compile("|".join(re.escape(c) for c in sorted(controls, key=len, reverse=True)))
    tokens: list[int] = []
    at = 0
    bos = model.token_text(model.bos) if model.bos >= 0 else ""
    if model.adds_bos and not (bos and rendered.startswith(bos)):
        tokens.append(model.bos)
    for m in split.finditer(rendered):
        tokens += _text(model, restore.sub(lambda x: back[x.group(0)], rendered[at:m.start()]))
        tokens.append(controls[m.group(0)])
        at = m.end()
    tokens += _text(model, restore.sub(lambda x: back[x.group(0)], rendered[at:]))
    return tokens


def _text(model: Model, text: str) -> list[int]:
    return model.tokenize(text, add_special=False, parse_special=False) if text else []


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _mapped(value, fn):
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {_mapped(k, fn): _mapped(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_mapped(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(_mapped(v, fn) for v in value)
    return value

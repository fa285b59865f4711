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

``Rendered`` keeps the text and where its control tokens are, so the tokens of any tail of
it can be had (``tokens(start=...)``): the server puts a conversation's earlier turns, whose
text it wrote itself, back as the very tokens it generated, and tokenizes only the rest.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from ..errors import PromptTooLong
from ..llama.model import Model
from .template import apply_chat_template


@dataclass
class Rendered:
    """A conversation as the template writes it: the text, and the same text in pieces, each
    plain text or one control token the template wrote (its id)."""

    text: str
    pieces: list[tuple[str, int | None]]
    spelled: bool  # some of the request's strings spell control tokens (the pieces decide)

    def controls_before(self, end: int) -> tuple[int, ...]:
        """Where the control tokens the template wrote start, up to ``end``: the structure a text
        prefix must share before another rendering's tokens may stand for it."""
        out, at = [], 0
        for text, control in self.pieces:
            if at >= end:
                break
            if control is not None:
                out.append(at)
            at += len(text)
        return tuple(out)

    def tokens(self, model: Model, start: int = 0) -> list[int]:
        """The tokens of ``text[start:]`` (``start`` inside a text piece or at a boundary)."""
        if start == 0 and not self.spelled:  # the plain path: exactly llama-server's tokens
            bos = model.token_text(model.bos) if model.bos >= 0 else ""
            return model.tokenize(self.text, add_special=not (bos and self.text.startswith(bos)),
                                  parse_special=True)
        out: list[int] = []
        if start == 0 and model.adds_bos and not self.text.startswith(model.token_text(model.bos)):
            out.append(model.bos)
        at = 0
        for text, control in self.pieces:
            end = at + len(text)
            if end > start:
                if control is not None:
                    out.append(control)
                elif text:
                    out += model.tokenize(text[max(0, start - at):], add_special=False, parse_special=False)
            at = end
        return out


def render(model: Model, messages: list[dict], tools: list[dict] | None = None) -> Rendered:
    """``messages`` (and ``tools``) through ``model``'s template, control tokens told apart."""
    controls = model.control_tokens()
    spelled = [c for c in controls if any(c in s for s in _strings((messages, tools)))]
    split = re.compile("|".join(re.escape(c) for c in sorted(controls, key=len, reverse=True))) \
        if controls else None
    if not spelled:
        text = apply_chat_template(model, messages, tools=tools)
        return Rendered(text, _pieces(text, split, controls, lambda s: s), False)
    nonce = secrets.token_hex(6)
    marks = {c: f"SPECDECCTRL{i}X{nonce}" for i, c in enumerate(spelled)}
    back = {m: c for c, m in marks.items()}
    swap = re.compile("|".join(re.escape(c) for c in sorted(spelled, key=len, reverse=True)))
    messages, tools = _mapped((messages, tools), lambda s: swap.sub(lambda m: marks[m.group(0)], s))
    marked = apply_chat_template(model, messages, tools=tools)
    restore = re.compile("|".join(re.escape(m) for m in back))
    pieces = _pieces(marked, split, controls, lambda s: restore.sub(lambda x: back[x.group(0)], s))
    return Rendered("".join(t for t, _ in pieces), pieces, True)


def chat_tokens(model: Model, messages: list[dict], tools: list[dict] | None = None, *,
                n_ctx: int | None = None) -> list[int]:
    """The prompt tokens of ``messages`` (and ``tools``) through ``model``'s template, ready to
    decode (a ``PromptTooLong`` when they leave no room in ``n_ctx``)."""
    return checked(render(model, messages, tools).tokens(model), n_ctx)


def checked(tokens: list[int], n_ctx: int | None) -> list[int]:
    """``tokens``, or a one-line error where they are none or leave no room in ``n_ctx``."""
    if not tokens:
        from ...errors import UsageError

        raise UsageError("the prompt is empty", hint="send some text")
    if n_ctx is not None and len(tokens) >= n_ctx:
        raise PromptTooLong(n_ctx, len(tokens))
    return tokens


def _pieces(rendered: str, split, controls: dict[str, int], text_of) -> list[tuple[str, int | None]]:
    """``rendered`` cut at its control tokens; the text between them through ``text_of``."""
    out: list[tuple[str, int | None]] = []
    at = 0
    for m in (split.finditer(rendered) if split is not None else ()):
        if m.start() > at:
            out.append((text_of(rendered[at:m.start()]), None))
        out.append((m.group(0), controls[m.group(0)]))
        at = m.end()
    if at < len(rendered):
        out.append((text_of(rendered[at:]), None))
    return out


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

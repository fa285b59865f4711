"""Chat messages rendered with the model's own Jinja template, as llama-server and Hugging Face do.

Why not llama.cpp's C API alone: ``llama_chat_apply_template`` runs no Jinja. It recognises
the template among the formats it knows and writes that format, without what the template
itself adds (Qwen2.5's adds a default system prompt when the messages carry none) and refuses
templates it does not know. llama-server renders the Jinja template (its default), and so does
``transformers``' ``apply_chat_template``: the same messages then gave specdec a different
prompt, so a different answer, than the model's authors and llama-server give.

The template is rendered with llama-cpp-python's ``Jinja2ChatFormatter`` (jinja2's sandbox
with the extensions, ``tojson`` and ``raise_exception`` that Transformers' templates expect),
not with a renderer of our own. A template jinja2 cannot compile or run falls back on
llama.cpp's built-in formats, as before; a template that raises on purpose
(``raise_exception``: "roles must alternate ...") is the user's error, said in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

from ...errors import UsageError

if TYPE_CHECKING:
    from ..llama.model import Model


class TemplateNotRendered(Exception):
    """jinja2 could not compile or run the template (not the messages' fault)."""


class TemplateRefused(UsageError):
    """The template refused these messages on purpose (its ``raise_exception``)."""


@lru_cache(maxsize=8)
def _formatter(template: str, bos: str, eos: str, add_generation_prompt: bool):
    import jinja2
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    try:
        return Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos,
                                   add_generation_prompt=add_generation_prompt)
    except jinja2.TemplateError as e:
        raise TemplateNotRendered(str(e)) from None


def render_jinja(template: str, messages: list[dict], *, bos: str, eos: str,
                 add_generation_prompt: bool = True, tools: list[dict] | None = None) -> str:
    """``messages`` (role and content strings) through ``template``; TemplateNotRendered where
    jinja2 cannot, a UsageError where the template refuses the messages."""
    import jinja2

    fmt = _formatter(template, bos, eos, add_generation_prompt)
    try:
        return fmt(messages=messages, tools=tools).prompt
    except ValueError as e:  # the template's own raise_exception: it refuses these messages
        raise TemplateRefused(f"the model's chat template refuses these messages: {e}",
                         hint="check the roles and their order (most templates want user and "
                              "assistant turns to alternate, a system message first)") from None
    except (jinja2.TemplateError, TypeError, AttributeError, KeyError, IndexError) as e:
        raise TemplateNotRendered(str(e)) from None


def render(template: str, messages: list[dict], *, bos: str, eos: str, add_generation_prompt: bool,
           builtin: Callable[[], str], tools: list[dict] | None = None) -> str:
    """The Jinja rendering, else ``builtin()`` (llama.cpp's built-in format for the template,
    which knows no tools: a conversation with tools or tool calls must render in Jinja)."""
    try:
        return render_jinja(template, messages, bos=bos, eos=eos, add_generation_prompt=add_generation_prompt,
                            tools=tools)
    except TemplateNotRendered as exc:
        if tools or any(m.get("tool_calls") or m["role"] == "tool" for m in messages):
            raise UsageError(f"the model's chat template cannot be rendered with tools ({exc})",
                             hint="send the conversation without tools") from None
        return builtin()


def apply_chat_template(model: Model, messages: list[dict], *, add_generation_prompt: bool = True,
                        tools: list[dict] | None = None) -> str:
    """Render messages with ``model``'s own template: its Jinja, as llama-server does, else
    llama.cpp's built-in format for it (``Model.builtin_chat``). ``tools`` (OpenAI's shape) and
    the messages' tool calls reach the template as they are."""
    tmpl = model.chat_template()
    if tmpl is None:
        raise UsageError(
            f"{model.path.name} has no chat template",
            hint="drop --chat and pass the raw prompt",
        )
    full = [{**m, "content": "" if m.get("content") is None else str(m["content"])} for m in messages]
    plain = [{"role": m["role"], "content": m["content"]} for m in full]
    special = lambda t: model.token_text(t) if t >= 0 else ""  # noqa: E731
    return render(tmpl, full, bos=special(model.bos), eos=special(model.eos),
                  add_generation_prompt=add_generation_prompt, tools=tools,
                  builtin=lambda: model.builtin_chat(tmpl, plain, add_generation_prompt))

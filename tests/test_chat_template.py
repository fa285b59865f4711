"""Chat templates: the model's Jinja, llama.cpp's built-in format where jinja2 cannot render it."""

from __future__ import annotations

import pytest

from specdec_cli.engine.chat.template import render
from specdec_cli.errors import UsageError

DEFAULT_SYSTEM = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are helpful.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
USER = [{"role": "user", "content": "hi"}]


def _never() -> str:
    raise AssertionError("the built-in format was used")


def test_the_templates_own_additions_are_kept():
    got = render(DEFAULT_SYSTEM, USER, bos="", eos="", add_generation_prompt=True, builtin=_never)
    assert got == "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert not render(DEFAULT_SYSTEM, USER, bos="", eos="", add_generation_prompt=False,
                      builtin=_never).endswith("assistant\n")


def test_bos_eos_tojson_and_loop_controls_as_transformers_templates_use_them():
    tmpl = ("{{ bos_token }}{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
            "{{ m | tojson }}{% endfor %}{{ eos_token }}")
    got = render(tmpl, [{"role": "user", "content": "é"}, {"role": "user", "content": "x"}], bos="<s>",
                 eos="</s>", add_generation_prompt=True, builtin=_never)
    assert got == '<s>{"role": "user", "content": "é"}</s>'


@pytest.mark.parametrize("tmpl", ["<|im_start|>{% for m in messages %}", "{{ messages[0].content.nope() }}"])
def test_a_template_jinja2_cannot_render_falls_back_on_the_builtin_format(tmpl):
    assert render(tmpl, USER, bos="", eos="", add_generation_prompt=True, builtin=lambda: "built-in") == "built-in"


def test_a_template_that_refuses_the_messages_is_one_usage_error():
    tmpl = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('a system message must come first') }}{% endif %}"
    with pytest.raises(UsageError, match="refuses these messages: a system message must come first"):
        render(tmpl, USER, bos="", eos="", add_generation_prompt=True, builtin=_never)

"""Tool calls without a model: each family's syntax, its grammar, its parser (whole and streamed),
the fenced-JSON fallback, the request checks, and the real chat templates' rendering of past calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llguidance import LLMatcher

from specdec_cli.engine.chat.template import render_jinja
from specdec_cli.engine.structured.constraint import _byte_tokenizer
from specdec_cli.toolcalls.fenced import fenced_call
from specdec_cli.toolcalls.formats import FAMILIES, Generic, format_for
from specdec_cli.toolcalls.formats.deepseek import DEEPSEEK_R1, DEEPSEEK_V3
from specdec_cli.toolcalls.formats.mistral import MISTRAL_ARGS, MISTRAL_CALL_ID, MISTRAL_LIST, Mistral
from specdec_cli.toolcalls.grammar import call_grammar
from specdec_cli.toolcalls.parse import ArgsDelta, CallStart, Content, ToolParser, parse_reply
from specdec_cli.toolcalls.request import ToolsError, read_tools
from specdec_cli.toolcalls.stream import read

TEMPLATES = Path(__file__).parent / "chat_templates"
WRITE = {"type": "function", "function": {"name": "write_file", "description": "Write a file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["path", "content"], "additionalProperties": False}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"]}}}
ARGS = '{"path": "a.py", "content": "def f(x):\\n    return {\\"k\\": [x]}\\n"}'

EXPECTED = {
    "qwen2.5": "hermes", "qwen3": "hermes", "hermes-2-pro": "hermes", "llama3.1": "llama3", "llama3.2": "llama3",
    "mistral-nemo": "mistral", "devstral": "mistral", "mistral-small-3.2": "mistral",
    "functionary-v3.1": "functionary", "deepseek-r1-distill": "deepseek", "deepseek-v3.1": "deepseek",
    "command-r7b": "command-r", "qwen3-coder": "generic", "gemma-2": "generic",
}


def _formats():
    """One format per syntax variant, from the real templates."""
    return [format_for((TEMPLATES / f"{name}.jinja").read_text()) for name in EXPECTED]


def _calls_for(fmt, n: int):
    ids = [str(i) if fmt.name == "command-r" else "abcdefgh" + str(i) for i in range(n)]
    return [("write_file", ARGS, ids[0]), ("get_weather", '{"city": "Paris"}', ids[1] if n > 1 else "")][:n]


def _accepts(grammar: str, text: str) -> bool:
    """Whether ``grammar`` allows all of ``text`` and may end there (bytes as tokens)."""
    m = LLMatcher(_byte_tokenizer(), grammar, log_level=0)
    data = list(text.encode())
    if m.validate_tokens(data) != len(data):
        return False
    m.consume_tokens(data)
    return m.is_accepting()


@pytest.mark.parametrize("name,family", sorted(EXPECTED.items()))
def test_each_template_gets_its_family(name, family):
    assert format_for((TEMPLATES / f"{name}.jinja").read_text()).name == family


def test_the_syntax_variants_are_told_apart():
    read_ = lambda n: format_for((TEMPLATES / f"{n}.jinja").read_text()).syntax  # noqa: E731
    assert read_("mistral-nemo") is MISTRAL_LIST and read_("devstral") is MISTRAL_ARGS
    assert read_("mistral-small-3.2") is MISTRAL_CALL_ID
    assert read_("deepseek-r1-distill") is DEEPSEEK_R1 and read_("deepseek-v3.1") is DEEPSEEK_V3


@pytest.mark.parametrize("fmt", _formats(), ids=list(EXPECTED))
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_the_grammar_allows_what_the_family_writes_and_the_parser_reads_it_back(fmt, choice):
    tc = {"type": "function", "function": {"name": "write_file"}} if choice == "named" else choice
    req = read_tools([WRITE, WEATHER], tc, True)
    n = 2 if fmt.syntax.parallel and choice != "named" else 1
    calls = _calls_for(fmt, n)
    text = fmt.write_calls(calls)
    if choice == "auto" and fmt.syntax.text_before:
        text = "I will write it now.\n" + text
    grammar = call_grammar(fmt.syntax, req)
    assert _accepts(grammar, text), text
    reply = parse_reply(fmt.syntax, text)
    assert [(c.name, c.arguments) for c in reply.calls] == [(c[0], c[1]) for c in calls]
    assert all(json.loads(c.arguments) for c in reply.calls)
    assert reply.content == ("I will write it now." if choice == "auto" and fmt.syntax.text_before else None)


@pytest.mark.parametrize("fmt", _formats(), ids=list(EXPECTED))
def test_a_started_call_must_be_well_formed(fmt):
    req = read_tools([WRITE, WEATHER], "auto")
    grammar = call_grammar(fmt.syntax, req)
    good = fmt.write_calls(_calls_for(fmt, 1))
    assert not _accepts(grammar, good.replace("write_file", "rm_rf_all"))  # an unknown tool
    assert not _accepts(grammar, good.replace('"a.py"', "42"))  # arguments against the schema
    assert not _accepts(grammar, good.replace('"path"', '"paht"'))  # an argument not in it
    assert not _accepts(grammar, good + "and some text after")  # nothing after the calls
    assert _accepts(grammar, "Paris is sunny today.")  # no call: any text
    required = call_grammar(fmt.syntax, read_tools([WRITE, WEATHER], "required"))
    assert not _accepts(required, "Paris is sunny today.")


def test_one_call_unless_parallel_calls_are_asked_for():
    fmt = format_for((TEMPLATES / "qwen2.5.jinja").read_text())
    two = fmt.write_calls(_calls_for(fmt, 2))
    assert _accepts(call_grammar(fmt.syntax, read_tools([WRITE, WEATHER], "required", True)), two)
    assert not _accepts(call_grammar(fmt.syntax, read_tools([WRITE, WEATHER], "required")), two)
    assert not _accepts(call_grammar(fmt.syntax, read_tools([WRITE, WEATHER], "required", False)), two)
    named = read_tools([WRITE, WEATHER], {"type": "function", "function": {"name": "write_file"}}, True)
    assert not named.parallel  # a named tool is called once


def test_a_named_choice_admits_only_that_tool():
    fmt = format_for((TEMPLATES / "qwen2.5.jinja").read_text())
    grammar = call_grammar(fmt.syntax, read_tools([WRITE, WEATHER], {"type": "function",
                                                                    "function": {"name": "get_weather"}}))
    assert _accepts(grammar, fmt.write_calls([("get_weather", '{"city": "Oslo", "days": 2}', "")]))
    assert not _accepts(grammar, fmt.write_calls([("write_file", ARGS, "")]))


def test_text_under_auto_may_be_held_to_a_schema():
    fmt = format_for((TEMPLATES / "qwen2.5.jinja").read_text())
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    grammar = call_grammar(fmt.syntax, read_tools([WEATHER], "auto"), text_schema=schema)
    assert _accepts(grammar, '{"answer": 4}')
    assert not _accepts(grammar, "four")
    assert _accepts(grammar, fmt.write_calls([("get_weather", '{"city": "Oslo"}', "")]))


def test_llama3_replies_are_a_call_or_text_that_does_not_begin_like_one():
    fmt = format_for((TEMPLATES / "llama3.1.jinja").read_text())
    grammar = call_grammar(fmt.syntax, read_tools([WEATHER], "auto"))
    assert _accepts(grammar, 'Use {"name": "x"} as the key.')
    assert not _accepts(grammar, '{"name": "get_weather", "parameters": "Paris"}')
    assert _accepts(grammar, '{"name": "get_weather", "parameters": {"city": "Paris"}}')


@pytest.mark.parametrize("fmt", _formats(), ids=list(EXPECTED))
def test_streamed_pieces_assemble_to_the_whole_reply(fmt):
    text = "Writing both.\n" + fmt.write_calls(_calls_for(fmt, 2 if fmt.syntax.parallel else 1))
    if not fmt.syntax.text_before:
        text = text.split("\n", 1)[1]
    whole = parse_reply(fmt.syntax, text)
    for step in (1, 3, 7):
        parser = ToolParser(fmt.syntax)
        events = []
        for i in range(0, len(text), step):
            events += parser.feed(text[i:i + step])
        events += parser.finish()
        content = "".join(e.text for e in events if isinstance(e, Content))
        names = [e.name for e in events if isinstance(e, CallStart)]
        args = ["".join(e.text for e in events if isinstance(e, ArgsDelta) and e.index == i) for i in range(len(names))]
        assert (content or None) == whole.content
        assert list(zip(names, args)) == [(c.name, c.arguments) for c in whole.calls]
        # no half-written marker ever reached the content
        assert fmt.syntax.trigger not in content and "<tool" not in content


def test_a_call_cut_short_keeps_what_was_written_and_a_half_marker_is_held_back():
    fmt = format_for((TEMPLATES / "qwen2.5.jinja").read_text())
    cut = parse_reply(fmt.syntax, 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"ci')
    assert cut.content == "Sure." and [(c.name, c.arguments, c.complete) for c in cut.calls] == \
        [("get_weather", '{"ci', False)]
    off = parse_reply(fmt.syntax, 'Sure.\n<tool_call>\n["get_weather"]')  # off the syntax: all text
    assert off.calls == [] and off.malformed and off.content.startswith("Sure.\n<tool_call>")
    parser = ToolParser(fmt.syntax)
    assert [e.text for e in parser.feed("Look: <tool")] == ["Look:"]
    assert [e.text for e in parser.feed("box> is a tag")] == [" <toolbox> is a tag"]


def test_fenced_json_is_a_call_only_when_it_can_be_nothing_else():
    req = read_tools([WEATHER, WRITE], "auto")
    call = fenced_call('```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```', req)
    assert call is not None and call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert fenced_call('{"name": "get_weather", "parameters": {"city": "Oslo"}}', req) is not None
    for text in ['Here it is:\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',  # text too
                 '```json\n{"name": "Paris", "arguments": {"city": "Paris"}}\n```',  # not a tool's name
                 '```json\n{"name": "get_weather", "arguments": {"town": "Paris"}}\n```',  # against the schema
                 '```json\n{"name": "get_weather", "arguments": {"city": "P"}, "note": 1}\n```',  # other keys
                 '```json\n{"name": "Ada", "age": 36}\n```', '{"city": "Paris"}']:
        assert fenced_call(text, req) is None, text
    whole = read(format_for((TEMPLATES / "qwen2.5.jinja").read_text()).syntax, req,
                 '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```')
    assert whole.content is None and [c.name for c in whole.calls] == ["get_weather"]


def test_request_checks_name_what_is_wrong():
    assert read_tools(None) is None
    assert read_tools([WEATHER], "none").active is False
    for tools, choice, param, words in [
        ("x", None, "tools", "list"),
        ([{"type": "code_interpreter"}], None, "tools", "only function tools"),
        ([{"type": "function", "function": {"name": "bad name"}}], None, "tools", "letters"),
        ([WEATHER, WEATHER], None, "tools", "second tool"),
        ([WEATHER], "sometimes", "tool_choice", "none of"),
        ([WEATHER], {"type": "function", "function": {"name": "nope"}}, "tool_choice", "not among"),
        (None, "required", "tool_choice", "needs tools"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}], None, "tools", "object"),
    ]:
        with pytest.raises(ToolsError) as err:
            read_tools(tools, choice)
        assert err.value.param == param and words in str(err.value)


def test_arguments_take_no_keys_their_schema_does_not_name():
    tool = read_tools([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"properties": {"type": "object", "properties": {"a": {"type": "string"}}}}}}}])
    schema = tool.tools[0].argument_schema()
    assert schema["additionalProperties"] is False
    assert schema["properties"]["properties"]["additionalProperties"] is False
    assert "additionalProperties" not in schema["properties"]  # a property named "properties" is no schema keyword


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - {"deepseek-r1-distill", "mistral-nemo", "gemma-2"}))
def test_a_reply_is_what_the_template_renders_for_it_next_turn(name):
    """A call as the grammar has the model write it is, character for character, the template's
    rendering of that call in the next turn's prompt, so the prefix cache and the suffix index
    carry over. (R1's template drops the reasoning its prompt opened, Nemo's moves the system
    text into the last user turn, and Gemma 2's refuses a system message: each changes the
    earlier turns, whatever the reply.)"""
    src = (TEMPLATES / f"{name}.jinja").read_text()
    fmt = format_for(src)
    req = read_tools([WRITE], "auto")
    cid = fmt.new_id()
    user = [{"role": "system", "content": "You write code."}, {"role": "user", "content": "Write a.py"}]
    later = user + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": "write_file", "arguments": ARGS}}]},
        {"role": "tool", "tool_call_id": cid, "content": "ok"}]

    def render(messages):
        convo, tools = fmt.prepare(messages, req)
        return render_jinja(src, [{**m, "content": m.get("content") or ""} for m in convo], bos="<s>", eos="</s>",
                            tools=tools)

    reply = fmt.write_calls([("write_file", ARGS, cid if isinstance(fmt, Mistral) else "0")])
    assert render(later).startswith(render(user) + reply)


def test_every_family_is_listed_once():
    assert len({f.name for f in FAMILIES} | {Generic.name}) == len(FAMILIES) + 1


def test_every_format_module_is_registered():
    """A family written in ``formats/`` but left out of ``FAMILIES`` would never be picked: each
    module's format is in ``FAMILIES``, or is the generic fallback ``format_for`` ends with."""
    import importlib
    import inspect
    import pkgutil

    import specdec_cli.toolcalls.formats as formats
    from specdec_cli.toolcalls.formats.base import ToolFormat

    registered = set(FAMILIES) | {Generic}
    modules = [m.name for m in pkgutil.iter_modules(formats.__path__) if m.name != "base"]
    assert len(modules) == len(registered), modules
    for name in modules:
        module = importlib.import_module(f"{formats.__name__}.{name}")
        defined = [c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, ToolFormat)
                   and c.__module__ == module.__name__]
        assert defined, f"formats/{name}.py defines no ToolFormat"
        assert set(defined) <= registered, f"formats/{name}.py: {defined} not in FAMILIES"
    assert Generic not in FAMILIES and type(format_for("")) is Generic

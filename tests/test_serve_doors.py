"""The agents' other doors: OpenAI's Responses API and Anthropic's Messages API on ``specdec
serve``, driven by the official ``openai``, ``openai-agents`` and ``anthropic`` clients on the
tiny f32 target with Qwen2.5's chat template (the server of ``test_serve_tools``). One engine
underneath: a greedy request sent through the three doors gets the same text and the same call;
each door's faults are 4xx in its own API's error format, before the model is touched."""

from __future__ import annotations

import json

import httpx
import pytest

from test_agent_clients import weather_agent
from test_serve_tools import SCHEMAS, WEATHER, server  # noqa: F401  (the tiny target with Qwen2.5's template)

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
jsonschema = pytest.importorskip("jsonschema")

FLAT = {"type": "function", **WEATHER["function"]}  # the Responses API's function tool
CLAUDE = {"name": "get_weather", "description": WEATHER["function"]["description"],
          "input_schema": WEATHER["function"]["parameters"]}
ASK = "what is the weather in paris"
# the Messages API of 2026 has no sampling parameters (the SDK takes none); this server still reads
# temperature, top_p and top_k where a client sends them, as older clients do
GREEDY = {"temperature": 0}


def _claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)


def test_three_doors_give_the_same_text_and_the_same_call(server):
    oa, cl = server.client(), _claude(server)
    msgs = [{"role": "user", "content": "hello world this is the cat"}]
    chat = oa.chat.completions.create(model="x", messages=msgs, max_tokens=24, temperature=0)
    resp = oa.responses.create(model="x", input=msgs[0]["content"], max_output_tokens=24, temperature=0)
    mess = cl.messages.create(model="x", messages=msgs, max_tokens=24, extra_body=GREEDY)
    text = chat.choices[0].message.content
    assert text and resp.output_text == text and mess.content[0].text == text
    assert chat.choices[0].finish_reason == "length" and resp.status == "incomplete" \
        and mess.stop_reason == "max_tokens"
    assert resp.usage.output_tokens == mess.usage.output_tokens == chat.usage.completion_tokens == 24
    # every whole answer passes through one function (lifecycle.final_answer): the engine's figures on each
    figures = [a.model_extra["specdec"] for a in (chat, resp, mess)]
    assert [f["stop_reason"] for f in figures] == ["length"] * 3 and all(f["ttft"] > 0 for f in figures)

    ask = [{"role": "user", "content": ASK}]
    call = oa.chat.completions.create(model="x", messages=ask, tools=[WEATHER], tool_choice="required",
                                      temperature=0).choices[0].message.tool_calls[0].function
    rcall = oa.responses.create(model="x", input=ASK, tools=[FLAT], tool_choice="required", temperature=0).output
    mcall = cl.messages.create(model="x", messages=ask, tools=[CLAUDE], tool_choice={"type": "any"},
                               max_tokens=160, extra_body=GREEDY)
    assert [(o.type, o.name, o.arguments) for o in rcall] == [("function_call", call.name, call.arguments)]
    use = [b for b in mcall.content if b.type == "tool_use"]
    assert mcall.stop_reason == "tool_use" and [(b.name, b.input) for b in use] == \
        [(call.name, json.loads(call.arguments))]
    jsonschema.validate(use[0].input, SCHEMAS["get_weather"])


def test_responses_plain_streamed_tool_round_trip_previous_id_and_json_schema(server):
    oa = server.client()
    kw = dict(model="x", input="hello world", max_output_tokens=20, temperature=0)
    whole = oa.responses.create(**kw)
    events = list(oa.responses.create(**kw, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.incomplete"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == whole.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.output_text == whole.output_text
    assert oa.responses.retrieve(whole.id).output_text == whole.output_text

    first = oa.responses.create(model="x", input=ASK, tools=[FLAT], tool_choice="required", temperature=0)
    (fc,) = first.output
    assert fc.type == "function_call" and fc.call_id
    jsonschema.validate(json.loads(fc.arguments), SCHEMAS["get_weather"])
    result = {"type": "function_call_output", "call_id": fc.call_id, "output": "sunny, 21 C"}
    by_id = oa.responses.create(model="x", previous_response_id=first.id, input=[result], tools=[FLAT],
                                max_output_tokens=16, temperature=0)
    resent = oa.responses.create(model="x", input=[{"role": "user", "content": ASK}, fc.model_dump(), result],
                                 tools=[FLAT], max_output_tokens=16, temperature=0)
    assert by_id.output_text == resent.output_text and by_id.output_text
    assert by_id.usage.input_tokens_details.cached_tokens > 0  # the conversation was in the cache

    streamed_call = [e for e in oa.responses.create(model="x", input=ASK, tools=[FLAT], tool_choice="required",
                                                     temperature=0, stream=True)]
    args = "".join(e.delta for e in streamed_call if e.type == "response.function_call_arguments.delta")
    assert args == fc.arguments and streamed_call[-1].type == "response.completed"

    schema = {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}}, "required": ["kind"],
              "additionalProperties": False}
    pet = oa.responses.create(model="x", input="a pet", temperature=0, max_output_tokens=40,
                              text={"format": {"type": "json_schema", "name": "pet", "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(pet.output_text), schema)


def test_openai_agents_default_responses_model_with_a_function_tool(server):
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    # the agent stops at its tool's output: the Responses model takes an answer cut by its budget (status
    # incomplete) as a failure, and a tiny random model answers until the budget; the call that follows a
    # function_call_output is checked with the SDK above
    agent, called = weather_agent(agents, agents.OpenAIResponsesModel(model="x", openai_client=client),
                                  tool_use_behavior="stop_on_first_tool")
    result = agents.Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4)
    assert called, "the agent never called its tool"
    assert result.final_output == "sunny, 21 C"
    kinds = [type(item).__name__ for item in result.new_items]
    assert "ToolCallItem" in kinds and "ToolCallOutputItem" in kinds


def test_anthropic_messages_stream_tool_round_trip_and_count_tokens(server):
    cl = _claude(server)
    ask = [{"role": "user", "content": ASK}]
    kw = dict(model="x", messages=ask, tools=[CLAUDE], tool_choice={"type": "any"}, max_tokens=160, extra_body=GREEDY)
    first = cl.messages.create(**kw)
    with cl.messages.stream(**kw) as stream:
        streamed = stream.get_final_message()
    same = lambda blocks: [b.model_dump(exclude={"id"}) for b in blocks]  # noqa: E731  (ids are new each time)
    assert same(streamed.content) == same(first.content)
    assert streamed.stop_reason == first.stop_reason == "tool_use"
    use = first.content[-1]
    follow = ask + [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]
    after = cl.messages.create(model="x", messages=follow, tools=[CLAUDE], max_tokens=16, extra_body=GREEDY)
    assert after.stop_reason in ("end_turn", "max_tokens", "tool_use") and after.content
    assert after.usage.cache_read_input_tokens > 0
    counted = cl.messages.count_tokens(model="x", messages=follow, tools=[CLAUDE])
    assert counted.input_tokens == after.usage.input_tokens + after.usage.cache_read_input_tokens
    # Claude Code's attribution block (a new hash each session) is metadata: the prompt is the same without it
    plain = cl.messages.count_tokens(model="x", messages=ask, system="Be brief.")
    for cch in ("0a1b2", "9f8e7"):
        billed = [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.197.665; cch={cch};"},
                  {"type": "text", "text": "Be brief."}]
        assert cl.messages.count_tokens(model="x", messages=ask, system=billed).input_tokens == plain.input_tokens
    # a stop sequence taken from what the model writes without one: the reply must end before it
    hello = dict(model="x", messages=[{"role": "user", "content": "hello world this is the cat"}], max_tokens=40,
                 extra_body=GREEDY)
    written = cl.messages.create(**hello).content[0].text
    assert len(written) >= 8, written
    stop = written[4:8]
    stopped = cl.messages.create(**hello, stop_sequences=[stop])
    with cl.messages.stream(**hello, stop_sequences=[stop]) as stream:
        streamed_stop = stream.get_final_message()
    for reply in (stopped, streamed_stop):
        assert reply.stop_reason == "stop_sequence" and reply.stop_sequence == stop, reply
        assert "".join(b.text for b in reply.content if b.type == "text") == written[: written.find(stop)]


def test_each_door_refuses_bad_requests_in_its_own_format(server):
    url = server.url
    for body, param in [({"input": [{"type": "image_generation_call"}]}, "input"),
                        ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}, "input"),
                        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools"),
                        ({"input": "hi", "background": True}, "background"),
                        ({"input": "hi", "reasoning": {"effort": "high"}}, "reasoning"),
                        # fields of the chat request a Responses body becomes, named as the client sent them
                        ({"input": []}, "input"),
                        ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x",
                                                             "schema": {"type": "object", "minProperties": "x"}}}},
                         "text")]:
        r = httpx.post(f"{url}/v1/responses", json={"model": "x", **body})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    none = httpx.post(f"{url}/v1/responses", json={"model": "x", "input": "hi", "max_output_tokens": 2,  # Codex's
                                                   "reasoning": {"effort": "none"}, "include": ["reasoning.encrypted_content"]})
    assert none.status_code == 200, none.text
    r = httpx.post(f"{url}/v1/responses", json={"model": "x", "input": "hi", "previous_response_id": "resp_nope"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "previous_response_id"
    assert httpx.get(f"{url}/v1/responses/resp_nope").status_code == 404
    # Anthropic's error object has no param: the field is named at the start of the message
    for body, param, words in [
            ({"messages": [{"role": "user", "content": "hi"}]}, "max_tokens", "Field required"),
            ({"max_tokens": 8, "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_nope", "content": "x"}]}]}, "messages[0].content[0]",
             '"toolu_nope"'),
            ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
             "messages[0].content[0]", '"image" block is not supported'),
            ({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
              "tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools[0]", '"bash_20250124"'),
            ({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
              "thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking", "not supported"),
            ({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
              "stop_sequences": ["a", "b", "c", "d", "e"]}, "stop_sequences", "up to 4")]:
        r = httpx.post(f"{url}/v1/messages", json={"model": "x", **body})
        assert r.status_code == 400 and r.json()["type"] == "error", r.text
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error", r.text
        assert error["message"].startswith(f"{param}: ") and words in error["message"], (param, r.text)
    reminded = httpx.post(f"{url}/v1/messages", json={"model": "x", "max_tokens": 2, "messages": [  # as Claude Code
        {"role": "user", "content": "hi"}, {"role": "system", "content": "a reminder"}]})
    assert reminded.status_code == 200, reminded.text
    with pytest.raises(anthropic.BadRequestError):
        _claude(server).messages.create(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=0)


def test_a_translated_body_that_fails_the_chat_checks_names_its_field():
    """Messages and Responses bodies become a chat request, checked as a client's own chat body is
    (``bodies.validated``): a failure there names the field too, not only a status."""
    from specdec_cli.serve.api_error import ApiError
    from specdec_cli.serve.bodies import validated
    from specdec_cli.serve.messages_api import CHAT_NAMES, MessagesRequest, to_chat
    from specdec_cli.serve.schemas import ChatRequest

    body = MessagesRequest.model_validate({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
                                           "stop_sequences": ["a", "b", "c", "d", "e"]})
    with pytest.raises(ApiError) as err:
        validated(ChatRequest, to_chat(body), CHAT_NAMES)
    # named as the client sent it: a Messages client sent stop_sequences, not the chat's stop
    assert err.value.status == 400 and err.value.param == "stop_sequences" and "up to 4" in err.value.message
    assert err.value.message.startswith("stop_sequences: ")

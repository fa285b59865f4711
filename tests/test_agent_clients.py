"""Agent frameworks as their documentation shows them, pointed at ``specdec serve``: the
``openai-agents`` function-tool round trip, ``instructor`` (TOOLS and JSON_SCHEMA modes) and
``langchain-openai`` (``bind_tools``, ``with_structured_output``), on the tiny f32 target with
Qwen2.5's chat template. A tiny random model cannot choose well, so each check asks for the
tool where the framework can (``required``, a named tool, ``any``): the grammar then guarantees
a call the framework parses and validates, which is what these tests hold the server to."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, ConfigDict, Field

from test_serve_tools import server  # noqa: F401  (the tiny target with Qwen2.5's template, served)

openai = pytest.importorskip("openai")


class Weather(BaseModel):
    """The weather to look up."""

    city: str = Field(max_length=10)
    days: int = Field(ge=1, le=7)


class ClosedWeather(Weather):
    """The same, its schema saying no other keys: a JSON Schema ``response_format`` is held to
    the schema as written (tool arguments are closed whatever it says), and a random model
    left free to add keys adds them until the budget runs out."""

    model_config = ConfigDict(extra="forbid")


def weather_agent(agents, model, **agent_options):
    """The weather agent, on ``model``, and the list of cities its tool was called with."""
    called: list[str] = []

    @agents.function_tool
    def get_weather(city: Annotated[str, Field(max_length=10)]) -> str:  # a random model's strings need an end
        """The weather in a city."""
        called.append(city)
        return "sunny, 21 C"

    agent = agents.Agent(name="weather", instructions="Answer with the weather.", tools=[get_weather], model=model,
                         model_settings=agents.ModelSettings(tool_choice="required", temperature=0, max_tokens=200,
                                                             parallel_tool_calls=False), **agent_options)
    return agent, called


def test_openai_agents_function_tool_round_trip(server):
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    agent, called = weather_agent(agents, agents.OpenAIChatCompletionsModel(model="x", openai_client=client))
    result = agents.Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4)
    assert called, "the agent never called its tool"
    assert isinstance(result.final_output, str)
    kinds = [type(item).__name__ for item in result.new_items]
    assert "ToolCallItem" in kinds and "ToolCallOutputItem" in kinds


@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_instructor_response_models(server, mode):
    instructor = pytest.importorskip("instructor")
    client = instructor.from_openai(openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0),
                                    mode=getattr(instructor.Mode, mode))
    model = Weather if mode == "TOOLS" else ClosedWeather
    got = client.chat.completions.create(model="x", response_model=model, max_retries=0, temperature=0,
                                         messages=[{"role": "user", "content": "weather in paris for 3 days"}])
    assert isinstance(got, model) and 1 <= got.days <= 7 and len(got.city) <= 10


@pytest.mark.parametrize("tool_choice", ["any", None])
def test_langchain_bind_tools(server, tool_choice):
    lc = pytest.importorskip("langchain_openai")
    llm = lc.ChatOpenAI(base_url=f"{server.url}/v1", api_key="x", model="x", temperature=0, max_tokens=200,
                        max_retries=0)
    bound = llm.bind_tools([Weather], tool_choice=tool_choice) if tool_choice else llm.bind_tools([Weather])
    msg = bound.invoke("What is the weather in Paris?")
    if tool_choice == "any":
        assert msg.tool_calls and msg.tool_calls[0]["name"] == "Weather"
    for call in msg.tool_calls:  # under auto a call is the model's choice; one it makes always parses
        Weather(**call["args"])
    assert not msg.invalid_tool_calls


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(server, method):
    lc = pytest.importorskip("langchain_openai")
    llm = lc.ChatOpenAI(base_url=f"{server.url}/v1", api_key="x", model="x", temperature=0, max_tokens=200,
                        max_retries=0)
    model = ClosedWeather if method == "json_schema" else Weather
    got = llm.with_structured_output(model, method=method).invoke("weather in paris for 3 days")
    assert isinstance(got, model)

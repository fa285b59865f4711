"""Agent frameworks against OpenAI-compatible servers, side by side: does each client's tool use work?

Seven checks, each written as the client's documentation shows it, on a real model:

  agents-auto        openai-agents: an agent with a function tool (tool_choice auto) answers a
                     question that needs it: the tool is called and the run ends with an answer
  agents-required    the same with tool_choice "required"
  instructor-tools   instructor, TOOLS mode: a response model filled through a named tool
  instructor-json    instructor, JSON_SCHEMA mode: the same through response_format
  langchain-auto     langchain-openai bind_tools: a question that needs the tool gets a call
  langchain-any      bind_tools(tool_choice="any"): a call whatever the question
  langchain-struct   with_structured_output: a response model filled

and, with --json-prompts, how often a reply to a prompt that merely asks for JSON (tools offered,
tool_choice auto) comes back as a tool call: the fenced-JSON fallback's false positives.

    python3 scripts/serving/tool_clients.py \\
        --system "specdec::python3 -m specdec_cli serve -t T -d D --port {port}" \\
        --system "llama-jinja::llama-server -m T --jinja -np 2 -c 8192 --port {port} -t 2" --json-prompts

Systems start and stop as in ``agent_loop.py``. A check passes or fails with the reason the client
gave; nothing is retried.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared.script_io import Parser  # noqa: E402
from _shared.systems import Server, systems_of  # noqa: E402

QUESTION = "What is the weather in Paris today? Use the tool."
JSON_PROMPTS = [  # the last eight come close to a call of get_weather on purpose
    "Give me a JSON object describing a book: title, author and year.",
    "Return the three largest planets as a JSON list of objects with name and radius_km.",
    "Convert this to JSON: name Ada Lovelace, born 1815, field mathematics.",
    "Output a JSON config with keys host, port and debug for a local web server.",
    "Write a JSON object with the keys city and country for the capital of Japan.",
    "Reply only with JSON: an object mapping each weekday to its number, Monday = 1.",
    "Produce a JSON array of two users, each with id, name and email.",
    "Give the JSON schema of an object with a required string field name.",
    "Describe today's weather in Paris as a JSON object with city, temperature_c and sky.",
    "Return a JSON object with a single key city set to Berlin.",
    "Write the arguments of a weather lookup for Rome as JSON.",
    "Give me JSON for a todo item: title, done, due date.",
    "As JSON, list two cities and the country each is in.",
    "Encode this as JSON: get_weather for Madrid.",
    "Make a JSON object that names a function and its arguments for adding 2 and 3.",
    "Output {\"city\": ...} JSON for the largest city in Canada.",
]


class Weather(BaseModel):
    city: str
    temperature_c: float
    conditions: str


def _weather_tool():
    return {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def check_agents(url: str, choice: str) -> str:
    import agents
    import openai

    agents.set_tracing_disabled(True)
    called: list[str] = []

    @agents.function_tool
    def get_weather(city: Annotated[str, Field(description="The city")]) -> str:
        """The current weather in a city."""
        called.append(city)
        return "sunny, 21 C"

    model = agents.OpenAIChatCompletionsModel(model="local", openai_client=openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key="x", max_retries=0))
    agent = agents.Agent(name="assistant", instructions="You answer questions, using tools when they help.",
                         tools=[get_weather], model=model,
                         model_settings=agents.ModelSettings(tool_choice=choice, temperature=0, max_tokens=400))
    result = agents.Runner.run_sync(agent, QUESTION, max_turns=4)
    if not called:
        return f"fail: no tool call (answer: {str(result.final_output)[:80]!r})"
    return f"pass: called get_weather({called[0]!r}), answered {str(result.final_output)[:60]!r}"


def check_instructor(url: str, mode: str) -> str:
    import instructor
    import openai

    client = instructor.from_openai(openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0),
                                    mode=getattr(instructor.Mode, mode))
    got = client.chat.completions.create(model="local", response_model=Weather, max_retries=0, temperature=0,
                                         max_tokens=300, messages=[{"role": "user", "content":
                                                                    "It is 18.5 C and cloudy in Oslo. Extract it."}])
    return f"pass: {got.model_dump()}"


def check_langchain(url: str, what: str) -> str:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=f"{url}/v1", api_key="x", model="local", temperature=0, max_tokens=300, max_retries=0)
    if what == "struct":
        got = llm.with_structured_output(Weather).invoke("It is 18.5 C and cloudy in Oslo.")
        return f"pass: {got.model_dump()}" if isinstance(got, Weather) else f"fail: {got!r}"
    bound = llm.bind_tools([_weather_tool()], tool_choice="any") if what == "any" else llm.bind_tools([_weather_tool()])
    msg = bound.invoke(QUESTION)
    if msg.invalid_tool_calls:
        return f"fail: invalid call {msg.invalid_tool_calls[0]}"
    if not msg.tool_calls:
        return f"fail: no tool call (content: {str(msg.content)[:80]!r})"
    return f"pass: {msg.tool_calls[0]['name']}({msg.tool_calls[0]['args']})"


CHECKS = {
    "agents-auto": lambda url: check_agents(url, "auto"),
    "agents-required": lambda url: check_agents(url, "required"),
    "instructor-tools": lambda url: check_instructor(url, "TOOLS"),
    "instructor-json": lambda url: check_instructor(url, "JSON_SCHEMA"),
    "langchain-auto": lambda url: check_langchain(url, "auto"),
    "langchain-any": lambda url: check_langchain(url, "any"),
    "langchain-struct": lambda url: check_langchain(url, "struct"),
}


def json_false_positives(url: str) -> list[dict]:
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    out = []
    for prompt in JSON_PROMPTS:
        res = client.chat.completions.create(model="local", messages=[{"role": "user", "content": prompt}],
                                             tools=[_weather_tool()], temperature=0, max_tokens=300)
        msg = res.choices[0].message
        out.append({"prompt": prompt, "called": bool(msg.tool_calls), "content": (msg.content or "")[:120]})
    return out


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", action="append", required=True, help="LABEL::command line with {port}")
    ap.add_argument("--json-prompts", action="store_true", help="also count tool calls on prompts asking for JSON")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--log", default="/tmp/tool_clients.log", help="the servers' output")
    args = ap.parse_args()
    results: dict[str, dict] = {}
    with open(args.log, "w") as log:
        for label, cmd in systems_of(ap, args.system):
            server = Server(label, cmd, log)
            mine: dict = {"checks": {}}
            try:
                for name, check in CHECKS.items():
                    t0 = time.perf_counter()
                    try:
                        verdict = check(server.url)
                    except Exception as exc:  # noqa: BLE001 - the client's failure is the result
                        verdict = f"fail: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
                        print(traceback.format_exc(), file=log)
                    mine["checks"][name] = {"verdict": verdict, "seconds": round(time.perf_counter() - t0, 2)}
                    print(f"{label:<14} {name:<18} {verdict[:150]}", flush=True)
                if args.json_prompts:
                    mine["json_prompts"] = json_false_positives(server.url)
                    n = sum(x["called"] for x in mine["json_prompts"])
                    print(f"{label:<14} json-prompts       {n} of {len(JSON_PROMPTS)} answered with a tool call",
                          flush=True)
            finally:
                server.stop()
            results[label] = mine
    print()
    for label, mine in results.items():
        passed = sum(v["verdict"].startswith("pass") for v in mine["checks"].values())
        print(f"{label:<14} {passed} of {len(CHECKS)} checks pass")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

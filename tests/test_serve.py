"""``specdec serve`` driven by the official ``openai`` client, on the tiny f32 fixtures."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

openai = pytest.importorskip("openai")

EXACT = ["--flash-attn", "off", "--cache-type-k", "f32", "--cache-type-v", "f32"]
PROMPTS = [
    "hello world this is the cat and the dog hello world this is the cat and",
    "one two three four five six one two three four five six one two three",
    "the and of to in is it that for on the and of to in is it that for",
    "a b c d e f g h a b c d e f g h a b c d",
    "we can see that one of the world we can see that one of the",
    "is it that for on is it that",
    "one of the world",
    "the cat and the dog the cat and the dog the cat",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *args, env=None, launcher: tuple[str, ...] = ("-m", "specdec_cli")):
        """``launcher``: what runs the CLI after the interpreter (a ``-c`` driver that injects a
        fault first, in the fault tests)."""
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, *launcher, "serve", "--port", str(self.port), *map(str, args)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "NO_COLOR": "1", **(env or {})},
        )
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("server did not start")

    def client(self, key: str = "anything"):
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=120)

    def stop(self, sig=None) -> tuple[int, str]:
        import signal

        self.proc.send_signal(sig or signal.SIGINT)
        try:
            _out, err = self.proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return self.proc.returncode, err


@pytest.fixture(scope="module")
def server(tiny_target, tiny_draft):
    srv = Server("-t", tiny_target, "-d", tiny_draft, *EXACT, "--ctx", "256", "--parallel", "4", "-n", "24")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def alone(tiny_target):
    """Each prompt's text from the target alone, as `specdec run` gives it."""
    from specdec_cli.engine.decode.engine import Engine, EngineOptions, GenOptions

    eng = Engine(tiny_target, None, options=EngineOptions(n_ctx=256, flash_attn="off", cache_type_k="f32",
                                                          cache_type_v="f32"))
    try:
        return {p: eng.generate(eng.tokenize_prompt(p), GenOptions(max_tokens=24), use_draft=False).text
                for p in PROMPTS}
    finally:
        eng.close()


def test_models_and_health(server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == ["tiny-target-f32.gguf"]
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}


def test_completion_equals_the_target_alone(server, alone):
    out = server.client().completions.create(model="x", prompt=PROMPTS[0], temperature=0, max_tokens=24)
    assert out.choices[0].text == alone[PROMPTS[0]]
    assert out.choices[0].finish_reason == "length"
    assert out.usage.completion_tokens == 24 and out.usage.prompt_tokens > 0
    details = out.usage.completion_tokens_details
    assert details.accepted_prediction_tokens + details.rejected_prediction_tokens >= 0
    assert "steps_by_drafter" in out.model_extra["specdec"]


def test_chat_and_stop_strings(server):
    client = server.client()
    res = client.chat.completions.create(model="x", temperature=0, max_completion_tokens=16,
                                         messages=[{"role": "system", "content": "be brief"},
                                                   {"role": "user", "content": [{"type": "text", "text": "hello"}]}])
    msg = res.choices[0].message
    assert msg.role == "assistant" and res.usage.completion_tokens <= 16
    full = client.completions.create(model="x", prompt=PROMPTS[1], temperature=0, max_tokens=24).choices[0].text
    stop = full[4:8]
    cut = client.completions.create(model="x", prompt=PROMPTS[1], temperature=0, max_tokens=24, stop=[stop])
    assert cut.choices[0].text == full[: full.find(stop)] and cut.choices[0].finish_reason == "stop"


def test_streaming_with_usage(server, alone):
    stream = server.client().chat.completions.create(
        model="x", temperature=0, max_tokens=24, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": PROMPTS[2]}])
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 24
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert text


def test_eight_concurrent_streaming_clients_get_their_own_outputs(server, alone):
    results: dict[str, str] = {}

    def one(prompt: str) -> None:
        stream = server.client().completions.create(model="x", prompt=prompt, temperature=0, max_tokens=24,
                                                    stream=True)
        results[prompt] = "".join(c.choices[0].text for c in stream if c.choices)

    threads = [threading.Thread(target=one, args=(p,)) for p in PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert results == alone


def test_bad_requests_get_4xx_and_the_server_keeps_serving(server):
    url = f"{server.url}/v1"
    post = lambda path, **kw: httpx.post(f"{url}{path}", timeout=30, **kw)  # noqa: E731
    cases = [
        (post("/completions", content=b"{not json", headers={"content-type": "application/json"}), 400, None),
        (post("/completions", json={"prompt": 5}), 400, "prompt"),
        (post("/completions", json={"prompt": "hi", "max_tokens": "many"}), 400, "max_tokens"),
        (post("/completions", json={"prompt": "   "}), 400, "prompt"),
        (post("/completions", json={"prompt": "hi", "n": 2}), 400, "n"),
        (post("/chat/completions", json={"messages": [{"role": "wizard", "content": "hi"}]}), 400, "messages"),
        (post("/chat/completions", json={"messages": []}), 400, "messages"),
        (post("/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                         "response_format": {"type": "yaml"}}), 400, "response_format"),
        (post("/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "response_format": {
            "type": "json_schema", "json_schema": {"schema": {"type": "object", "dependentSchemas": {}}}}}),
         400, "response_format"),
        (post("/completions", content=b"{" + b" " * (9 * 1024 * 1024) + b"}",
              headers={"content-type": "application/json"}), 413, None),
    ]
    for resp, status, param in cases:
        assert resp.status_code == status, resp.text
        err = resp.json()["error"]
        assert err["message"] and err["type"] and err["param"] == param
    long = post("/completions", json={"prompt": "hello " * 400, "max_tokens": 4})
    assert long.status_code == 400 and "256" in long.json()["error"]["message"]
    ok = post("/completions", json={"prompt": "hello", "max_tokens": 2, "unknown_field": {"a": 1}})
    assert ok.status_code == 200, ok.text


def test_response_format_json_schema_is_obeyed(server):
    schema = {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}, "n": {"type": "integer",
              "minimum": 0, "maximum": 9}}, "required": ["kind", "n"], "additionalProperties": False}
    res = server.client().chat.completions.create(
        model="x", temperature=0, max_tokens=40, messages=[{"role": "user", "content": "a pet"}],
        response_format={"type": "json_schema", "json_schema": {"name": "pet", "schema": schema}})
    value = json.loads(res.choices[0].message.content)
    assert set(value) == {"kind", "n"} and value["kind"] in ("cat", "dog") and 0 <= value["n"] <= 9
    assert res.choices[0].finish_reason == "stop"


def test_a_client_that_goes_away_mid_stream_frees_its_sequence(server):
    # the tiny model writes 200 tokens in 0.1-0.2 s, so a hang-up can arrive after the end:
    # hang up again until one lands mid-stream (each try is a 200-token stream)
    for _ in range(5):
        with httpx.stream("POST", f"{server.url}/v1/completions", timeout=60,
                          json={"prompt": PROMPTS[3], "max_tokens": 200, "stream": True}) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: {"):
                    break  # one chunk, then the client hangs up
        time.sleep(0.3)
        if _counter(server.url, "specdec_requests_cancelled_total") >= 1:
            break
    out = server.client().completions.create(model="x", prompt="hello", temperature=0, max_tokens=4)
    assert out.usage.completion_tokens == 4
    metrics = httpx.get(f"{server.url}/metrics").text
    assert "specdec_requests_total" in metrics and "specdec_sequences_per_pass" in metrics
    assert _counter(server.url, "specdec_requests_cancelled_total") >= 1


def _counter(url: str, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics").text
    return next(s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name)


def test_a_silent_stream_says_it_is_still_there():
    """While a long prompt is read no token comes for minutes on a CPU: the stream gets an "idle"
    event each interval (spelled as a keep-alive by each API), and the events still end with
    the result."""
    import asyncio
    from types import SimpleNamespace

    from specdec_cli.engine.options import GenOptions
    from specdec_cli.serve.events import Done, Idle, Text
    from specdec_cli.serve.generation import Ready
    from specdec_cli.serve.handoff import Outbox
    from specdec_cli.serve.lifecycle import ServeContext, submit
    from specdec_cli.serve.schemas import CompletionRequest

    async def run():
        submitted = []
        ctx = ServeContext(SimpleNamespace(submit=lambda work: submitted.append(work) or True),
                           SimpleNamespace(accepted=lambda: None), None, lambda body: GenOptions(), "m", None)
        generation = submit(ctx, Ready(CompletionRequest(prompt="x"), [1, 2]), 0.0)
        assert [w.tokens for w in submitted] == [[1, 2]] and submitted[0].handle is generation.handle
        seen = []
        async for event in generation.events(idle=0.05):
            seen.append(event)
            if seen.count(Idle()) == 2:
                out = Outbox()
                out.put(generation.handle, Text("a"))
                out.put(generation.handle, Done(None))
                out.send()
        return seen

    assert asyncio.run(run()) == [Idle(), Idle(), Text("a"), Done(None)]


def test_one_stream_driver_ends_every_api_stream_with_its_own_error():
    """A fault ends a streamed request with an error in its API's format: the same driver
    (``lifecycle.drive``) spells the text, then the error, through each API's wire, and the
    stream ends there without cancelling anything."""
    import asyncio
    from types import SimpleNamespace

    from specdec_cli.engine.options import GenOptions
    from specdec_cli.serve.events import Failed, Text
    from specdec_cli.serve.generation import Ready
    from specdec_cli.serve.handoff import Outbox
    from specdec_cli.serve.lifecycle import ServeContext, drive, submit
    from specdec_cli.serve.messages_out import MessagesWire
    from specdec_cli.serve.openai_out import ChatWire, CompletionWire, TokenSpelling
    from specdec_cli.serve.responses_out import ResponsesWire
    from specdec_cli.serve.schemas import CompletionRequest
    from specdec_cli.serve.wire import CallIds

    ids = CallIds(lambda: "call_1")
    wires = {"chat": ChatWire("c", 0, "m", TokenSpelling(bytes), ids, False),
             "completion": CompletionWire("c", 0, "m", TokenSpelling(bytes), ids, False),
             "messages": MessagesWire("msg", "m", ids, 1), "responses": ResponsesWire("r", 0, "m", ids, {}, None)}

    async def run(wire) -> tuple[list[str], bool]:
        ctx = ServeContext(SimpleNamespace(submit=lambda work: True), SimpleNamespace(accepted=lambda: None),
                           None, lambda body: GenOptions(), "m", None)
        generation = submit(ctx, Ready(CompletionRequest(prompt="x", stream=True), [1]), 0.0)
        out = Outbox()
        out.put(generation.handle, Text("hi"))
        out.put(generation.handle, Failed("boom"))
        out.send()
        return [line async for line in drive(ctx, generation, wire)], generation.handle.cancelled

    got = {name: asyncio.run(run(wire)) for name, wire in wires.items()}
    assert not any(cancelled for _, cancelled in got.values())
    datas = {name: [json.loads(x[6:]) for line in lines for x in line.splitlines() if x.startswith("data: {")]
             for name, (lines, _) in got.items()}
    for name in ("chat", "completion"):
        assert got[name][0][-1] == "data: [DONE]\n\n"
        assert datas[name][-1] == {"error": {"message": "boom", "type": "server_error"}}
    assert datas["chat"][-2]["choices"][0]["delta"] == {"content": "hi"}
    assert datas["completion"][-2]["choices"][0]["text"] == "hi"
    assert got["messages"][0][-1].startswith("event: error\n")
    assert datas["messages"][-1] == {"type": "error", "error": {"type": "api_error", "message": "boom"}}
    assert [d["type"] for d in datas["messages"]][:2] == ["message_start", "ping"]
    assert got["responses"][0][-1].startswith("event: error\n")
    assert datas["responses"][-1] == {"type": "error", "sequence_number": len(datas["responses"]) - 1,
                                      "code": "server_error", "message": "boom", "param": None}
    assert [d["sequence_number"] for d in datas["responses"]] == list(range(len(datas["responses"])))


def _histogram_counts(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics").text
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name.endswith("_seconds_count")}


def test_each_request_reports_its_time_to_first_token_and_metrics_keep_the_histograms(server):
    before = _histogram_counts(server.url)
    t0 = time.perf_counter()
    res = httpx.post(f"{server.url}/v1/completions", timeout=60,
                     json={"prompt": PROMPTS[1], "max_tokens": 6, "temperature": 0}).json()
    wall = time.perf_counter() - t0
    mine = res["specdec"]
    assert 0 < mine["ttft"] <= wall and 0 <= mine["queue_seconds"] <= mine["ttft"]
    events = [e["event"] for e in mine["timeline"]]
    assert events[:2] == ["ready", "admitted"] and events[-1] == "first token", mine["timeline"]
    assert mine["timeline"][-1]["at"] == pytest.approx(mine["ttft"], abs=1e-3)
    streamed = [json.loads(line[6:]) for line in httpx.post(
        f"{server.url}/v1/chat/completions", timeout=60,
        json={"messages": [{"role": "user", "content": PROMPTS[2]}], "max_tokens": 5, "stream": True}
    ).text.splitlines() if line.startswith("data: {")]
    assert [c["specdec"]["ttft"] > 0 for c in streamed if "specdec" in c] == [True]
    after = _histogram_counts(server.url)
    for name in ("specdec_time_to_first_token_seconds_count", "specdec_time_per_output_token_seconds_count"):
        assert after[name] - before.get(name, 0) == 2, name


def test_api_key(tiny_target):
    srv = Server("-t", tiny_target, *EXACT, "--ctx", "128", "--parallel", "2", "-n", "4", "--no-draft",
                 env={"SPECDEC_API_KEY": "sekrit"})
    try:
        with pytest.raises(openai.AuthenticationError):
            srv.client("wrong").models.list()
        assert httpx.get(f"{srv.url}/v1/models").status_code == 401
        assert srv.client("sekrit").completions.create(model="x", prompt="hi", max_tokens=2).choices
        ask = {"model": "x", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        ok = httpx.post(f"{srv.url}/v1/messages", headers={"x-api-key": "sekrit"}, json=ask)  # Anthropic's header
        assert ok.status_code == 200 and ok.json()["type"] == "message", ok.text
        bad = httpx.post(f"{srv.url}/v1/messages", headers={"x-api-key": "wrong"}, json=ask)
        assert bad.status_code == 401 and bad.json()["error"]["type"] == "authentication_error"
        assert httpx.get(f"{srv.url}/health").status_code == 200
        code, err = srv.stop()
        assert code == 0 and "Traceback" not in err  # a server asked to stop stops cleanly
        # a line per request, when it ended (a generating one with its tokens); none for /health
        lines = [x for x in err.splitlines() if x.startswith(("GET ", "POST "))]
        assert lines[0].startswith("GET /v1/models 401 · ") and lines[1].startswith("GET /v1/models 401")
        assert re.fullmatch(r"POST /v1/completions 200 · prompt \d+ · generated 2 · \d+\.\d s", lines[2]), lines
        assert lines[3].startswith("POST /v1/messages 200 · prompt ") and lines[4].startswith("POST /v1/messages 401")
        assert len(lines) == 5, lines
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()


def test_thirty_two_requests_against_four_slots_all_complete(server, alone):
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> str:
        p = PROMPTS[i % len(PROMPTS)]
        return p, server.client().completions.create(model="x", prompt=p, temperature=0, max_tokens=24).choices[0].text

    with ThreadPoolExecutor(32) as pool:
        got = list(pool.map(one, range(32)))
    assert len(got) == 32 and all(text == alone[p] for p, text in got)


def test_a_full_queue_is_a_503_with_retry_after():
    from specdec_cli.serve.worker import Worker

    class Sched:
        waiting: list = []
        slots: list = []
        running = 0

    w = Worker(engine=None, scheduler=Sched(), queue_max=0)
    assert w.submit(object()) is False  # not started, or no room: the app answers 503


def test_binding_beyond_loopback_without_a_key_warns(capsys):
    from specdec_cli.commands.serve import _check_host

    _check_host("0.0.0.0", None)
    assert "without --api-key" in capsys.readouterr().err
    _check_host("127.0.0.1", None)
    _check_host("0.0.0.0", "k")
    assert capsys.readouterr().err == ""


def test_sigterm_ends_requests_in_flight_with_a_finish_reason(tiny_target, tmp_path):
    import signal

    srv = Server("-t", tiny_target, *EXACT, "--ctx", "512", "--parallel", "2", "--no-draft")
    try:
        got: list = []

        def long_stream() -> None:
            with httpx.stream("POST", f"{srv.url}/v1/completions", timeout=120,
                              json={"prompt": "hello", "max_tokens": 400, "stream": True}) as resp:
                got.extend(line for line in resp.iter_lines() if line.startswith("data:"))

        t = threading.Thread(target=long_stream)
        t.start()
        time.sleep(1.0)
        code, err = srv.stop(signal.SIGTERM)
        t.join(timeout=60)
        assert code == 0, err  # a server asked to stop stops cleanly
        assert got and got[-1] == "data: [DONE]"
        finals = [json.loads(x[6:])["choices"][0]["finish_reason"] for x in got[:-1]]
        assert finals[-1] in ("stop", "length")
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()


def test_serve_refuses_a_target_it_cannot_batch(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "specdec_cli", "serve", "-t", str(Path(tmp_path) / "none.gguf")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "error:" in proc.stderr

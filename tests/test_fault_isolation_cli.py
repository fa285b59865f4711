"""A fault in one request ends that request alone, as users see it: ``serve`` answers it with an
error in its API's own format while the other requests run on and ``/health`` stays 200,
``run --batch`` gives its line an error object, ``run`` prints one line, and the server still
stops cleanly on SIGTERM (exit 0, no traceback, no native crash).

The fault is injected in a subprocess by a driver that wraps ``Constraint.consume`` to raise for
any grammar naming the property ``fault_me``, then runs the CLI as usual; every other request
goes through the real code. The engine-level injections are in ``test_fault_isolation.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import httpx
import pytest

from test_cli import EXACT, assert_one_line_error
from test_serve import Server

openai = pytest.importorskip("openai")

DRIVER = textwrap.dedent(
    """
    import sys
    from specdec_cli.engine.structured import constraint as C

    consume = C.Constraint.consume

    def faulty(self, tokens):
        if "fault_me" in self.grammar.text and tokens:
            raise C.ConstraintViolation("injected for a test")
        return consume(self, tokens)

    C.Constraint.consume = faulty
    from specdec_cli.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)
FAULTY = {"type": "object", "properties": {"fault_me": {"type": "string"}}, "required": ["fault_me"]}
GOOD = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}}, "required": ["name"]}
ASK = [{"role": "user", "content": "hello world this is the cat and the dog"}]


def _schema(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


@pytest.fixture(scope="module")
def faulty_server(tiny_tool_target, tiny_draft):
    srv = Server("-t", tiny_tool_target, *EXACT[:6], "--no-draft", "--ctx", "2048", "--parallel", "4", "-n", "24",
                 launcher=("-c", DRIVER))
    yield srv
    if srv.proc.poll() is None:
        srv.proc.kill()


def test_a_fault_ends_its_request_alone_and_the_server_goes_on(faulty_server):
    srv = faulty_server
    client = srv.client()

    def good(i: int):
        return client.chat.completions.create(model="m", messages=ASK, max_tokens=24 - i, temperature=0,
                                              response_format=_schema(GOOD)).choices[0].message.content

    alone = [good(i) for i in range(2)]
    got: dict = {}

    def worker(i: int) -> None:
        try:
            got[i] = good(i)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            got[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    with pytest.raises(openai.InternalServerError) as err:
        client.chat.completions.create(model="m", messages=ASK, max_tokens=24, temperature=0,
                                       response_format=_schema(FAULTY))
    for t in threads:
        t.join(timeout=120)
    assert [got[0], got[1]] == alone  # the others ran on, with the output they have alone
    body = err.value.response.json()["error"]
    assert body["type"] == "server_error" and "internal fault: ConstraintViolation: injected" in body["message"]
    # streamed, the error is the stream's last event
    stream = client.chat.completions.create(model="m", messages=ASK, max_tokens=24, temperature=0, stream=True,
                                            response_format=_schema(FAULTY))
    with pytest.raises(openai.APIError, match="internal fault"):
        for _ in stream:
            pass
    # Anthropic's Messages API: its own error object
    tool = {"name": "save", "input_schema": FAULTY}
    resp = httpx.post(f"{srv.url}/v1/messages", timeout=120, json={
        "model": "m", "max_tokens": 24, "messages": ASK, "tools": [tool], "tool_choice": {"type": "tool", "name": "save"}})
    assert resp.status_code == 500
    assert resp.json()["type"] == "error" and "internal fault" in resp.json()["error"]["message"]
    assert httpx.get(f"{srv.url}/health", timeout=10).status_code == 200
    assert good(0) == alone[0]
    metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
    assert "specdec_requests_faulted_total 3.0" in metrics
    code, err = srv.stop(signal.SIGTERM)
    assert code == 0, err
    assert "Traceback" not in err and "double free" not in err and "corruption" not in err
    logged = [ln for ln in err.splitlines() if ln.startswith("POST") and " 500 " in ln]
    assert len(logged) == 2 and all("error: the generation stopped on an internal fault: ConstraintViolation" in ln
                                    for ln in logged), err


def _drive(*args):
    return subprocess.run([sys.executable, "-c", DRIVER, *map(str, args)], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"})


@pytest.mark.parametrize("parallel", ["1", "3"])
def test_a_batch_line_that_faults_gets_an_error_object_and_the_others_their_answers(tiny_target, parallel,
                                                                                    tmp_path):
    lines = [{"prompt": "hello world this is the cat", "json_schema": GOOD},
             {"prompt": "one two three four", "json_schema": FAULTY},
             {"prompt": "we can see that one", "json_schema": GOOD}]
    batch = tmp_path / "b.jsonl"
    batch.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    proc = _drive("run", "-t", tiny_target, "--no-draft", *EXACT[:6], "-n", "16", "--batch", batch, "--parallel",
                  parallel)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    out = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [o["index"] for o in out] == [0, 1, 2]
    assert "internal fault: ConstraintViolation" in out[1]["error"]["message"] and "text" not in out[1]
    assert all("error" not in out[i] and out[i]["text"].startswith('{"name": "') for i in (0, 2))
    assert "1 of 3 prompts stopped on an internal fault" in proc.stderr


def test_run_gives_one_line_for_a_fault(tiny_target, tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(FAULTY))
    proc = _drive("run", "-t", tiny_target, "--no-draft", *EXACT[:6], "-n", "16", "--json-schema", f"@{schema}",
                  "hello world")
    assert_one_line_error(proc, 1, "internal fault: ConstraintViolation: injected")

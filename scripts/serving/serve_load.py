"""Load on `specdec serve`: many concurrent requests, none lost, and the server's memory across them.

    python3 scripts/serving/serve_load.py -t T [-d D | --default] [--parallel 4] [--requests 200] [--concurrency 32] [-n 32]
    python3 scripts/serving/serve_load.py -t T --default --tools --requests 200 --concurrency 16 -n 64

With neither -d nor --default the server runs the target alone (--no-draft); --default runs
`specdec serve -t T` as a user does (auto, with a draft found beside the target), so two runs,
one with --default and one without, compare speculation under load with the target alone.

Starts the server (its own command line, as a user would), waits for /health, then sends
``--requests`` chat completions, ``--concurrency`` at a time, half of them streamed, each prompt
different; with ``--tools`` every request offers two function tools, a third of them each with
``tool_choice`` auto, required and a named tool, and every call it gets back must name a tool
and carry arguments that parse. Every answer must finish (``finish_reason`` set, usage counted); a 503 (queue full)
is retried after its Retry-After, and counted. The server's resident memory (RSS, with psutil)
is read after a warm-up of ``--concurrency`` requests and again after all of them: a leak of
cells, sequences or buffers per request shows as growth between the two.

Latency side by side: ``--system LABEL::command`` (repeated, the command with ``{port}``, as in
``agent_loop.py``) runs the same load on each system in ``--rounds`` of alternating order, every
request streamed, and reports per system the time to first token (p50, p99: from the request to
its first content or tool-call piece) and the throughput (generated tokens per second of the
whole load):

    python3 scripts/serving/serve_load.py --requests 96 --concurrency 16 -n 32 --rounds 2 \\
        --system "llama-4::llama-server -m T -np 4 -c 8192 --port {port} -t 2" \\
        --system "specdec::python3 -m specdec_cli serve -t T -d D --port {port}"
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared.machine import free_port  # noqa: E402
from _shared.script_io import Parser  # noqa: E402
from _shared.systems import Server, alternating, systems_of  # noqa: E402

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "convert", "description": "Convert an amount between units.",
                                      "parameters": {"type": "object", "properties": {
                                          "amount": {"type": "number"}, "from_unit": {"type": "string"},
                                          "to_unit": {"type": "string"}}, "required": ["amount", "from_unit", "to_unit"]}}},
]
CHOICES = ["auto", "required", {"type": "function", "function": {"name": "convert"}}]
CITIES = ["Paris", "Oslo", "Lima", "Kyoto", "Cairo", "Quito", "Perth", "Dakar"]


def one_request(client: httpx.Client, i: int, n: int, stream: bool, retries: list[int], tools: bool = False) -> dict:
    ask = (f"Request {i}: what is the weather in {CITIES[i % len(CITIES)]}, and what is {i} miles in km?" if tools
           else f"Request {i}: list {3 + i % 5} facts about the number {i}.")
    body = {
        "model": "specdec",
        "messages": [{"role": "user", "content": ask}],
        "max_tokens": n,
        "temperature": 0,
        "stream": stream,
    }
    if tools:
        body["tools"], body["tool_choice"] = TOOLS, CHOICES[i % len(CHOICES)]
    if stream:
        body["stream_options"] = {"include_usage": True}
    while True:
        if not stream:
            r = client.post("/v1/chat/completions", json=body)
            if r.status_code == 503:
                retries.append(i)
                time.sleep(float(r.headers.get("retry-after", "1")))
                continue
            r.raise_for_status()
            data = r.json()
            calls = [(c["function"]["name"], c["function"]["arguments"])
                     for c in data["choices"][0]["message"].get("tool_calls") or []]
            return {"finish": data["choices"][0]["finish_reason"], "tokens": data["usage"]["completion_tokens"],
                    "calls": calls}
        t0 = time.perf_counter()
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code == 503:
                retries.append(i)
                r.read()
                time.sleep(float(r.headers.get("retry-after", "1")))
                continue
            r.raise_for_status()
            finish, tokens, done, calls, ttft = None, None, False, {}, None
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                chunk = json.loads(line[6:])
                for c in chunk.get("choices", []):
                    finish = c.get("finish_reason") or finish
                    delta = c.get("delta") or {}
                    if ttft is None and (delta.get("content") or delta.get("tool_calls")):
                        ttft = time.perf_counter() - t0
                    for d in delta.get("tool_calls") or []:
                        name, args = calls.get(d["index"], ("", ""))
                        fn = d.get("function") or {}
                        calls[d["index"]] = (name + (fn.get("name") or ""), args + (fn.get("arguments") or ""))
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
            return {"finish": finish if done else None, "tokens": tokens, "calls": [calls[k] for k in sorted(calls)],
                    "ttft": ttft}


def run_load(base: str, args, pid: int, stream_all: bool = False) -> dict:
    """``--requests`` requests, ``--concurrency`` at a time, against the server at ``base`` (process
    ``pid``, for its memory): each one's result, the errors, the 503s retried, the wall time."""
    proc = psutil.Process(pid)
    results: dict[int, dict] = {}
    errors: list[str] = []
    retries: list[int] = []
    rss_warm: list[int] = []
    lock = threading.Lock()
    todo = iter(range(args.requests))

    def worker():
        with httpx.Client(base_url=base, timeout=600) as c:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                try:
                    res = one_request(c, i, args.max_tokens, stream=stream_all or i % 2 == 1, retries=retries,
                                      tools=args.tools)
                except Exception as exc:  # counted, not raised: the point is how many are lost
                    with lock:
                        errors.append(f"{i}: {exc!r}")
                    continue
                with lock:
                    results[i] = res
                    if len(results) == args.concurrency:
                        rss_warm.append(proc.memory_info().rss)

    rss_start = proc.memory_info().rss
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return {"results": results, "errors": errors, "retries": retries, "wall": time.perf_counter() - t0,
            "rss_start": rss_start, "rss_warm": rss_warm[0] if rss_warm else float("nan"),
            "rss_end": proc.memory_info().rss}


def percentile(xs: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (q in 0..100) of ``xs``."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * len(xs) + 0.5) - 1))]


def compare(args, systems: list[tuple[str, str]]) -> int:
    """The same load on every system, rounds in alternating order: time to first token and throughput."""
    pooled: dict[str, dict[str, list]] = {label: {"ttft": [], "rate": [], "lost": []} for label, _ in systems}
    with open(args.log, "w") as log:
        for r, label, cmd in alternating(systems, args.rounds):
            server = Server(label, cmd, log)
            try:
                with httpx.Client(base_url=server.url, timeout=600) as c:  # warm-up (and a first calibration)
                    one_request(c, -1, 4, stream=True, retries=[])
                out = run_load(server.url, args, server.proc.pid, stream_all=True)
            finally:
                server.stop()
            done = [x for x in out["results"].values() if x["finish"] in ("stop", "length", "tool_calls")]
            ttft = [x["ttft"] for x in done if x["ttft"] is not None]
            rate = sum(x["tokens"] or 0 for x in done) / out["wall"]
            mine = pooled[label]
            mine["ttft"] += ttft
            mine["rate"].append(rate)
            mine["lost"].append(args.requests - len(done))
            print(f"round {r} {label:<16} {out['wall']:7.1f} s {rate:7.2f} tok/s  ttft p50 {percentile(ttft, 50):6.2f} s "
                  f"p99 {percentile(ttft, 99):6.2f} s  lost {args.requests - len(done)}", flush=True)
    print()
    print(f"{'system':<16} {'tok/s (mean)':>12} {'ttft p50':>9} {'ttft p99':>9} {'lost':>5}")
    for label, _ in systems:
        m = pooled[label]
        print(f"{label:<16} {statistics.mean(m['rate']):12.2f} {percentile(m['ttft'], 50):9.2f} "
              f"{percentile(m['ttft'], 99):9.2f} {sum(m['lost']):5d}")
    return 0 if not any(sum(m["lost"]) for m in pooled.values()) else 1


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("-t", "--target")
    ap.add_argument("-d", "--draft")
    ap.add_argument("--default", action="store_true", help="no drafting flags: auto, as `specdec serve -t T` runs")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("-n", "--max-tokens", type=int, default=32)
    ap.add_argument("--tools", action="store_true", help="every request offers two tools (tool_choice varied)")
    ap.add_argument("--system", action="append", help="LABEL::command line with {port}: latency side by side")
    ap.add_argument("--rounds", type=int, default=2, help="with --system: rounds, in alternating order")
    ap.add_argument("--log", default="/tmp/serve_load.log", help="with --system: the servers' output")
    args = ap.parse_args()
    if args.system:
        return compare(args, systems_of(ap, args.system))
    if not args.target:
        ap.error("give -t (specdec serve's target) or --system")

    port = free_port()
    cmd = [sys.executable, "-m", "specdec_cli", "serve", "-t", args.target, "--port", str(port),
           "--parallel", str(args.parallel)]
    cmd += ["-d", args.draft] if args.draft else [] if args.default else ["--no-draft"]
    server = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=600) as client:
            for _ in range(600):
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None:
                    print(server.stderr.read(), file=sys.stderr)
                    return 1
                time.sleep(0.5)
            out = run_load(base, args, server.pid)
            metrics = client.get("/metrics").text
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()

    results, errors = out["results"], out["errors"]
    finished = [r for r in results.values() if r["finish"] in ("stop", "length", "tool_calls")]
    calls = [c for r in results.values() if r["finish"] == "tool_calls" for c in r["calls"]]  # not cut by -n
    bad = [c for c in calls if c[0] not in {t["function"]["name"] for t in TOOLS} or not _parses(c[1])]
    ttft = [r["ttft"] for r in finished if r.get("ttft") is not None]
    mib = 1 << 20
    print(f"{args.requests} requests, {args.concurrency} at once, --parallel {args.parallel}, -n {args.max_tokens}: "
          f"{len(finished)} finished, {len(errors)} errors, {len(out['retries'])} retried after a 503, "
          f"{out['wall']:.1f} s; time to first token (streamed) p50 {percentile(ttft, 50):.2f} s, "
          f"p99 {percentile(ttft, 99):.2f} s")
    print(f"server RSS: at start {out['rss_start'] / mib:.1f} MiB, after {args.concurrency} requests "
          f"{out['rss_warm'] / mib:.1f} MiB, after {args.requests} {out['rss_end'] / mib:.1f} MiB")
    if args.tools:
        by = {f: sum(r["finish"] == f for r in results.values()) for f in ("tool_calls", "stop", "length")}
        print(f"tool calls: {len(calls)} in all, {len(bad)} that do not parse or name no tool; finish reasons {by}")
    for line in metrics.splitlines():
        if line.startswith(("specdec_requests_total", "specdec_requests_finished_total", "specdec_sequences_per_pass",
                            "specdec_queue_length")):
            print("  " + line)
    for e in errors[:5]:
        print("error", e, file=sys.stderr)
    return 0 if len(finished) == args.requests and not bad else 1


def _parses(arguments: str) -> bool:
    try:
        return isinstance(json.loads(arguments), dict)
    except ValueError:
        return False


if __name__ == "__main__":
    sys.exit(main())

"""Servers side by side over HTTP: ``--system LABEL::command`` started, run, stopped.

Every system is a command line with ``{port}`` (``specdec serve``, ``llama-server``, anything
OpenAI-compatible): ``Server`` starts it on a free local port, waits for /health and stops it
(SIGINT, then SIGKILL after 60 s); each start has an empty prompt cache folder
(``$SPECDEC_PROMPT_CACHE``, unless the command gives ``--prompt-cache``), as llama-server starts
with none. ``run_system`` runs K sessions at once against one system;
``alternating`` reverses the systems' order every other round (the machine drifts by +-10% over
minutes). The options, the per-turn columns of the tables and the --json file are the same for
every program that drives them (``serving/agent_loop.py``, ``tool_loop.py``, ``serve_load.py``,
``tool_clients.py``).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import httpx

from _shared.machine import free_port
from _shared.script_io import Parser


class Server:
    """One ``--system`` command running, its ``{port}`` a free local port, once it answers /health."""

    def __init__(self, label: str, cmd: str, log):
        self.label = label
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # each start gets an empty prompt cache folder (where the command names none), as llama-server
        # starts with no prompt cache: no round starts from the prompts another round's server read
        self.prompts = tempfile.TemporaryDirectory(prefix="specdec-prompts-")
        self.proc = subprocess.Popen(shlex.split(cmd.replace("{port}", str(self.port))), stdout=log, stderr=log,
                                     env={**os.environ, "NO_COLOR": "1", "SPECDEC_PROMPT_CACHE": self.prompts.name})
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"error: {label} exited with {self.proc.returncode} before serving (see the log)")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        sys.exit(f"error: {label} did not answer /health in 600 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.prompts.cleanup()


def stream_turn(url: str, messages: list[dict], n: int) -> dict:
    """One streamed chat request: time to the first content, total time, text, tokens, finish reason."""
    body = {"model": "local", "messages": messages, "max_tokens": n, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "cache_prompt": True}
    t0 = time.perf_counter()
    ttft, text, usage, extra, finish = None, [], {}, {}, None
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=3600) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            if chunk.get("specdec"):  # specdec's own figures (drafter split, passes); other servers send none
                extra = chunk["specdec"]
            for choice in chunk.get("choices") or []:
                finish = choice.get("finish_reason") or finish
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    text.append(piece)
    return {"ttft": ttft, "total": time.perf_counter() - t0, "text": "".join(text),
            "n_gen": usage.get("completion_tokens", 0), "n_prompt": usage.get("prompt_tokens", 0),
            "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"), "specdec": extra,
            "finish": finish}


def run_system(label: str, cmd: str, sessions: int, turns: int, n: int, log, play, warm_up=None) -> dict:
    """Start one system, run ``sessions`` conversations at once (``play(url, k, turns, n)``: one
    session's turns), stop it; every turn's figures. ``warm_up(url)`` runs first (by default a
    two-token answer to "Hello": the weights paged in, and a calibration on first use)."""
    server = Server(label, cmd, log)
    try:
        if warm_up is not None:
            warm_up(server.url)
        else:  # warm-up, and a calibration on first use
            stream_turn(server.url, [{"role": "user", "content": "Hello"}], 2)
        results: list[list[dict]] = [[] for _ in range(sessions)]
        t0 = time.perf_counter()
        threads = [threading.Thread(target=lambda k=k: results[k].extend(play(server.url, k, turns, n)))
                   for k in range(sessions)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
    finally:
        server.stop()
    flat = [x for r in results for x in r]
    return {"label": label, "wall": wall, "turns": flat, "n_gen": sum(x["n_gen"] for x in flat)}


def loop_parser(description: str, max_tokens: int | None, log: str, n_help: str = "tokens per answer at most") -> Parser:
    """The options every agent-loop script takes (``max_tokens`` None: the script resolves -n itself)."""
    ap = Parser(description=description)
    ap.add_argument("--system", action="append", required=True, help="LABEL::command line with {port}")
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("-n", "--max-tokens", type=int, default=max_tokens, help=n_help)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--log", default=log, help="the servers' output")
    return ap


def systems_of(ap: Parser, specs: list[str]) -> list[tuple[str, str]]:
    """The ``--system LABEL::command`` options as (label, command); a malformed one is a one-line error."""
    systems = []
    for spec in specs:
        label, sep, cmd = spec.partition("::")
        if not sep or not label.strip() or not cmd.strip():
            ap.error(f"--system {spec!r} is not LABEL::command")
        systems.append((label.strip(), cmd.strip()))
    return systems


def save_runs(path: str | None, args, runs: list[dict]) -> None:
    """Every figure of a side-by-side run, with the options that made it, as JSON (``--json``)."""
    if path:
        with open(path, "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f, indent=1)


def turn_columns(n_turns: int, first: str) -> str:
    """The header of the per-turn columns: the median time to ``first`` (what the turn's first
    streamed piece is called) and the median time of each turn."""
    return " ".join(f"{'t' + str(t) + ' ' + first:>8} {'t' + str(t) + ' total':>9}" for t in range(n_turns))


def turn_cells(turns: list[dict], n_turns: int, key: str) -> str:
    """Those columns for one system's turns, ``key`` naming the time to the first piece."""
    cells = []
    for t in range(n_turns):
        ts = [x for x in turns if x["turn"] == t]
        firsts = [x[key] for x in ts if x[key] is not None]
        cells.append(f"{statistics.median(firsts) if firsts else float('nan'):8.2f} "
                     f"{statistics.median(x['total'] for x in ts):9.2f}")
    return " ".join(cells)


def alternating(systems: list[tuple[str, str]], rounds: int):
    """(round, label, command) for every system each round, the order reversed every other round
    (the machine drifts by +-10% over minutes)."""
    for r in range(rounds):
        for label, cmd in (systems if r % 2 == 0 else systems[::-1]):
            yield r, label, cmd

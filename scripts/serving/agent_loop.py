"""An agent loop against OpenAI-compatible servers, side by side: time to first token and time per turn.

Each session is a scripted coding conversation: the user asks for a file, then each later turn
sends back a tool result (a failing test, a rename request) and asks for the whole file again,
so every turn resends the conversation so far and the answer rewrites text an earlier answer
wrote, which is the shape of an agent editing code. K sessions run at once (threads), greedy.

Two shapes of traffic:

- **fixed** (the default): every answer is cut at ``-n`` tokens (400), so the sessions' turns
  start close together, in phase.
- **out of phase** (``--natural``): answers end where the model ends them (``-n`` is only a
  ceiling, 2048 unless given), session k starts ``k * --stagger`` seconds late, and each session
  waits a while between turns, as a tool runs (up to ``--think`` seconds, the same pseudo-random
  pauses for every system), so one session's next turn arrives while another is still writing.
  This is where a server's time to first token shows: the new turn must be read beside a
  neighbour that decodes.

``--tasks holdout`` runs another set of sessions (other languages and files, other edits), kept
out of every tuning of specdec: a figure from it was not shaped by it. ``--sessions 4`` runs four
sessions, each with its own task.

    python3 scripts/agent_loop.py --rounds 2 --sessions 2 --turns 3 --natural --tasks holdout \\
        --system "llama-2::llama-server -m T -np 2 -c 16384 --port {port} -t 2" \\
        --system "llama-2-ngram16::llama-server -m T -np 2 -c 16384 --port {port} -t 2 --spec-type ngram-mod ..." \\
        --system "specdec::python3 -m specdec_cli serve -t T -d D --port {port}" --json out.json

Every system is a command line with ``{port}``: the script starts it, waits for /health, runs the
sessions, and stops it (SIGINT, then SIGKILL after 60 s). The order of the systems reverses every
other round, since the machine drifts by +-10% over minutes. Reported per system: the median time
to first token of each turn (from the request to the first content chunk), the median time of each
turn, the wall time of all sessions, the tokens generated (from the usage chunk), and the median
time to first token from the second turn on (the turns that arrive while others decode).
"""

from __future__ import annotations

import functools
import json
import os
import random
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx
from script_io import Parser

TASKS = [
    "Write a Python module `inventory.py` with a class `Inventory` that keeps items by SKU (name, quantity, "
    "unit price), with methods add_item, remove_item, restock, total_value and low_stock(threshold), and a "
    "small `if __name__ == \"__main__\":` demo. About 45 lines, type hints, docstrings. Output only the file.",
    "Write a Python module `textstats.py` with functions word_count, sentence_count, average_word_length, "
    "top_words(n) and a `Report` dataclass that collects them for a text, plus a `main()` that reads a file "
    "named on the command line and prints the report. About 45 lines, type hints. Output only the file.",
]
TOOL_TURNS = [
    "Tool output (pytest): 1 failed: the function that removes or counts must raise ValueError on a negative "
    "or empty input, and it does not. Fix it and output the whole file again.",
    "Tool output (review): rename the main class or dataclass to carry a `Stock` or `Text` prefix everywhere, "
    "and add one more method of your choice. Output the whole file again.",
]
TASKS += [  # sessions 3 and 4
    "Write a Python module `todo_store.py` with a `Todo` dataclass (id, title, done, tags) and a `TodoStore` "
    "class that keeps todos in a dict and saves/loads them as JSON, with add, complete, remove, by_tag and "
    "pending methods. About 40 lines, type hints. Output only the file.",
    "Write a Python module `rate_limiter.py` with a token-bucket `RateLimiter` class (capacity, refill rate, "
    "allow(), wait_time()) and a `limited` decorator that uses it, plus a short demo. About 40 lines, type "
    "hints, docstrings. Output only the file.",
]
# the held-out set: never used to tune specdec (other languages, other files, other edits)
HOLDOUT_TASKS = [
    "Write a JavaScript module `cart.js` exporting a class `Cart` with addItem(sku, price, qty), removeItem(sku), "
    "applyCoupon(code) for three fixed coupons, subtotal(), and total() with 8% tax, plus JSDoc comments. "
    "Output only the file.",
    "Write a SQL file `library.sql`: CREATE TABLE statements for authors, books and loans with keys and "
    "constraints, then four queries: overdue loans, books per author, the five most borrowed books, and "
    "members with more than three open loans. Output only the file.",
    "Write a Go file `queue.go` with a generic thread-safe FIFO `Queue[T any]` (Push, Pop, Peek, Len) guarded "
    "by a sync.Mutex, Pop and Peek returning (T, bool), and an `ExampleQueue` function. Output only the file.",
    "Write a Python module `csv_report.py` that reads a CSV of sales (date, region, product, amount) with the "
    "csv module, totals amounts per region and per month, and prints both as aligned text tables; a `main()` "
    "takes the path from argv. Output only the file.",
]
HOLDOUT_TOOL_TURNS = [
    "Tool output (lint): public functions accept invalid arguments silently; each must reject them with an "
    "error the language's way. Fix it and output the whole file again.",
    "Tool output (review): add a one-line comment above each function or statement saying what it does, and "
    "rename one identifier to a clearer name everywhere. Output the whole file again.",
]
TASK_SETS = {"tuning": (TASKS, TOOL_TURNS), "holdout": (HOLDOUT_TASKS, HOLDOUT_TOOL_TURNS)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, label: str, cmd: str, log):
        self.label = label
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(shlex.split(cmd.replace("{port}", str(self.port))), stdout=log, stderr=log,
                                     env={**os.environ, "NO_COLOR": "1"})
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


def session(url: str, k: int, turns: int, n: int, *, tasks: str = "tuning", stagger: float = 0.0,
            think: float = 0.0) -> list[dict]:
    """Session ``k``'s turns: it starts ``k * stagger`` seconds late and pauses before each later turn
    (a tool running) for a time drawn from ``[0, think]`` by its own seed, the same for every system."""
    asks, tool_turns = TASK_SETS[tasks]
    pauses = random.Random(1000 + k)
    messages = [{"role": "user", "content": asks[k % len(asks)]}]
    out = []
    time.sleep(k * stagger)
    for t in range(turns):
        if t > 0:
            time.sleep(pauses.uniform(0.0, think))
            messages.append({"role": "user", "content": tool_turns[(t - 1) % len(tool_turns)]})
        res = stream_turn(url, messages, n)
        messages.append({"role": "assistant", "content": res.pop("text")})
        out.append({"session": k, "turn": t, **res})
    return out


def run_system(label: str, cmd: str, sessions: int, turns: int, n: int, log, play=None, warm_up=None) -> dict:
    """Start one system, run ``sessions`` conversations at once (``play(url, k, turns, n)``: one
    session's turns, this script's coding sessions by default), stop it; every turn's figures."""
    play = play or session
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


def later_ttft(turns: list[dict]) -> float:
    """The median time to first token from each session's second turn on."""
    later = [x["ttft"] for x in turns if x["turn"] > 0 and x["ttft"] is not None]
    return statistics.median(later) if later else float("nan")


def alternating(systems: list[tuple[str, str]], rounds: int):
    """(round, label, command) for every system each round, the order reversed every other round
    (the machine drifts by +-10% over minutes)."""
    for r in range(rounds):
        for label, cmd in (systems if r % 2 == 0 else systems[::-1]):
            yield r, label, cmd


def main() -> int:
    ap = loop_parser(__doc__.splitlines()[0], None, "/tmp/agent_loop.log",
                     "tokens per answer: where fixed answers are cut (400); a ceiling under --natural (2048)")
    ap.add_argument("--natural", action="store_true",
                    help="answers end where the model ends them, sessions out of phase (--stagger, --think)")
    ap.add_argument("--stagger", type=float, default=None, help="seconds between sessions' starts (--natural: 3)")
    ap.add_argument("--think", type=float, default=None,
                    help="most seconds a session pauses between turns (--natural: 2)")
    ap.add_argument("--tasks", choices=sorted(TASK_SETS), default="tuning",
                    help="the sessions' tasks: the tuning set, or the held-out set never tuned on")
    args = ap.parse_args()
    n = args.max_tokens or (2048 if args.natural else 400)
    stagger = args.stagger if args.stagger is not None else (3.0 if args.natural else 0.0)
    think = args.think if args.think is not None else (2.0 if args.natural else 0.0)
    if stagger < 0 or think < 0 or n < 1:
        ap.error("--stagger and --think take seconds of at least 0, -n a count of at least 1")
    play = functools.partial(session, tasks=args.tasks, stagger=stagger, think=think)
    systems = systems_of(ap, args.system)
    runs: list[dict] = []
    with open(args.log, "w") as log:
        for r, label, cmd in alternating(systems, args.rounds):
            res = run_system(label, cmd, args.sessions, args.turns, n, log, play=play)
            res["round"] = r
            runs.append(res)
            cut = sum(x["finish"] == "length" for x in res["turns"])
            print(f"round {r} {label:<20} wall {res['wall']:8.2f} s  tokens {res['n_gen']:5d}  "
                  f"ttft (turn 2+) median {later_ttft(res['turns']):6.2f} s  cut at -n: {cut}", flush=True)
    print()
    print(f"{'system':<20} {'wall s (mean)':>14} {'tokens':>7} {'ttft 2+':>8} " + turn_columns(args.turns, "ttft"))
    for label, _ in systems:
        mine = [x for x in runs if x["label"] == label]
        turns = [t for x in mine for t in x["turns"]]
        print(f"{label:<20} {statistics.mean(x['wall'] for x in mine):14.2f} "
              f"{round(statistics.mean(x['n_gen'] for x in mine)):7d} {later_ttft(turns):8.2f} "
              + turn_cells(turns, args.turns, "ttft"))
    save_runs(args.json, args, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

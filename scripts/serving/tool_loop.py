"""A tool-calling agent loop against OpenAI-compatible servers, side by side: valid calls and time.

Each session is a coding agent editing one file through a ``write_file(path, content)`` tool:
the user gives the file and asks for one change, the model must call the tool with the whole
new file (``tool_choice: "required"``), the client answers with a tool result and the next
change, and so on. Every turn resends the conversation, its earlier calls included, so the
answer copies a file an earlier call wrote (or the user gave), with one change: the shape of
an agent's edit loop. K sessions run at once (threads), greedy; replies end where the call
ends.

    python3 scripts/serving/tool_loop.py --rounds 2 \\
        --system "specdec::python3 -m specdec_cli serve -t T -d D --port {port} --ctx 8192" \\
        --system "specdec-nodraft::python3 -m specdec_cli serve -t T --no-draft --port {port} --ctx 8192" \\
        --system "llama-jinja::llama-server -m T --jinja -np 2 -c 16384 --port {port} -t 2" \\
        --system "llama-jinja-ngram16::llama-server -m T --jinja -np 2 -c 16384 --port {port} -t 2 \\
            --spec-type ngram-mod --spec-ngram-mod-n-match 8 --spec-ngram-mod-n-max 16 --spec-ngram-mod-n-min 1"

With ``--read-first`` each turn is sent as coding agents send it: the ask, then an assistant
turn calling ``read_file`` and the tool's answer with the file as it stands, then the request
with ``read_file``, ``write_file`` and ``run_tests`` offered (the history that once made a
drafted copy of the ``read_file`` call's JSON meet the ``write_file`` grammar). The calls each
system made are written to ``--json``, so their identity across systems can be checked.

Systems start, run and stop as in ``agent_loop.py`` (the order reverses every other round).
Reported per system: calls that are valid (the tool named, arguments that parse, with a string
``path`` and ``content``), the wall time of all sessions, each turn's median time, the time to
the first streamed delta, and the tokens generated. A turn without a valid call goes on with
its text as the assistant's message, as an agent framework would, and the next change.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared.systems import (  # noqa: E402
    alternating,
    loop_parser,
    run_system,
    save_runs,
    systems_of,
    turn_cells,
    turn_columns,
)

TOOL = {"type": "function", "function": {
    "name": "write_file", "description": "Write a file: its whole new content replaces the old.",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "The file's path."},
        "content": {"type": "string", "description": "The whole new content of the file."}},
        "required": ["path", "content"]}}}
READ = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file: its whole content.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "The file's path."}},
                   "required": ["path"]}}}
TESTS = {"type": "function", "function": {
    "name": "run_tests", "description": "Run the project's tests.", "parameters": {"type": "object", "properties": {}}}}
SYSTEM = ("You are a coding agent. You change files only by calling write_file with the file's whole new "
          "content; never answer with text.")

FILES = {
    "inventory.py": '''"""A small inventory of stock items, kept by SKU."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Item:
    name: str
    quantity: int
    unit_price: float


class Inventory:
    """Items by SKU, with their quantities and prices."""

    def __init__(self) -> None:
        self.items: dict[str, Item] = {}

    def add_item(self, sku: str, name: str, quantity: int, unit_price: float) -> None:
        if sku in self.items:
            raise KeyError(f"{sku} is already in the inventory")
        self.items[sku] = Item(name, quantity, unit_price)

    def remove_item(self, sku: str) -> Item:
        return self.items.pop(sku)

    def restock(self, sku: str, quantity: int) -> None:
        if quantity <= 0:
            raise ValueError("restock needs a positive quantity")
        self.items[sku].quantity += quantity

    def total_value(self) -> float:
        return sum(i.quantity * i.unit_price for i in self.items.values())

    def low_stock(self, threshold: int) -> list[str]:
        return [sku for sku, i in self.items.items() if i.quantity < threshold]


if __name__ == "__main__":
    inv = Inventory()
    inv.add_item("A1", "bolt", 120, 0.05)
    inv.add_item("B2", "nut", 8, 0.03)
    inv.restock("B2", 50)
    print(f"total value: {inv.total_value():.2f}")
    print("low stock:", inv.low_stock(20))
''',
    "textstats.py": '''"""Word and sentence statistics of a text file."""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass

WORD = re.compile(r"[A-Za-z']+")


def word_count(text: str) -> int:
    return len(WORD.findall(text))


def sentence_count(text: str) -> int:
    return len([s for s in re.split(r"[.!?]+", text) if s.strip()])


def average_word_length(text: str) -> float:
    words = WORD.findall(text)
    return sum(len(w) for w in words) / len(words) if words else 0.0


def top_words(text: str, n: int) -> list[tuple[str, int]]:
    return Counter(WORD.findall(text)).most_common(n)


@dataclass
class Report:
    words: int
    sentences: int
    average_length: float
    top: list[tuple[str, int]]


def report(text: str, n: int = 5) -> Report:
    return Report(word_count(text), sentence_count(text), average_word_length(text), top_words(text, n))


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        r = report(f.read())
    print(f"{r.words} words, {r.sentences} sentences, {r.average_length:.2f} letters a word")
    for word, count in r.top:
        print(f"{word}: {count}")


if __name__ == "__main__":
    main()
''',
}
CHANGES = {
    "inventory.py": ["Rename the method `restock` to `replenish` everywhere, its error message included.",
                     "Make `low_stock` return the SKUs sorted by quantity, lowest first.",
                     "Add a `__len__` method to `Inventory` that returns the number of items."],
    "textstats.py": ["Rename the function `word_count` to `count_words` everywhere.",
                     "Make `top_words` count words without regard to case.",
                     "Make `main` print the number of distinct words too."],
}


def stream_turn(url: str, messages: list[dict], n: int, tools: tuple[dict, ...] = (TOOL,)) -> dict:
    """One streamed request with a tool required: the assembled call (or text), times, tokens."""
    body = {"model": "local", "messages": messages, "tools": list(tools), "tool_choice": "required", "max_tokens": n,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}, "cache_prompt": True}
    t0 = time.perf_counter()
    first, text, calls, usage, finish, extra = None, [], {}, {}, None, {}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=3600) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            extra = chunk.get("specdec") or extra  # specdec's own figures (drafters, passes); others send none
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                finish = choice.get("finish_reason") or finish
                if (delta.get("content") or delta.get("tool_calls")) and first is None:
                    first = time.perf_counter() - t0
                text.append(delta.get("content") or "")
                for d in delta.get("tool_calls") or []:
                    c = calls.setdefault(d.get("index", 0), {"id": None, "name": "", "arguments": ""})
                    c["id"] = c["id"] or d.get("id")
                    fn = d.get("function") or {}
                    c["name"] += fn.get("name") or ""
                    c["arguments"] += fn.get("arguments") or ""
    return {"first": first, "total": time.perf_counter() - t0, "text": "".join(text),
            "calls": [calls[k] for k in sorted(calls)], "finish": finish,
            "n_gen": usage.get("completion_tokens", 0), "n_prompt": usage.get("prompt_tokens", 0),
            "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"), "specdec": extra}


def valid(call: dict, path: str) -> bool:
    try:
        args = json.loads(call["arguments"])
    except ValueError:
        return False
    return (call["name"] == "write_file" and isinstance(args, dict) and args.get("path") == path
            and isinstance(args.get("content"), str) and len(args["content"]) > 100)


def session(url: str, k: int, turns: int, n: int, read_first: bool = False) -> list[dict]:
    path = list(FILES)[k % len(FILES)]
    if read_first:
        return read_first_session(url, k, path, turns, n)
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"{CHANGES[path][0]} Then save the whole new `{path}` with the "
                                            f"write_file tool.\n\n`{path}`:\n```python\n{FILES[path]}```"}]
    out = []
    for t in range(turns):
        if t > 0:
            messages.append({"role": "user", "content": f"{CHANGES[path][t % len(CHANGES[path])]} Then save the "
                                                        f"whole new `{path}` with the write_file tool."})
        res = stream_turn(url, messages, n)
        ok = [c for c in res["calls"] if valid(c, path)]
        if ok:
            call = ok[0]
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call["id"] or f"call_{k}_{t}", "type": "function",
                 "function": {"name": call["name"], "arguments": call["arguments"]}}]})
            size = len(json.loads(call["arguments"])["content"].encode())
            messages.append({"role": "tool", "tool_call_id": call["id"] or f"call_{k}_{t}",
                             "content": f"wrote {path} ({size} bytes)"})
        else:
            messages.append({"role": "assistant", "content": res["text"] or "(no answer)"})
        out.append({"session": k, "turn": t, "valid": bool(ok), **{x: res[x] for x in res if x != "calls"},
                    "call": ok[0] if ok else (res["calls"][0] if res["calls"] else None)})
    return out


def read_first_session(url: str, k: int, path: str, turns: int, n: int) -> list[dict]:
    """``--read-first``: each turn reads the file through a ``read_file`` call and its result, then
    asks for the write; the file a valid call wrote is what the next turn reads."""
    messages = [{"role": "system", "content": SYSTEM}]
    current, out = FILES[path], []
    for t in range(turns):
        read_id = f"read_{k}_{t}"
        messages += [{"role": "user", "content": f"{CHANGES[path][t % len(CHANGES[path])]} The file is `{path}`: "
                                                 "read it, then save the whole new file with write_file."},
                     {"role": "assistant", "content": None, "tool_calls": [{"id": read_id, "type": "function",
                      "function": {"name": "read_file", "arguments": json.dumps({"path": path})}}]},
                     {"role": "tool", "tool_call_id": read_id, "content": current}]
        res = stream_turn(url, messages, n, (READ, TOOL, TESTS))
        ok = [c for c in res["calls"] if valid(c, path)]
        if ok:
            call, write_id = ok[0], f"write_{k}_{t}"
            current = json.loads(call["arguments"])["content"]
            messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": write_id, "type": "function",
                          "function": {"name": call["name"], "arguments": call["arguments"]}}]},
                         {"role": "tool", "tool_call_id": write_id, "content": f"wrote {path}"}]
        else:
            messages.append({"role": "assistant", "content": res["text"] or "(no answer)"})
        out.append({"session": k, "turn": t, "valid": bool(ok), **{x: res[x] for x in res if x != "calls"},
                    "call": ok[0] if ok else (res["calls"][0] if res["calls"] else None), "calls": res["calls"]})
    return out


def main() -> int:
    ap = loop_parser(__doc__.splitlines()[0], 1000, "/tmp/tool_loop.log")
    ap.add_argument("--read-first", action="store_true",
                    help="each turn reads the file through a read_file call and its result first")
    args = ap.parse_args()
    play = functools.partial(session, read_first=args.read_first)
    systems = systems_of(ap, args.system)
    runs: list[dict] = []
    warm = lambda url: stream_turn(url, [{"role": "user", "content": "Write hello.py printing hello."}], 40)  # noqa: E731
    with open(args.log, "w") as log:
        for r, label, cmd in alternating(systems, args.rounds):
            res = run_system(label, cmd, args.sessions, args.turns, args.max_tokens, log, play, warm)
            res["round"], res["n_valid"] = r, sum(x["valid"] for x in res["turns"])
            runs.append(res)
            print(f"round {r} {label:<22} wall {res['wall']:8.2f} s  valid calls {res['n_valid']}/"
                  f"{len(res['turns'])}  tokens {res['n_gen']:5d}", flush=True)
    print()
    print(f"{'system':<22} {'valid':>7} {'wall s (mean)':>14} {'tokens':>7} " + turn_columns(args.turns, "first"))
    for label, _ in systems:
        mine = [x for x in runs if x["label"] == label]
        turns = [t for x in mine for t in x["turns"]]
        print(f"{label:<22} {sum(x['n_valid'] for x in mine):3d}/{len(turns):<3d} "
              f"{statistics.mean(x['wall'] for x in mine):14.2f} "
              f"{round(statistics.mean(x['n_gen'] for x in mine)):7d} " + turn_cells(turns, args.turns, "first"))
    save_runs(args.json, args, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""native_compare.py's session mode: K concurrent multi-turn chats against llama-server.

Each turn resends the whole conversation to /v1/chat/completions (streamed, temperature 0); per
turn the time to the first content token, the total time and how much of the prompt came from
the slot's cache. The full description is ``native_compare.py``'s docstring.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _shared.llama_server import Server, ServerConfig, common_server_args, logs_folder, resolve_models, spec_list
from _shared.script_io import Parser, median_or_nan, print_header

from .prompts import first_messages

FOLLOW_UPS = [  # session mode's later user turns, in turn order (cycled)
    "Now make it shorter and explain the key step in one sentence.",
    "Add error handling for bad input and show the full result again.",
    "Summarise what you did so far as a bulleted list.",
]


def _stream_chat(url: str, payload: dict) -> dict:
    """One streamed /v1/chat/completions turn: its text, time to first token, total time, timings."""
    data = json.dumps({**payload, "stream": True}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=data, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft, parts, timings, usage = None, [], {}, {}
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line.startswith("data:"):
                continue
            body = line[5:].strip()
            if body == "[DONE]":
                break
            chunk = json.loads(body)
            for ch in chunk.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    parts.append(piece)
            timings = chunk.get("timings") or timings
            usage = chunk.get("usage") or usage
    total = time.perf_counter() - t0
    return {"text": "".join(parts), "ttft": ttft, "total": total, "timings": timings,
            "n_gen": timings.get("predicted_n", usage.get("completion_tokens", 0))}


def session_main(argv: list[str]) -> int:
    ap = Parser(
        prog="native_compare.py session",
        description="agent-loop shape: K concurrent multi-turn chats, each turn resending the whole conversation")
    common_server_args(ap)
    ap.add_argument("--sessions", type=int, default=4, help="concurrent conversations (K)")
    ap.add_argument("--turns", type=int, default=3, help="user turns per conversation")
    ap.add_argument("--np", type=int, default=0, help="server slots (default: --sessions)")
    ap.add_argument("--spec", default="none", help="one server speculation setting: none, ngramK or draft")
    args = ap.parse_args(argv)
    spec = spec_list(args.spec)
    if len(spec) != 1:
        sys.exit("error: session mode takes one --spec setting.")
    resolve_models(args, spec[0] == "draft")
    log_dir, tmp = logs_folder(args)
    cfg = ServerConfig(args.np or args.sessions, spec[0])
    firsts = first_messages(args.prompts_file)

    def conversation(k: int, url: str) -> list[dict]:
        msgs = list(firsts[k % len(firsts)])
        turns = []
        for t in range(args.turns):
            if t > 0:
                msgs.append({"role": "user", "content": FOLLOW_UPS[(t - 1) % len(FOLLOW_UPS)]})
            res = _stream_chat(url, {"messages": msgs, "max_tokens": args.max_tokens, "temperature": 0,
                                     "cache_prompt": args.cache_prompt == "on", "seed": args.seed})
            msgs.append({"role": "assistant", "content": res["text"]})
            tm = res["timings"]
            turns.append({"session": k, "turn": t, "ttft": res["ttft"], "total": res["total"], "n_gen": res["n_gen"],
                          "prompt_n": tm.get("prompt_n"), "cache_n": tm.get("cache_n"),
                          "draft_n": tm.get("draft_n", 0), "draft_n_accepted": tm.get("draft_n_accepted", 0)})
        return turns

    print(f"target {Path(args.target).name}; {cfg.label}; {args.sessions} sessions x {args.turns} turns, "
          f"-n {args.max_tokens}, cache_prompt {args.cache_prompt}, threads {args.threads}, ctx {args.ctx}/slot")
    with Server(args, cfg, log_dir / "session-server.log") as server:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.sessions) as pool:
            results = [x for f in [pool.submit(conversation, k, server.url) for k in range(args.sessions)]
                       for x in f.result()]
        wall = time.perf_counter() - t0
    hdr = f"{'turn':>4} {'ttft med s':>10} {'ttft max s':>10} {'total med s':>11} {'gen':>6} {'prompt_n':>8} {'cache_n':>8}"
    print_header(hdr)
    for t in range(args.turns):
        rows = [x for x in results if x["turn"] == t]
        ttfts = [x["ttft"] for x in rows if x["ttft"] is not None]
        print(f"{t:>4} {median_or_nan(ttfts):>10.3f} {max(ttfts, default=float('nan')):>10.3f} "
              f"{median_or_nan(x['total'] for x in rows):>11.3f} {sum(x['n_gen'] for x in rows):>6} "
              f"{median_or_nan(x['prompt_n'] for x in rows):>8.0f} {median_or_nan(x['cache_n'] for x in rows):>8.0f}")
    n_gen = sum(x["n_gen"] for x in results)
    print("-" * len(hdr))
    print(f"{n_gen} tokens in {wall:.2f} s: {n_gen / wall:.2f} tok/s over all sessions "
          f"(prompt_n/cache_n: medians of prompt tokens computed / reused from the slot's cache)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "wall": wall,
                                               "turns": results, "cmd": shlex.join(server.cmd)}, indent=1))
    if tmp is not None:
        tmp.cleanup()
    return 0

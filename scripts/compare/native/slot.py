"""native_compare.py's slot mode: one at a time, specdec's target alone against llama-server's single slot.

Both loaded once; each prompt goes to both, in an order that flips every prompt and every round;
the ratios of the summed prompt, decode and whole-request times. The full description is
``native_compare.py``'s docstring.
"""

from __future__ import annotations

import json
import shlex
import statistics
import sys
import time
from pathlib import Path

from _shared.llama_server import Server, ServerConfig, common_server_args, completion, logs_folder, resolve_models
from _shared.script_io import Parser, print_header, same_text

from .prompts import load_prompts
from .speculative import engine_options, warmed_up


def slot_main(argv: list[str]) -> int:
    ap = Parser(
        prog="native_compare.py slot",
        description="one at a time: specdec's target alone against llama-server's single slot, interleaved per prompt")
    common_server_args(ap)
    ap.add_argument("--rounds", type=int, default=2, help="passes over the prompts; the order flips every round")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        sys.exit("error: --rounds must be at least 1.")
    args.cache_prompt = "off"  # every request reads its whole prompt, as specdec's one-at-a-time path does
    resolve_models(args, False)
    from specdec_cli.engine.decode.engine import Engine, GenOptions

    log_dir, tmp = logs_folder(args)
    prompts = load_prompts(args.prompts_file, args.target)
    engine = Engine(args.target, None, options=engine_options(args))
    encoded = warmed_up(engine, prompts)  # as the server is
    base = {"n_predict": args.max_tokens, "temperature": 0, "cache_prompt": False, "seed": args.seed}

    def server_side(url: str, text: str) -> dict:
        a = completion(url, {**base, "prompt": text})
        t = a["body"].get("timings") or {}
        return {"prompt_s": t.get("prompt_ms", 0.0) / 1000, "decode_s": t.get("predicted_ms", 0.0) / 1000,
                "whole_s": a["t_recv"] - a["t_send"], "n_gen": int(t.get("predicted_n", 0)),
                "n_prompt": int(t.get("prompt_n", 0)), "text": a["body"].get("content", "")}

    def specdec_side(tokens: list[int]) -> dict:
        w0 = time.perf_counter()
        r = engine.generate(tokens, GenOptions(max_tokens=args.max_tokens))
        s = r.stats
        return {"prompt_s": s.prompt_seconds, "decode_s": s.decode_seconds, "whole_s": time.perf_counter() - w0,
                "n_gen": s.n_generated, "n_prompt": s.n_prompt, "text": r.text}

    print(f"target {Path(args.target).name}; llama-server 1 slot, no speculation, cache_prompt off; "
          f"{len(prompts)} prompts x {args.rounds} rounds, greedy, -n {args.max_tokens}, threads {args.threads}, "
          f"ctx {args.ctx}, batch {args.batch}, fa {args.flash_attn}, kv {args.cache_type_k}/{args.cache_type_v}")
    hdr = (f"{'round':>5} {'prompt':<14} {'tok':>5} {'gen':>4}  {'server p/d s':>13}  {'specdec p/d s':>13}  "
           f"{'whole ratio':>11}  output")
    print_header(hdr)
    rows = []
    with Server(args, ServerConfig(1, "none"), log_dir / "slot-server.log") as server:
        for r in range(args.rounds):
            for i, ((name, text), tokens) in enumerate(zip(prompts, encoded)):
                server_first = (i + r) % 2 == 0
                if server_first:
                    srv, spd = server_side(server.url, text), specdec_side(tokens)
                else:
                    spd, srv = specdec_side(tokens), server_side(server.url, text)
                if srv["n_prompt"] != spd["n_prompt"]:
                    print(f"warning: {name}: the server read {srv['n_prompt']} prompt tokens, specdec "
                          f"{spd['n_prompt']}", file=sys.stderr)
                # per token, since the server may emit a token or two more or fewer (end of generation)
                ratio = (srv["whole_s"] / max(srv["n_gen"], 1)) / (spd["whole_s"] / max(spd["n_gen"], 1))
                rows.append({"round": r, "prompt": name, "server": srv, "specdec": spd, "ratio": ratio})
                print(f"{r:>5} {name:<14} {spd['n_prompt']:>5} {spd['n_gen']:>4}  "
                      f"{srv['prompt_s']:>6.2f}/{srv['decode_s']:<6.2f}  {spd['prompt_s']:>6.2f}/{spd['decode_s']:<6.2f}  "
                      f"{ratio:>11.3f}  {same_text(srv['text'], spd['text'])}")
                sys.stdout.flush()
    engine.close()

    def total(side: str, key: str) -> float:
        return sum(x[side][key] for x in rows)

    gen = {side: total(side, "n_gen") for side in ("server", "specdec")}
    print("-" * len(hdr))
    print("specdec speed / server speed (summed over all prompts and rounds; > 1: specdec faster):")
    print(f"  prompt reading  {total('server', 'prompt_s') / total('specdec', 'prompt_s'):.3f}")
    print(f"  decoding        {(gen['specdec'] / total('specdec', 'decode_s')) / (gen['server'] / total('server', 'decode_s')):.3f}"
          f"  ({gen['specdec'] / total('specdec', 'decode_s'):.2f} against {gen['server'] / total('server', 'decode_s'):.2f} tok/s)")
    print(f"  whole requests  {(gen['specdec'] / total('specdec', 'whole_s')) / (gen['server'] / total('server', 'whole_s')):.3f}"
          f"  (generated tokens per second of request; median per prompt {statistics.median(x['ratio'] for x in rows):.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows,
                                               "cmd": shlex.join(server.cmd)}, indent=1))
    if tmp is not None:
        tmp.cleanup()
    return 0

"""Flash attention on against off, one prompt at a time, interleaved per prompt.

llama.cpp's ``--flash-attn auto`` turns it on wherever the backend has the kernel, a CPU
included. Which is faster on a CPU depends on the CPU and on the depth of the context
(ggml-org/llama.cpp#27086), and specdec does not decide it for you, so this script measures it
on your machine, for your prompts: two engines over the same model files, one with flash
attention on and one with it off, each prompt run on both in an order reversed every other
prompt (this machine's speed drifts by several per cent over minutes). Per prompt it prints
prompt-reading seconds and decode tokens per second (after the prompt) of each, and whether
the texts are the same (the two attention kernels round differently, so a near-tie can flip);
the summary gives, per set, the median and range of off/on in decode speed, and off/on in
prompt-reading speed over the whole set.

    python scripts/checks/flash_attn_compare.py [--sets edit,agent,code] [-n 300] [--method auto|none] [--json OUT]

``--method auto`` (the default) runs what ``specdec run -t T`` runs, the draft beside the
target, a fresh auto for every prompt; ``none`` is the target alone.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared.fresh_auto import BASE, BESIDE, run_specdec  # noqa: E402
from _shared.prompt_sets import load_sets  # noqa: E402
from _shared.script_io import Parser, by_set, demo_models, one_line_errors, positive, write_json  # noqa: E402

from specdec_cli.engine.decode.engine import AUTO_DRAFT_MAX, DraftOptions, Engine, EngineOptions, GenOptions  # noqa: E402

MODES = ("on", "off")


def main() -> int:
    return one_line_errors(compare)


def compare() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", help="target GGUF (default: the pinned demo target)")
    ap.add_argument("--draft", help="draft GGUF (default: the pinned demo draft)")
    ap.add_argument("--sets", default="edit,agent,code", help="comma-separated bench scenarios and JSONL files")
    ap.add_argument("-n", "--max-tokens", type=positive, default=300)
    ap.add_argument("--ctx", type=positive, default=4096)
    ap.add_argument("--method", choices=("auto", "none"), default="auto")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    demo_models(args)
    prompts = load_sets(args.sets)
    engines, drafters = {}, {}
    for fa in MODES:
        eng = Engine(str(args.target), str(args.draft), options=EngineOptions(n_ctx=args.ctx, flash_attn=fa),
                     draft=DraftOptions(draft_max=AUTO_DRAFT_MAX), method="auto", warn=print)
        drafters[fa] = eng.drafters["auto"].model
        eng.ensure_costs()
        eng.generate(eng.tokenize_prompt("hello"), GenOptions(max_tokens=4), use_draft=False)  # warm-up
        engines[fa] = eng
    print(f"{len(prompts)} prompts, -n {args.max_tokens}, method {args.method}; flash attention on against off",
          flush=True)
    rows = []
    for i, (set_name, pid, messages) in enumerate(prompts):
        row = {"set": set_name, "id": pid}
        for fa in (MODES if i % 2 == 0 else MODES[::-1]):
            eng = engines[fa]
            tokens = eng.tokenize_prompt(eng.render_chat(messages))
            row["n_prompt"] = len(tokens)
            row[fa] = run_specdec(eng, tokens, args.max_tokens, BASE if args.method == "none" else BESIDE, drafters[fa])
        on_tps, off_tps = row["on"]["tps"] or 0.0, row["off"]["tps"] or 0.0
        row["ratio"] = off_tps / on_tps if on_tps and off_tps else None  # nothing decoded: no ratio
        rows.append(row)
        on, off = row["on"], row["off"]
        print(f"{set_name:<10} {pid:<12} prompt {row['n_prompt']:5d} tok | reading on {on['prompt_s']:6.2f} s "
              f"off {off['prompt_s']:6.2f} s | decode on {on_tps:6.2f} off {off_tps:6.2f} tok/s | "
              f"off/on {row['ratio'] or float('nan'):.3f} | same text {on['text'] == off['text']}", flush=True)
    print()
    for set_name, rs in by_set(rows):
        xs = [r["ratio"] for r in rs if r["ratio"] is not None] or [float("nan")]
        read = sum(r["on"]["prompt_s"] for r in rs) / sum(r["off"]["prompt_s"] for r in rs)  # a speed, as decode's
        print(f"{set_name:<10} decode off/on median {statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f}), "
              f"prompt reading speed off/on {read:.3f}, prompts {min(r['n_prompt'] for r in rs)}-"
              f"{max(r['n_prompt'] for r in rs)} tokens")
    if args.json:
        for r in rows:
            for fa in MODES:
                r[fa] = {k: r[fa][k] for k in ("tps", "prompt_s", "n")}
        return write_json(args.json, {"args": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Copy-heavy prompts: specdec's auto against the target alone and llama.cpp's n-gram modes, prompt by prompt.

For every prompt of the chosen sets (bench scenarios by name, or JSONL files such as
scripts/data/copy_holdout.jsonl), in one run and interleaved:

  target alone     specdec, no draft (the baseline of every ratio)
  auto, beside     ``specdec run -t T`` as a user runs it: auto with the draft model beside the target
  auto, no draft   auto with no draft model found (the suffix index and the edit tracker only)
  llama.cpp modes  one llama-server per mode of --servers (ngramK: ngram-mod with n-match 8 and
                   n-max K; ngram-simple at llama.cpp's defaults), 1 slot, no prompt cache, fed the
                   same chat-rendered prompt text at temperature 0

Each auto generation starts from a fresh drafter (no rules, pool or calibration from another
prompt, as a new ``specdec run`` process starts), and each llama-server is started afresh for
every prompt (ngram-mod keeps one pool for the server's life), so neither side learns from an
earlier prompt or round. Speeds are decode tokens per second on both sides (specdec's
``tokens_per_second``; the server's predicted_n / predicted_ms). With --rounds R every prompt
runs R times, the order of the systems reversed every other run, and a prompt's ratio is the
median over its rounds. The summary gives, per set, each system's median ratio to the target
alone (min-max in brackets) and auto's median over llama.cpp's best mode (the mode with the
highest median in that set); outputs are compared with the target alone's on their common length.

    scripts/build_native.sh llama-server     # once
    python scripts/compare/edit_check.py [--sets edit,scripts/data/copy_holdout.jsonl] [-n 256] [--rounds 1] \\
        [--servers ngram4,ngram16,ngram-simple] [--json OUT]

General scenarios, the regression check (no servers, three rounds):

    python scripts/compare/edit_check.py --sets code,json,qa,creative -n 128 --rounds 3 --servers ""
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared import DATA  # noqa: E402
from _shared.fresh_auto import ALONE, BASE, BESIDE, run_specdec  # noqa: E402
from _shared.llama_server import (  # noqa: E402
    Server,
    ServerConfig,
    common_server_args,
    completion,
    logs_folder,
    resolve_models,
    spec_list,
)
from _shared.prompt_sets import load_sets  # noqa: E402
from _shared.script_io import Parser, same_text  # noqa: E402

from specdec_cli.engine.decode.engine import AUTO_DRAFT_MAX, DraftOptions, Engine, EngineOptions, GenOptions  # noqa: E402


def run_server(args, spec: str, text: str, n_prompt: int, log: Path) -> dict:
    with Server(args, ServerConfig(1, spec), log) as srv:
        a = completion(srv.url, {"prompt": text, "n_predict": args.max_tokens, "temperature": 0,
                                 "cache_prompt": False, "seed": args.seed})
    b = a["body"]
    t = b.get("timings") or {}
    n, ms = int(t.get("predicted_n", 0)), float(t.get("predicted_ms", 0.0))
    got = int(t.get("prompt_n", 0)) + int(t.get("cache_n", 0))
    if got != n_prompt:
        print(f"  note: llama-server counted {got} prompt tokens, specdec {n_prompt}", flush=True)
    return {"tps": n / ms * 1000 if ms > 0 else 0.0, "n": n, "text": b.get("content", ""),
            "drafted": t.get("draft_n", 0), "accepted": t.get("draft_n_accepted", 0)}


def _fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})" if xs else "-"


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    common_server_args(ap)
    ap.set_defaults(max_tokens=256, ctx=4096, cache_prompt="off")
    ap.add_argument("--sets", default=f"edit,{DATA / 'copy_holdout.jsonl'}",
                    help="comma-separated bench scenarios and JSONL files")
    ap.add_argument("--servers", default="ngram4,ngram16,ngram-simple",
                    help='llama-server modes, comma-separated (ngramK, ngram-simple, none); "" for none')
    ap.add_argument("--ids", help="only these prompt ids (comma-separated)")
    ap.add_argument("--no-alone", action="store_true", help="leave out auto with no draft model")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    servers = spec_list(args.servers) if args.servers.strip() else []
    resolve_models(args, need_draft=True)
    log_dir, _tmp = logs_folder(args)
    prompts = load_sets(args.sets)
    if args.ids:
        wanted = set(args.ids.split(","))
        prompts = [p for p in prompts if p[1] in wanted]
    if not prompts:
        sys.exit(f"error: no prompt of {args.sets!r} has an id in --ids {args.ids!r}.")

    eng = Engine(str(args.target), str(args.draft), options=EngineOptions(n_ctx=args.ctx),
                 draft=DraftOptions(draft_max=AUTO_DRAFT_MAX), method="auto", warn=print)
    model_drafter = eng.drafters["auto"].model
    eng.ensure_costs()
    eng.generate(eng.tokenize_prompt("hello"), GenOptions(max_tokens=4), use_draft=False)  # warm-up
    systems = [BASE, BESIDE] + ([] if args.no_alone else [ALONE]) + [f"llama.cpp {s}" for s in servers]
    print(f"{len(prompts)} prompts, -n {args.max_tokens}, {args.rounds} round(s); systems: {', '.join(systems)}",
          flush=True)

    rows = []
    t0 = time.monotonic()
    for i, (set_name, pid, messages) in enumerate(prompts):
        text = eng.render_chat(messages)
        tokens = eng.tokenize_prompt(text)
        runs: dict[str, list[dict]] = {s: [] for s in systems}
        for rnd in range(args.rounds):
            order = systems if (i + rnd) % 2 == 0 else systems[::-1]
            for sysname in order:
                if sysname.startswith("llama.cpp "):
                    spec = sysname.split(" ", 1)[1]
                    got = run_server(args, spec, text, len(tokens), log_dir / f"{pid}-{spec}-{rnd}.log")
                else:
                    got = run_specdec(eng, tokens, args.max_tokens, sysname, model_drafter)
                runs[sysname].append(got)
        base_tps = [r["tps"] for r in runs[BASE]]
        row = {"set": set_name, "id": pid, "n_prompt": len(tokens), "systems": {}}
        for sysname, rs in runs.items():
            ratios = [r["tps"] / b for r, b in zip(rs, base_tps)]
            row["systems"][sysname] = {
                "ratio": statistics.median(ratios), "ratios": ratios, "tps": [r["tps"] for r in rs],
                "n": [r["n"] for r in rs], "drafted": sum(r["drafted"] for r in rs),
                "accepted": sum(r["accepted"] for r in rs), "substituted": sum(r.get("substituted", 0) for r in rs),
                "split": rs[-1].get("split"), "output": same_text(runs[BASE][0]["text"], rs[0]["text"]),
            }
        rows.append(row)
        cells = " | ".join(f"{s} {v['ratio']:.2f}x" + ("" if v["output"] == "same" else f" ({v['output']})")
                           for s, v in row["systems"].items() if s != BASE)
        print(f"{set_name:14} {pid:22} base {statistics.median(base_tps):5.2f} tok/s | {cells}"
              f" | subst {row['systems'][BESIDE]['substituted']}/{row['systems'][BESIDE]['accepted']}"
              f" [{time.monotonic() - t0:.0f} s]", flush=True)

    print("\nmedian decode tok/s ratio to the target alone, per set (min-max):")
    summary = {}
    for set_name in dict.fromkeys(r["set"] for r in rows):
        mine = [r for r in rows if r["set"] == set_name]
        med = {s: [r["systems"][s]["ratio"] for r in mine] for s in systems}
        summary[set_name] = {s: statistics.median(v) for s, v in med.items()}
        print(f"  {set_name} ({len(mine)} prompts)")
        for s in systems[1:]:
            print(f"    {s:24} {_fmt(med[s])}")
        natives = [s for s in systems if s.startswith("llama.cpp ")]
        if natives:
            best = max(natives, key=lambda s: summary[set_name][s])
            for s in (x for x in (BESIDE, ALONE) if x in systems):
                print(f"    {s} over {best} (llama.cpp's best here): "
                      f"{summary[set_name][s] / summary[set_name][best]:.2f}x")
    every = {s: [r["systems"][s]["ratio"] for r in rows] for s in systems}
    print(f"  all ({len(rows)} prompts): " + " | ".join(f"{s} {_fmt(every[s])}" for s in systems[1:]))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                               "cost_model": eng.costs.to_dict(), "rows": rows,
                                               "summary": summary}, indent=1) + "\n")
    eng.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

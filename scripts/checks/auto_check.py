"""Does run's default (auto) pay for itself? The target alone against auto, side by side.

For every prompt of the chosen bench scenarios, in one process and interleaved: the target
alone, auto with the draft model lying beside the target (how ``specdec run -t T`` finds it),
and auto with no draft model. Greedy. Prints per-prompt decode tok/s ratios and each
scenario's median, and checks every auto output against the target alone; an extra untimed,
traced auto run per prompt checks that every emitted token is the target's argmax at its
position.

    python scripts/checks/auto_check.py [--target T.gguf] [--draft D.gguf] [--scenarios edit,code,json,qa,creative]
                                 [--max-tokens 192] [--edit-max-tokens 384] [--json out.json]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared.script_io import Parser, demo_models  # noqa: E402

from specdec_cli.bench.scenarios import load_scenarios  # noqa: E402
from specdec_cli.engine.decode.engine import AUTO_DRAFT_MAX, DraftOptions, Engine, EngineOptions, GenOptions  # noqa: E402
from specdec_cli.engine.drafters.auto import AutoDrafter  # noqa: E402
from specdec_cli.engine.verify.divergence import argmax_violations  # noqa: E402


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--target")
    ap.add_argument("--draft")
    ap.add_argument("--scenarios", default="edit,code,json,qa,creative")
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--edit-max-tokens", type=int, default=384)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--json")
    args = ap.parse_args()
    demo_models(args)
    eng = Engine(args.target, args.draft, options=EngineOptions(n_ctx=args.ctx),
                 draft=DraftOptions(draft_max=AUTO_DRAFT_MAX), method="auto", warn=print)
    eng.drafters["auto-alone"] = AutoDrafter(eng.costs, None)  # auto as it runs with no draft model found
    eng.ensure_costs()
    print("costs:", json.dumps(eng.costs.to_dict()), flush=True)
    runs = [("auto, draft beside", "auto"), ("auto, no draft", "auto-alone")]
    out = []
    eng.generate(eng.tokenize_prompt("hello"), GenOptions(max_tokens=4), use_draft=False)
    for scen, items in load_scenarios(args.scenarios.split(",")).items():
        n = args.edit_max_tokens if scen == "edit" else args.max_tokens
        gen = GenOptions(max_tokens=n)
        for item in items:
            tokens = eng.tokenize_prompt(eng.render_chat(item.as_messages(None)))
            base = eng.generate(tokens, gen, use_draft=False)
            row = {"scenario": scen, "id": item.id, "n_prompt": len(tokens), "base_tps": base.stats.tokens_per_second}
            for label, method in runs:
                r = eng.generate(tokens, gen, method=method)
                div = next((i for i, (a, b) in enumerate(zip(base.tokens, r.tokens)) if a != b), None)
                row[label] = {
                    "tps": r.stats.tokens_per_second,
                    "ratio": r.stats.tokens_per_second / base.stats.tokens_per_second,
                    "identical": r.tokens == base.tokens,
                    "first_divergence": div,
                    "argmax_violations": 0,
                    "acceptance": r.stats.acceptance_rate,
                    "tokens_per_pass": r.stats.tokens_per_pass,
                    "split": r.stats.split(),
                }
            # untimed: the same auto run traced, every emitted token checked against the target's argmax
            traced = eng.generate(tokens, gen, method="auto", trace=True)
            row[runs[0][0]]["argmax_violations"] = len(argmax_violations(traced.trace))
            out.append(row)
            print(f"{scen:9} {item.id:12} base {base.stats.tokens_per_second:6.2f} tok/s | "
                  + " | ".join(f"{lab} {row[lab]['ratio']:.2f}x{'' if row[lab]['identical'] else ' (differs)'}"
                               f" argmax-bad {row[lab]['argmax_violations']} {row[lab]['split']}" for lab, _ in runs),
                  flush=True)
    print("\nmedian decode tok/s ratio to the target alone, per scenario:")
    for scen in dict.fromkeys(r["scenario"] for r in out):
        rows = [r for r in out if r["scenario"] == scen]
        cells = []
        for lab, _ in runs:
            ratios = [r[lab]["ratio"] for r in rows]
            cells.append(f"{lab} {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
        print(f"  {scen:9} " + " | ".join(cells))
    bad = sum(r[lab]["argmax_violations"] for r in out for lab, _ in runs)
    print(f"tokens that were not the target's argmax: {bad}")
    print("costs at the end:", json.dumps(eng.costs.to_dict()))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": out, "costs": eng.costs.to_dict()}, indent=1) + "\n")
    eng.close()
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

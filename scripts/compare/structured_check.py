"""Structured output side by side: specdec with and without drafting, and llama-server, on prompts
that each carry a JSON Schema (``scripts/data/structured_jobs.jsonl``), interleaved per prompt.

    python3 scripts/compare/structured_check.py [--target T --draft D] [-n 256] [--rounds 2] [--json out.json]

Per prompt and round, in an order reversed every other round: the constrained target alone
(``--no-draft``), specdec's default (auto, the draft beside the target), and llama-server with
the same schema (``json_schema`` in /completion) in each n-gram mode given (``--server-spec``,
ngram-mod with n-match 8). Decode speed is tokens per second after the prompt (specdec's
``tokens_per_second``, llama-server's ``timings.predicted_per_second``); every output is checked
with the ``jsonschema`` package. A last pass samples each prompt at temperature 0.8 with auto
and checks those outputs too. The time spent in the constraint (masks, validation, forced
tokens) is measured by wrapping ``Constraint``'s methods, against the time of the target's passes.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import httpx
import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared import DATA  # noqa: E402
from _shared.llama_server import Server, ServerConfig, common_server_args, resolve_models  # noqa: E402
from _shared.script_io import Parser  # noqa: E402


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    common_server_args(ap)
    ap.add_argument("--jobs", default=str(DATA / "structured_jobs.jsonl"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--server-spec", default="ngram4,ngram16", help="llama-server n-gram modes to compare")
    args = ap.parse_args()
    resolve_models(args, False)

    from specdec_cli.engine.decode.engine import AUTO_DRAFT_MAX, DraftOptions, Engine, EngineOptions, GenOptions
    from specdec_cli.engine.structured import constraint as C
    from specdec_cli.engine.verify.verifiers import SamplingParams
    from specdec_cli.terminal.constraint_args import ConstraintSpec

    spent = {"constraint": 0.0}
    for name in ("masks_along", "consume", "validate_draft", "forced_tokens"):
        original = getattr(C.Constraint, name)

        def timed(self, *a, _f=original, **k):
            t0 = time.perf_counter()
            try:
                return _f(self, *a, **k)
            finally:
                spent["constraint"] += time.perf_counter() - t0

        setattr(C.Constraint, name, timed)

    jobs = [json.loads(line) for line in Path(args.jobs).read_text().splitlines() if line.strip()]
    eng = Engine(args.target, args.draft, options=EngineOptions(n_ctx=args.ctx), method="auto",
                 draft=DraftOptions(draft_max=AUTO_DRAFT_MAX))
    tok = C.tokenizer_for(eng.target_model)
    prompts, grammars = [], []
    for j in jobs:
        text = eng.render_chat(j["messages"])
        prompts.append(text)
        grammars.append(C.compile_constraint(ConstraintSpec("json_schema", json.dumps(j["json_schema"]),
                                                            j["id"]), tok))
    eng.generate(eng.tokenize_prompt(prompts[0]), GenOptions(max_tokens=8), use_draft=False)  # warm-up
    specs = [s for s in args.server_spec.split(",") if s]
    servers = {s: Server(args, ServerConfig(1, s), Path(f"/tmp/structured-{s}.log")).__enter__() for s in specs}
    rows: list[dict] = []
    try:
        for r in range(args.rounds):
            for i, (j, text, g) in enumerate(zip(jobs, prompts, grammars)):
                systems = ["alone", "auto", *specs]
                for system in (systems if (r + i) % 2 == 0 else systems[::-1]):
                    if system in ("alone", "auto"):
                        spent["constraint"] = 0.0
                        busy0 = eng.busy_seconds()
                        res = eng.generate(eng.tokenize_prompt(text), GenOptions(max_tokens=args.max_tokens,
                                                                                 grammar=g),
                                           use_draft=system == "auto")
                        out, tps = res.text, res.stats.tokens_per_second
                        extra = {"n_forced": res.stats.n_forced, "split": res.stats.split(),
                                 "passes": res.stats.n_target_passes, "n_generated": res.stats.n_generated,
                                 "constraint_s": spent["constraint"], "model_s": eng.busy_seconds() - busy0,
                                 "stop": res.stats.stop_reason}
                    else:
                        body = {"prompt": text, "n_predict": args.max_tokens, "temperature": 0,
                                "json_schema": j["json_schema"], "cache_prompt": False, "seed": args.seed}
                        resp = httpx.post(f"{servers[system].url}/completion", json=body, timeout=3600).json()
                        out, tps = resp.get("content", ""), resp.get("timings", {}).get("predicted_per_second")
                        extra = {"n_generated": resp.get("timings", {}).get("predicted_n")}
                    try:
                        jsonschema.validate(json.loads(out), j["json_schema"])
                        valid = True
                    except (ValueError, jsonschema.ValidationError):
                        valid = False
                    rows.append({"round": r, "id": j["id"], "system": system, "tps": tps, "valid": valid, **extra})
                    print(f"round {r} {j['id']:<10} {system:<8} {tps or 0:7.2f} tok/s valid={valid} "
                          f"{extra.get('split', '')}", flush=True)
        sampled = []
        for j, text, g in zip(jobs, prompts, grammars):
            res = eng.generate(eng.tokenize_prompt(text), GenOptions(
                max_tokens=args.max_tokens, grammar=g, sampling=SamplingParams(temp=0.8, seed=args.seed)))
            try:
                jsonschema.validate(json.loads(res.text), j["json_schema"])
                sampled.append(True)
            except (ValueError, jsonschema.ValidationError):
                sampled.append(False)
    finally:
        for s in servers.values():
            s.__exit__(None, None, None)
        eng.close()

    def ratio(a: str, b: str) -> list[float]:
        out = []
        for r in range(args.rounds):
            for j in jobs:
                x = [row["tps"] for row in rows if row["round"] == r and row["id"] == j["id"] and row["system"] == a]
                y = [row["tps"] for row in rows if row["round"] == r and row["id"] == j["id"] and row["system"] == b]
                if x and y and x[0] and y[0]:
                    out.append(x[0] / y[0])
        return out

    print()
    for s in ["alone", "auto", *specs]:
        mine = [row for row in rows if row["system"] == s]
        print(f"{s:<8} median {statistics.median(row['tps'] for row in mine):6.2f} tok/s, "
              f"valid {sum(row['valid'] for row in mine)}/{len(mine)}")
    print(f"auto / alone: median {statistics.median(ratio('auto', 'alone')):.3f}x")
    for s in specs:
        print(f"auto / llama-server {s}: median {statistics.median(ratio('auto', s)):.3f}x")
    best = [max(x) for x in zip(*[ratio(s, "alone") for s in specs])] if specs else []
    if best:
        print(f"llama-server best n-gram / specdec alone: median {statistics.median(best):.3f}x")
    print(f"temperature 0.8, auto: valid {sum(sampled)}/{len(sampled)}")
    ours = [row for row in rows if row["system"] in ("alone", "auto")]
    share = sum(row["constraint_s"] for row in ours) / max(1e-9, sum(row["model_s"] for row in ours))
    per_pass = sum(row["constraint_s"] for row in ours) / max(1, sum(row["passes"] for row in ours))
    print(f"constraint work: {100 * share:.2f}% of the models' time; {per_pass * 1e3:.2f} ms per target pass")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "sampled_valid": sampled}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""native_compare.py's server mode: batch throughput, llama-server's slots against specdec commands.

For every slot count and speculation setting, one llama-server per round gets every prompt at
once on /completion; each specdec command (``--specdec-cmd``) runs the same prompts as a
subprocess and is timed minus its model load. Rounds alternate the order; the summary gives the
medians. The full description is ``native_compare.py``'s docstring.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _shared.llama_server import (
    PROBE_PROMPT,
    Server,
    ServerConfig,
    common_server_args,
    completion,
    logs_folder,
    resolve_models,
    spec_list,
)
from _shared.machine import DISTURBED, busy_seconds, load_average, others_busy, proc_cpu
from _shared.script_io import Parser, median_or_nan, print_header, same_text

from .prompts import load_prompts


def _int_list(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        sys.exit(f"error: {text!r} is not a comma-separated list of integers.")
    if not out or min(out) < 1:
        sys.exit(f"error: {text!r}: give positive integers.")
    return out


def run_server_batch(args, server: Server, prompts: list[tuple[str, str]]) -> dict:
    """Every prompt to /completion at once (or --in-flight at a time); the server queues what its
    slots cannot take. Wall = first request sent to last response received."""
    base = {"n_predict": args.max_tokens, "temperature": 0, "cache_prompt": args.cache_prompt == "on",
            "seed": args.seed}
    workers = args.in_flight or len(prompts)
    busy0, cpu_srv0, cpu_own0 = busy_seconds(), proc_cpu(server.proc.pid), time.process_time()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(completion, server.url, {**base, "prompt": text}) for _, text in prompts]
        answers = [f.result() for f in futures]
    wall = max(a["t_recv"] for a in answers) - min(a["t_send"] for a in answers)
    cpu_srv1 = proc_cpu(server.proc.pid)
    own = (time.process_time() - cpu_own0) + (cpu_srv1 - cpu_srv0 if cpu_srv0 is not None and cpu_srv1 else 0.0)
    per_prompt = []
    for (name, _), a in zip(prompts, answers):
        b, t = a["body"], a["body"].get("timings") or {}
        per_prompt.append({
            "prompt": name, "text": b.get("content", ""), "stop_type": b.get("stop_type"),
            "n_prompt": int(t.get("prompt_n", 0)) + int(t.get("cache_n", 0)), "cache_n": t.get("cache_n", 0),
            "prompt_n": t.get("prompt_n", 0), "prompt_ms": t.get("prompt_ms", 0.0),
            "predicted_n": t.get("predicted_n", b.get("tokens_predicted", 0)), "predicted_ms": t.get("predicted_ms", 0.0),
            "draft_n": t.get("draft_n", 0), "draft_n_accepted": t.get("draft_n_accepted", 0),
            "seconds": a["t_recv"] - a["t_send"],
        })
    n_gen = sum(p["predicted_n"] for p in per_prompt)
    return {
        "n_gen": n_gen, "wall": wall, "tps": n_gen / wall if wall > 0 else 0.0,
        "n_drafted": sum(p["draft_n"] for p in per_prompt), "n_accepted": sum(p["draft_n_accepted"] for p in per_prompt),
        "others": others_busy(busy0, own, wall), "n_ctx_slot": server.n_ctx_slot(), "per_prompt": per_prompt,
    }


def _subst(argv: list[str], values: dict[str, str]) -> list[str]:
    out = []
    for a in argv:
        for k, v in values.items():
            a = a.replace("{" + k + "}", v)
        out.append(a)
    return out


def _replace_after(argv: list[str], flags: tuple[str, ...], value: str) -> bool:
    """Put ``value`` after the last of ``flags`` in ``argv`` (or into its --flag=X form); False if absent."""
    for i in range(len(argv) - 1, -1, -1):
        a = argv[i]
        if a in flags and i + 1 < len(argv):
            argv[i + 1] = value
            return True
        for f in flags:
            if f.startswith("--") and a.startswith(f + "="):
                argv[i] = f"{f}={value}"
                return True
    return False


def _batch_seconds(objs: list[dict], stderr: str) -> float | None:
    """specdec's own batch time (model load excluded) when its output carries one: a
    ``batch_seconds`` field in a stdout JSON line, a stderr line (JSON or ``batch_seconds=X``), or
    the summary ``run --batch`` prints without -q (``N prompts in S s: ...``)."""
    for o in reversed(objs):
        if isinstance(o.get("batch_seconds"), (int, float)):
            return float(o["batch_seconds"])
    for line in reversed(stderr.splitlines()):
        m = re.search(r"batch_seconds\"?\s*[:=]\s*([\d.]+)", line) or re.search(r"prompts in ([\d.]+) s: ", line)
        if m:
            return float(m.group(1))
    return None


def _run_cmd(argv: list[str]) -> tuple[subprocess.CompletedProcess, float, float | None]:
    """One run of a specdec command: its output, wall time and what else kept the machine busy.
    Each run gets an empty prompt cache folder, as each round restarts the server: no run starts
    from the prompts another one read."""
    ru0, busy0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), busy_seconds(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specdec-prompts-") as prompts:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                              stdin=subprocess.DEVNULL, env={**os.environ, "SPECDEC_PROMPT_CACHE": prompts})
    wall, ru1 = time.perf_counter() - w0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.splitlines()[-25:])
        sys.exit(f"error: the specdec command failed (exit {proc.returncode}):\n{shlex.join(argv)}\n{tail}")
    return proc, wall, others_busy(busy0, cpu, wall)


def run_specdec_cmd(args, argv: list[str], files: dict[str, Path], log_dir: Path, tag: str) -> dict:
    """The user's specdec command over the prompt set, timed from its start to its end, minus
    model load: its own ``batch_seconds`` when it reports one, else the wall time of the same
    command on a one-token prompt with -n 1 (load, warm-up, exit), measured right after it."""
    main = _subst(argv, {"prompts": str(files["prompts"]), "n": str(args.max_tokens)})
    proc, wall, others = _run_cmd(main)
    (log_dir / f"{tag}.stdout.jsonl").write_text(proc.stdout)
    (log_dir / f"{tag}.stderr.log").write_text(proc.stderr)
    objs = []
    for line in proc.stdout.splitlines():
        try:
            o = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(o, dict):
            objs.append(o)
    lines = [o for o in objs if "n_generated" in o]
    if not lines:
        sys.exit(f"error: the specdec command printed no JSON line with n_generated:\n{shlex.join(main)}")
    batch = _batch_seconds(objs, proc.stderr)
    load, how = None, "batch_seconds"
    if batch is None:
        probe = _subst(argv, {"prompts": str(files["probe"]), "n": "1"})
        if "{prompts}" not in " ".join(argv) and not _replace_after(probe, ("--batch",), str(files["probe"])):
            sys.exit("error: the specdec command reports no batch_seconds and has neither {prompts} nor --batch FILE, "
                     "so its model load cannot be measured apart.")
        if "{n}" not in " ".join(argv):
            _replace_after(probe, ("-n", "--max-tokens", "--n-predict"), "1")
        _, load, _ = _run_cmd(probe)
        batch, how = max(wall - load, 1e-9), "wall - load probe"
    n_gen = sum(int(o["n_generated"]) for o in lines)
    return {
        "n_gen": n_gen, "wall": batch, "wall_total": wall, "load": load, "timing": how,
        "tps": n_gen / batch, "n_lines": len(lines),
        "n_drafted": sum(int(o.get("n_drafted") or 0) for o in lines),
        "n_accepted": sum(int(o.get("n_accepted") or 0) for o in lines),
        "others": others,
        "per_prompt": [{"prompt": str(o.get("id", o.get("index", i))), "n_prompt": o.get("n_prompt"),
                        "n_generated": o.get("n_generated"), "text": o.get("text", "")} for i, o in enumerate(lines)],
    }


def server_main(argv: list[str]) -> int:
    ap = Parser(
        prog="native_compare.py server",
        description="batch throughput: llama-server (slots, continuous batching) against a specdec command")
    common_server_args(ap)
    ap.add_argument("--np", default="1,4,8", help="server slot counts to measure (comma-separated)")
    ap.add_argument("--spec", default="none",
                    help="server speculation settings, comma-separated: none, ngramK (ngram-mod, n-max K), draft")
    ap.add_argument("--in-flight", type=int, default=0, help="requests in flight at once (default 0: all)")
    ap.add_argument("--specdec-cmd", action="append", default=[],
                    help="a specdec command printing one JSON line per prompt; {prompts} and {n} are filled in. "
                         "Repeatable; 'LABEL::COMMAND' names it")
    ap.add_argument("--rounds", type=int, default=1, help="passes over all systems; the order flips every round")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        sys.exit("error: --rounds must be at least 1.")
    specs = spec_list(args.spec)
    resolve_models(args, "draft" in specs)
    log_dir, tmp = logs_folder(args)
    prompts = load_prompts(args.prompts_file, args.target)
    files = {"prompts": log_dir / "prompts.jsonl", "probe": log_dir / "probe.jsonl"}
    files["prompts"].write_text("".join(json.dumps({"id": n, "prompt": t}) + "\n" for n, t in prompts))
    files["probe"].write_text(json.dumps({"id": "probe", "prompt": PROBE_PROMPT}) + "\n")

    systems: list[tuple[str, object]] = [
        (ServerConfig(n, sp).label, ServerConfig(n, sp)) for n in _int_list(args.np) for sp in specs]
    for i, c in enumerate(args.specdec_cmd):
        label, _, cmd = c.rpartition("::") if "::" in c else ("", "", c)
        label = label or ("specdec" if len(args.specdec_cmd) == 1 else f"specdec#{i + 1}")
        systems.append((label, shlex.split(cmd)))
    if len({label for label, _ in systems}) != len(systems):
        sys.exit("error: two systems have the same label.")

    print(f"target {Path(args.target).name}" + (f", draft {Path(args.draft).name}" if args.draft else ""))
    print(f"server {args.server_bin}")
    print(f"{len(prompts)} prompts, greedy, raw /completion, -n {args.max_tokens}, threads {args.threads}, "
          f"ctx {args.ctx}/slot, batch {args.batch}, fa {args.flash_attn}, kv {args.cache_type_k}/{args.cache_type_v}, "
          f"ngl {args.gpu_layers}, cache_prompt {args.cache_prompt}, ngram-mod n-match {args.ngram_match} "
          f"n-min {args.ngram_min}, draft-max {args.draft_max}, rounds {args.rounds}")
    hdr = f"{'round':>5}  {'system':<24} {'gen':>6} {'wall s':>8} {'tok/s':>8} {'drafted/acc':>16} {'others':>6}  note"
    print_header(hdr)

    records: dict[str, list[dict]] = {label: [] for label, _ in systems}
    load0, t0 = load_average(), time.perf_counter()
    for r in range(args.rounds):
        for label, what in (systems if r % 2 == 0 else systems[::-1]):
            tag = re.sub(r"[^\w.=#-]+", "_", label) + f".r{r}"
            if isinstance(what, ServerConfig):
                with Server(args, what, log_dir / f"{tag}.log") as server:
                    rec = run_server_batch(args, server, prompts)
                rec["cmd"] = shlex.join(server.cmd)
                note = f"n_ctx/slot {rec['n_ctx_slot']}"
            else:
                rec = run_specdec_cmd(args, what, files, log_dir, tag)
                rec["cmd"] = shlex.join(what)
                note = (f"{rec['timing']}" + (f" (total {rec['wall_total']:.1f} s, load {rec['load']:.1f} s)"
                                              if rec["load"] is not None else ""))
                if rec["n_lines"] != len(prompts):
                    note += f"; {rec['n_lines']} lines for {len(prompts)} prompts!"
            rec["round"] = r
            records[label].append(rec)
            acc = f"{rec['n_drafted']}/{rec['n_accepted']}" if rec["n_drafted"] else "-"
            oth = "?" if rec["others"] is None else f"{rec['others']:.1f}" + ("!" if rec["others"] > DISTURBED else "")
            print(f"{r:>5}  {label:<24} {rec['n_gen']:>6} {rec['wall']:>8.2f} {rec['tps']:>8.2f} {acc:>16} {oth:>6}  "
                  f"{note}")
            sys.stdout.flush()

    # summary: medians over rounds
    print()
    hdr2 = f"{'system':<24} {'gen':>6} {'wall s':>8} {'tok/s':>8} {'min-max tok/s':>15} {'vs first':>8} {'acc rate':>8}"
    print(hdr2)
    print("-" * len(hdr2))
    first_tps = None
    summary = {}
    for label, _ in systems:
        recs = records[label]
        tps = [x["tps"] for x in recs]
        med_tps = median_or_nan(tps)
        first_tps = first_tps or med_tps
        d, a = recs[-1]["n_drafted"], recs[-1]["n_accepted"]
        summary[label] = {"n_gen": median_or_nan(x["n_gen"] for x in recs), "wall": median_or_nan(x["wall"] for x in recs),
                          "tps": med_tps, "tps_min": min(tps), "tps_max": max(tps), "n_drafted": d, "n_accepted": a}
        print(f"{label:<24} {summary[label]['n_gen']:>6.0f} {summary[label]['wall']:>8.2f} {med_tps:>8.2f} "
              f"{min(tps):>7.2f}-{max(tps):<7.2f} {med_tps / first_tps:>8.2f} "
              f"{(f'{100 * a / d:.0f}%' if d else '-'):>8}")
    print("-" * len(hdr2))
    print(f"{args.rounds} round(s), {time.perf_counter() - t0:.0f} s; 1-min load average {load0} at the start, "
          f"{load_average()} at the end, on {os.cpu_count()} CPUs. tok/s = generated tokens / wall seconds of the batch "
          f"(server: first request sent to last answer; specdec: process time minus model load).")
    _check_prompt_counts(records, systems)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                               "prompts": [n for n, _ in prompts], "summary": summary,
                                               "runs": records}, indent=1))
    if tmp is not None:
        tmp.cleanup()
    return 0


def _check_prompt_counts(records: dict[str, list[dict]], systems) -> None:
    """Warn where a specdec line's n_prompt differs from the server's prompt tokens (cache_n + prompt_n)."""
    server = next((records[label][0] for label, w in systems if isinstance(w, ServerConfig)), None)
    if server is None:
        return
    ref = {p["prompt"]: p for p in server["per_prompt"]}
    for label, w in systems:
        if isinstance(w, ServerConfig):
            continue
        rec = records[label][0]
        bad = [p["prompt"] for p in rec["per_prompt"]
               if p["prompt"] in ref and p["n_prompt"] is not None and p["n_prompt"] != ref[p["prompt"]]["n_prompt"]]
        same = sum(1 for p in rec["per_prompt"] if p["prompt"] in ref
                   and same_text(p["text"], ref[p["prompt"]]["text"]) == "same")
        print(f"{label}: {same}/{len(rec['per_prompt'])} outputs agree with the server's on their common length"
              + (f"; prompt token counts differ for {', '.join(bad)}" if bad else "; prompt token counts agree"))

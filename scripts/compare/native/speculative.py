"""native_compare.py's per-prompt mode: llama.cpp's ``llama-speculative-simple`` against specdec's Engine.

One native process per prompt (its "decoded N tokens in S seconds" line is its decode speed, its
n_drafted/n_accept lines the counts) and the Engine in this process, loaded once and warmed up,
alternating per prompt; the table of decode tokens/s, their ratio, the counts and how busy other
processes kept the machine. The full description is ``native_compare.py``'s docstring.
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _shared.llama_server import find_native
from _shared.machine import DISTURBED, busy_seconds, load_average, others_busy
from _shared.script_io import Parser, demo_models, print_header, same_text

from specdec_cli.engine.llama.library import default_threads  # noqa: E402

from .prompts import load_prompts

RE_ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
RE_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
RE_COUNT = {k: re.compile(rf"\b{k}\s*=\s*(\d+)") for k in ("n_predict", "n_drafted", "n_accept")}
RE_NCTX = re.compile(r"llama_context: n_ctx\s+=\s+(\d+)")
RE_FA = re.compile(r"llama_context: flash_attn\s+=\s+(\S+)")
RE_FA_RESOLVED = re.compile(r"Flash Attention (enabled|not supported)")
RE_THREADS = re.compile(r"threadpool init, n_threads = (\d+)")
RE_KV = re.compile(r"K \((\w+)\):.*V \((\w+)\)")


@dataclass
class Side:
    tps: float
    n_gen: int
    n_drafted: int
    n_accepted: int
    text: str
    n_prompt: int
    others: float | None = None  # CPU cores other processes kept busy during the run, on average


def native_cmd(args, prompt: str) -> list[str]:
    t = str(args.threads)
    return [
        args.native_bin, "-m", str(args.target), "-md", str(args.draft),
        "-p", prompt, "--no-escape", "-n", str(args.max_tokens), "--temp", "0", "-s", str(args.seed),
        "--spec-type", "draft-simple",
        "--spec-draft-n-max", str(args.draft_max), "--spec-draft-n-min", str(args.draft_min),
        "--spec-draft-p-min", str(args.p_min),
        "-t", t, "-tb", t, "-td", t, "-tbd", t,
        "-c", str(args.ctx), "-b", str(args.batch), "-ub", str(args.batch),
        "-fa", args.flash_attn,
        "-ctk", args.cache_type_k, "-ctv", args.cache_type_v,
        "-ctkd", args.cache_type_k, "-ctvd", args.cache_type_v,
        "-ngl", str(args.gpu_layers), "-ngld", str(args.gpu_layers),
        "-fit", "off",  # no silent changes to what was asked: the settings above are the settings
        "-lv", "4",  # llama.cpp's INFO lines (n_ctx, flash attention, KV types) are at trace level here
    ]


def run_native(args, prompt: str, log_dir: Path | None, tag: str) -> tuple[Side, dict]:
    cmd = native_cmd(args, prompt)
    ru0, busy0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), busy_seconds(), time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    wall, ru1 = time.perf_counter() - w0, resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    log = proc.stderr
    if log_dir is not None:
        (log_dir / f"{tag}.stderr.log").write_text(log)
        (log_dir / f"{tag}.stdout.txt").write_text(proc.stdout)
    dec, enc = RE_DECODED.search(log), RE_ENCODED.search(log)
    counts = {k: r.search(log) for k, r in RE_COUNT.items()}
    if proc.returncode != 0 or not dec or not enc or not all(counts.values()):
        tail = "\n".join(log.splitlines()[-25:])
        sys.exit(f"error: llama-speculative-simple failed (exit {proc.returncode}):\n{' '.join(cmd[:6])} ...\n{tail}")
    # stdout is "\n\n" + the prompt's pieces + the generated text + "\n\n"
    out = proc.stdout
    out = out[2:] if out.startswith("\n\n") else out
    text = out[len(prompt):] if out.startswith(prompt) else out
    for tail in ("\n\n\n\n", "\n\n"):  # the generation is followed by two LOG("\n\n")
        if text.endswith(tail):
            text = text[: -len(tail)]
            break
    info = {
        "n_ctx": [int(m) for m in RE_NCTX.findall(log)],
        "flash_attn": RE_FA.findall(log),
        "flash_attn_resolved": RE_FA_RESOLVED.findall(log),
        "threads": [int(m) for m in RE_THREADS.findall(log)],
        "kv_types": sorted({f"{k}/{v}" for k, v in RE_KV.findall(log)}),
    }
    side = Side(
        tps=float(dec.group(3)), n_gen=int(dec.group(1)),
        n_drafted=int(counts["n_drafted"].group(1)), n_accepted=int(counts["n_accept"].group(1)),
        text=text, n_prompt=int(enc.group(1)), others=others_busy(busy0, child_cpu, wall),
    )
    return side, info


def engine_options(args):
    """specdec's engine with the settings both sides get (context, batch, threads, offload, FA, KV types)."""
    from specdec_cli.engine.decode.engine import EngineOptions

    return EngineOptions(n_ctx=args.ctx, n_batch=args.batch, threads=args.threads, gpu_layers=args.gpu_layers,
                         flash_attn=args.flash_attn, cache_type_k=args.cache_type_k, cache_type_v=args.cache_type_v)


def warmed_up(engine, prompts: list[tuple[str, str]]) -> list[list[int]]:
    """The prompts' tokens, after one short generation (pages in the weights, builds the graphs)."""
    from specdec_cli.engine.decode.engine import GenOptions

    encoded = [engine.tokenize_prompt(text) for _, text in prompts]
    engine.generate(encoded[0], GenOptions(max_tokens=16))
    return encoded


def run_specdec(engine, tokens: list[int], n: int) -> Side:
    from specdec_cli.engine.decode.engine import GenOptions

    busy0, cpu0, w0 = busy_seconds(), time.process_time(), time.perf_counter()
    r = engine.generate(tokens, GenOptions(max_tokens=n))
    others = others_busy(busy0, time.process_time() - cpu0, time.perf_counter() - w0)
    s = r.stats
    return Side(s.tokens_per_second or 0.0, s.n_generated, s.n_drafted, s.n_accepted, r.text, s.n_prompt, others)


def counts(s: Side) -> str:
    rate = f"{100 * s.n_accepted / s.n_drafted:.0f}%" if s.n_drafted else "-"
    return f"{s.n_gen}/{s.n_drafted}/{s.n_accepted} ({rate})"


def main(description: str) -> int:
    """The per-prompt mode, ``description`` its --help's line."""
    ap = Parser(description=description)
    ap.add_argument("--target")
    ap.add_argument("--draft")
    ap.add_argument("--draft-max", type=int, default=3)
    ap.add_argument("--draft-min", type=int, default=0)
    ap.add_argument("--p-min", type=float, default=0.0)
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    ap.add_argument("--prompts-file")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each prompt on each side")
    ap.add_argument("--stat", choices=["median", "best"], default="median",
                    help="what --repeats keeps per side: the median tok/s, or the best (least disturbed) run")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=512, help="n_batch = n_ubatch on both sides")
    ap.add_argument("--threads", type=int, default=default_threads(), help="default: physical cores")
    ap.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--cache-type-k", default="f16")
    ap.add_argument("--cache-type-v", default="f16")
    ap.add_argument("-ngl", "--gpu-layers", type=int, default=0, help="both models, both sides (default 0: CPU)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--native-bin", help="llama-speculative-simple (default: $SPECDEC_NATIVE_BIN, else build_native.sh)")
    ap.add_argument("--logs", help="keep llama-speculative-simple's logs in this folder")
    ap.add_argument("--json", help="write every run's figures to this file")
    args = ap.parse_args()
    if args.repeats < 1:
        sys.exit("error: --repeats must be at least 1.")
    from specdec_cli.engine.decode.engine import DraftOptions, Engine

    demo_models(args)
    args.native_bin = find_native(args.native_bin)
    log_dir = Path(args.logs) if args.logs else None
    if log_dir:
        log_dir.mkdir(parents=True, exist_ok=True)
    prompts = load_prompts(args.prompts_file, args.target)

    engine = Engine(args.target, args.draft, options=engine_options(args),
                    draft=DraftOptions(draft_max=args.draft_max, draft_min=args.draft_min, p_min=args.p_min))
    encoded = warmed_up(engine, prompts)

    print(f"target {Path(args.target).name}, draft {Path(args.draft).name}")
    print(f"native {args.native_bin}")
    print(f"greedy, raw prompts, -n {args.max_tokens}, draft-max {args.draft_max}, draft-min {args.draft_min}, "
          f"p-min {args.p_min}, threads {args.threads}, ctx {args.ctx}, batch {args.batch}, fa {args.flash_attn}, "
          f"kv {args.cache_type_k}/{args.cache_type_v}, ngl {args.gpu_layers}, repeats {args.repeats} ({args.stat})")
    hdr = (f"{'prompt':<14} {'tok':>4} {'native t/s':>10} {'specdec t/s':>11} {'ratio':>6}  "
           f"{'native gen/drafted/acc':>29}  {'specdec gen/drafted/acc':>29}  {'others':>9}  output")
    print_header(hdr)

    records, ratios, infos = [], [], []
    n_disturbed = 0
    load0 = load_average()
    t0 = time.perf_counter()
    for (name, text), tokens in zip(prompts, encoded):
        nat_runs, spd_runs = [], []
        for rep in range(args.repeats):
            nat, info = run_native(args, text, log_dir, f"{name}.{rep}")
            infos.append(info)
            spd = run_specdec(engine, tokens, args.max_tokens)
            if nat.n_prompt != len(tokens):
                print(f"warning: {name}: llama.cpp read {nat.n_prompt} prompt tokens, specdec {len(tokens)}",
                      file=sys.stderr)
            nat_runs.append(nat)
            spd_runs.append(spd)
            records.append({
                "prompt": name, "repeat": rep, "n_prompt_native": nat.n_prompt, "n_prompt_specdec": len(tokens),
                "native": {k: getattr(nat, k) for k in ("tps", "n_gen", "n_drafted", "n_accepted", "others")},
                "specdec": {k: getattr(spd, k) for k in ("tps", "n_gen", "n_drafted", "n_accepted", "others")},
                "native_text": nat.text, "specdec_text": spd.text,
            })
        pick = max if args.stat == "best" else statistics.median
        nat_tps = pick(r.tps for r in nat_runs)
        spd_tps = pick(r.tps for r in spd_runs)
        ratio = spd_tps / nat_tps if nat_tps else float("nan")
        ratios.append(ratio)
        n, s = nat_runs[-1], spd_runs[-1]
        busy = [max(r.others for r in runs) if all(r.others is not None for r in runs) else None
                for runs in (nat_runs, spd_runs)]
        disturbed = any(b is not None and b > DISTURBED for b in busy)
        n_disturbed += disturbed
        others = "/".join("?" if b is None else f"{b:.1f}" for b in busy) + ("!" if disturbed else " ")
        print(f"{name:<14} {len(tokens):>4} {nat_tps:>10.2f} {spd_tps:>11.2f} {ratio:>6.2f}  "
              f"{counts(n):>29}  {counts(s):>29}  {others:>9}  "
              f"{same_text(n.text, s.text)}")
        sys.stdout.flush()

    first = [r for r in records if r["repeat"] == 0]  # the counts repeat run to run: one pass over the prompts
    tot = {side: [sum(r[side][k] for r in first) for k in ("n_drafted", "n_accepted")] for side in ("native", "specdec")}
    print("-" * len(hdr))
    print(f"median ratio specdec/native {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}; {len(ratios)} prompts, {time.perf_counter() - t0:.0f} s; "
          f"1-min load average {load0} at the start, {load_average()} at the end, on {os.cpu_count()} CPUs)")
    if n_disturbed:
        print(f"{n_disturbed} row(s) marked ! ran while other processes kept more than {DISTURBED} cores busy "
              f"(the 'others' column, native/specdec); their speeds are not clean. "
              f"--repeats 3 --stat best filters such runs out.")
    for side, (d, a) in tot.items():
        print(f"{side:<8} drafted {d}, accepted {a} ({100 * a / d if d else 0:.1f}%)")
    seen = infos[0]
    print(f"llama.cpp reported (target, draft): n_ctx {seen['n_ctx']}, flash_attn {seen['flash_attn']} "
          f"-> {seen['flash_attn_resolved'] or '?'}, kv {seen['kv_types']}, threadpool {seen['threads']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                               "runs": records, "median_ratio": statistics.median(ratios)},
                                              indent=1))
    engine.close()
    return 0

"""``specdec bench`` as a library call: pick the pair, check memory, measure the grid, report, store."""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path

from .. import console
from ..errors import EXIT_INTERRUPTED, EXIT_OK, UsageError
from ..prompts import PromptItem


@dataclass
class BenchRequest:
    pair: str | None = None
    target: str | None = None
    draft: str | None = None
    registry: Path | None = None
    scenarios: str | None = None  # comma-separated names
    prompts: Path | None = None
    chat: bool = True
    repeats: int = 3
    max_tokens: int = 128
    draft_max: str = "4"  # comma-separated grid
    p_min: str = "0.5"
    json_out: Path | None = None
    plot: Path | None = None
    save: bool = False
    ctx: int = 4096
    threads: int | None = None
    gpu_layers: str = "auto"
    gpu_layers_draft: str = "auto"
    margin: float = 1.0
    flash_attn: str = "auto"
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    verbose: bool = False
    quant: str | None = None
    yes: bool = False
    temp: float = 0.0
    verify: str = "auto"  # comma-separated rules to compare at temp > 0, e.g. exact,match
    seed: int = 0


def parse_grid(text: str, kind, flag: str, lo: float, hi: float) -> list:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(not lo <= v <= hi for v in values):
        raise UsageError(f"invalid {flag} list {text!r}", hint=f"comma-separated values between {lo:g} and {hi:g}, e.g. {flag} 1,2,4")
    return sorted(set(values))


def run_bench_request(req: BenchRequest) -> int:
    from ..engine.runner import DraftOptions, Engine
    from ..engine.verify import SamplingParams, check_verify_mode
    from ..registry import load_registry
    from ..run_command import check_memory, engine_options
    from ..selection import fetch_missing, select
    from .report import print_tables, recommend, summarize
    from .runner import grid, run_bench
    from .scenarios import load_scenarios

    if req.repeats < 1 or req.max_tokens < 1:
        raise UsageError("--repeats and --max-tokens must be at least 1")
    draft_max = parse_grid(req.draft_max, int, "--draft-max", 1, 64)
    p_min = parse_grid(req.p_min, float, "--p-min", 0.0, 1.0)
    names = [n.strip() for n in req.scenarios.split(",")] if req.scenarios else None
    scenarios = load_scenarios(names, req.prompts)
    registry = load_registry(req.registry)
    target, draft = fetch_missing(registry, pair=req.pair, target=req.target, draft=req.draft, quant=req.quant, yes=req.yes)
    from ..engine.runner import AUTO_DRAFT_MAX

    sel = select(registry, pair=req.pair, target=target, draft=draft, quant=req.quant)
    for w in sel.warnings:
        console.warn(w)
    longest = max(*draft_max, AUTO_DRAFT_MAX)
    est = check_memory(sel, longest, req, force=False, quiet=False)
    engine = Engine(
        sel.target, sel.draft, options=engine_options(req, est), draft=DraftOptions(draft_max=longest, p_min=p_min[0]),
        method=sel.method, warn=console.warn,
    )
    verify = [v.strip() for v in req.verify.split(",") if v.strip()] or ["auto"]
    for v in verify:
        check_verify_mode(v)
    if req.temp <= 0 and verify != ["auto"]:
        raise UsageError("--verify compares rules at --temp > 0; at temperature 0 every rule is greedy")
    # auto is run's default for a draft model or none; a draft head runs as itself
    configs = grid(draft_max, p_min, verify=verify, method=sel.method if sel.draft else None,
                   auto=sel.method in (None, "draft"))
    n_runs = sum(len(v) for v in scenarios.values()) * req.repeats * len(configs)
    console.note(
        f"bench: {sel.target.name} with {sel.draft.name if sel.draft else 'no draft model'}; "
        f"{len(scenarios)} scenario(s), {len(configs)} settings, "
        f"{req.repeats} repeat(s), {req.max_tokens} tokens: {n_runs} generations"
    )

    def render(item: PromptItem) -> list[int]:
        if item.messages is not None or req.chat:
            return engine.tokenize_prompt(engine.render_chat(item.as_messages(None)))
        return engine.tokenize_prompt(item.text or "")

    interrupted = False
    samples = []
    try:
        with console.progress() as bar:
            task = bar.add_task("measuring", total=n_runs)
            samples = run_bench(
                engine, scenarios, configs, repeats=req.repeats, max_tokens=req.max_tokens, render=render,
                sampling=SamplingParams(temp=req.temp, seed=req.seed),
                on_sample=lambda s: (samples.append(s), bar.advance(task)),
            )
    except KeyboardInterrupt:
        interrupted = True
        console.warn(f"interrupted after {len(samples)} of {n_runs} generations; reporting what was measured")
    finally:
        costs = engine.costs
        engine.close()
    if not samples:
        return EXIT_INTERRUPTED
    rows = summarize(samples)
    rec = recommend(rows)
    print_tables(rows, rec, _stdout())
    print_costs(costs, _stdout())
    _report_memory(samples, est)
    if req.json_out:
        _write_json(req, sel, samples, rows, rec, est, costs)
    if req.plot:
        from .plot import plot

        console.note(f"plot written to {plot(rows, rec, req.plot)}")
        if costs.curve():
            from .plot import plot_costs

            console.note(f"cost curve plotted to {plot_costs(costs, req.plot)}")
    if req.save and not interrupted:
        if sel.draft is None:
            console.note("nothing to save: without a draft model, run's default (auto) is what was measured")
        else:
            _save(sel, rec)
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


CURVE_SIZES = [1, 2, 3, 4, 5, 8, 12, 16, 17, 24, 32, 33]


def print_costs(costs, out) -> None:
    """The measured cost of a target pass by batch size: what auto chose draft lengths from."""
    if not costs.curve():
        return
    from rich.table import Table

    table = Table(title=f"target pass cost by batch size ({costs.source}, then refined by every pass)", title_justify="left")
    table.add_column("tokens", justify="right")
    table.add_column("ms per pass", justify="right")
    table.add_column("decode steps", justify="right")
    table.add_column("ms per token", justify="right")
    for b, sec, steps in costs.curve(CURVE_SIZES):
        table.add_row(str(b), f"{sec * 1e3:.1f}", f"{steps:.2f}", f"{sec * 1e3 / b:.1f}")
    out.print(table)
    drafts = ", ".join(f"{k} {v * 1e3:.2f} ms/token" for k, v in costs.drafts.items())
    if drafts:
        out.print(f"draft cost: {drafts}", markup=False)


def _stdout():
    from rich.console import Console

    return Console(highlight=False)


def _report_memory(samples, est) -> None:
    peak = max(s.peak_rss for s in samples)
    draft = sum(c.bytes for c in est.components if c.model == "draft")
    total = sum(c.bytes for c in est.components)
    console.note(
        f"memory: peak RSS {peak / 2**30:.2f} GiB; estimated {total / 2**30:.2f} GiB with the draft, "
        f"{(total - draft) / 2**30:.2f} GiB without it"
    )


def _write_json(req, sel, samples, rows, rec, est, costs) -> None:
    overheads = [s.overhead_fraction for s in samples if s.config.use_draft and s.overhead_fraction is not None]
    out = {
        "target": str(sel.target),
        "draft": str(sel.draft) if sel.draft else None,
        "machine": _machine(),
        "settings": {"repeats": req.repeats, "max_tokens": req.max_tokens, "ctx": req.ctx, "flash_attn": req.flash_attn,
                     "cache_type_k": req.cache_type_k, "cache_type_v": req.cache_type_v},
        "rows": [r.to_dict() for r in rows],
        "recommendation": rec,
        "python_overhead_fraction_median": sorted(overheads)[len(overheads) // 2] if overheads else None,
        "memory_estimate": est.to_dict(),
        "cost_model": costs.to_dict(),
        "samples": [s.to_dict() for s in samples],
    }
    req.json_out.write_text(json.dumps(out, indent=1) + "\n")
    console.note(f"results written to {req.json_out}")


def _machine() -> str:
    from ..devices import probe_devices

    gpus = [d.description or d.name for d in probe_devices() if d.is_gpu]
    return f"{platform.machine()} {platform.processor() or ''} {', '.join(gpus) or 'CPU only'}".strip()


def _save(sel, rec) -> None:
    from ..tuned import Tuned, save_tuned

    o = rec["overall"]
    tuned = Tuned(
        use_draft=o["use_draft"], method=o["method"] or "draft", draft_max=o["draft_max"], p_min=o["p_min"], speedup=o["speedup"],
        scenarios={k: v["speedup"] for k, v in rec["per_scenario"].items()}, machine=_machine(),
    )
    path = save_tuned(sel.target, sel.draft, tuned)
    console.note(f"saved {o['label']} for this pair to {path}; `specdec run` uses it unless flags say otherwise")

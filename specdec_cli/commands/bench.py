"""``specdec bench`` as a library call: pick the pair, check memory, measure the grid, report, store."""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path

from ..errors import EXIT_OK, OutputError, UsageError
from ..models.methods import Method
from ..pairing.plan import ModelChoice
from ..terminal import console, interrupts
from ..terminal.constraint_args import ConstraintSpec
from ..terminal.prompts import PromptItem
from .loading import LoadOptions, check_temperature, open_engine
from .structured import check_before_load, grammars_for


@dataclass(frozen=True)
class BenchRequest:
    """Every option of ``specdec bench``, as data."""

    models: ModelChoice = ModelChoice()
    load: LoadOptions = LoadOptions()
    registry: Path | None = None
    yes: bool = False
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
    temp: float = 0.0
    verify: tuple[str, ...] = ("auto",)  # the rules to compare at temp > 0, e.g. exact and match
    seed: int = 0
    parallel: str | None = None  # "1,2,4,8": the throughput mode, a scenario's prompts as one batch
    constraint: ConstraintSpec | None = None  # --json-schema, --grammar-file or --regex: every output obeys it


def parse_grid(text: str, kind, flag: str, lo: float, hi: float, example: str) -> list:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(not lo <= v <= hi for v in values):
        raise UsageError(f"invalid {flag} list {text!r}",
                         hint=f"comma-separated values between {lo:g} and {hi:g}, e.g. {flag} {example}")
    return sorted(set(values))


def run_bench_request(req: BenchRequest) -> int:
    from ..bench.report import print_tables, recommend, summarize
    from ..bench.runner import grid, run_bench
    from ..bench.scenarios import load_scenarios
    from ..engine.decode.engine import AUTO_DRAFT_MAX, DraftOptions
    from ..engine.verify.verifiers import SamplingParams, resolve_seed
    from ..pairing.plan import build_plan
    from ..pairing.registry import load_registry
    from .consent import confirm_downloads

    if req.repeats < 1 or req.max_tokens < 1:
        raise UsageError("--repeats and --max-tokens must be at least 1")
    check_temperature(req.temp)
    draft_max = parse_grid(req.draft_max, int, "--draft-max", 1, 64, "1,2,4")
    p_min = parse_grid(req.p_min, float, "--p-min", 0.0, 1.0, "0,0.5,0.8")
    verify = [str(v) for v in req.verify] or ["auto"]
    if req.temp <= 0 and verify != ["auto"]:
        raise UsageError("--verify compares rules at --temp > 0; at temperature 0 every rule is greedy")
    check_outputs(req)
    seed = resolve_seed(req.seed)
    if seed != req.seed:
        console.note(f"seed {seed}")
    names = [n.strip() for n in req.scenarios.split(",")] if req.scenarios else None
    scenarios = load_scenarios(names, req.prompts)
    # bench measures the draft as it is: a stored verdict of an earlier bench does not drop it
    plan = build_plan(load_registry(req.registry), req.models, follow_bench=False, confirm=confirm_downloads(req.yes))
    check_before_load(req.constraint, [], plan.method.value if plan.is_auto else plan.drafter and plan.drafter.value)
    if req.parallel:
        return _throughput(req, plan, scenarios, SamplingParams(temp=req.temp, seed=seed))
    target, draft = plan.target.value, plan.draft.value
    longest = max(*draft_max, AUTO_DRAFT_MAX)
    engine, est = open_engine(plan, req.load, DraftOptions(draft_max=longest, p_min=p_min[0]),
                         method=plan.drafter and plan.drafter.value)
    # auto is run's default for a draft model or none; a draft head runs as itself
    # MTP has no draft file, but a grid of its own like a draft's
    own = plan.drafter.value if draft or plan.drafter is Method.MTP else None
    configs = grid(draft_max, p_min, verify=verify, method=own, auto=plan.is_auto)
    n_runs = sum(len(v) for v in scenarios.values()) * req.repeats * len(configs)
    console.note(
        f"bench: {target.name} with {draft.name if draft else 'its MTP layers' if own == 'mtp' else 'no draft model'}; "
        f"{len(scenarios)} scenario(s), {len(configs)} settings, "
        f"{req.repeats} repeat(s), {req.max_tokens} tokens: {n_runs} generations"
    )

    def render(item: PromptItem) -> list[int]:
        return _tokens(engine, item, req.chat)

    costs = engine.costs
    samples, interrupted = _measure(engine, n_runs, "generations", lambda on_sample: run_bench(
        engine, scenarios, configs, repeats=req.repeats, max_tokens=req.max_tokens, render=render,
        sampling=SamplingParams(temp=req.temp, seed=seed), grammar=grammars_for(engine, req.constraint, [])[0],
        on_sample=on_sample))
    if not samples:
        return interrupts.exit_code()
    rows = summarize(samples)
    rec = recommend(rows)
    results = _results(req, plan, samples, rows, rec, est, costs)
    kept = _write_json(req, results) if req.json_out else None
    try:
        print_tables(rows, rec, _stdout())
        print_costs(costs, _stdout())
    except OutputError:
        if kept is None:
            _keep(results, "the tables could not be printed")
        raise
    _report_memory(samples, est)
    if req.plot:
        _plot(req, rows, rec, costs)
    if req.save and not interrupted:
        if draft is None:
            console.note("nothing to save: without a draft model, run's default (auto) is what was measured")
        else:
            _save(target, draft, rec)
    return interrupts.exit_code() if interrupted else EXIT_OK


def _throughput(req: BenchRequest, plan, scenarios: dict, sampling) -> int:
    """``--parallel``: each scenario's prompts as one batch, at each count, with auto and without."""
    from ..bench.throughput import print_table, run_throughput, summarize
    from ..engine.decode.engine import AUTO_DRAFT_MAX, DraftOptions, GenOptions
    from .batch import batch_blocker

    parallels = parse_grid(req.parallel, int, "--parallel", 1, 256, "1,2,4,8")
    why = batch_blocker(plan) if max(parallels) > 1 else None
    if why is not None:
        raise UsageError(f"--parallel measures prompts decoded together, and {why}", hint="drop --parallel")
    engine, est = open_engine(plan, req.load, DraftOptions(draft_max=AUTO_DRAFT_MAX), method="auto",
                              n_seq=max(parallels))
    n_runs = len(scenarios) * req.repeats * len(parallels) * 2
    console.note(f"bench --parallel: {len(scenarios)} scenario(s) as batches, {', '.join(map(str, parallels))} at once, "
                 f"with auto and without, {req.repeats} repeat(s): {n_runs} batches")
    costs = engine.costs
    prompts = {name: [_tokens(engine, item, req.chat) for item in items] for name, items in scenarios.items()}
    runs, interrupted = _measure(engine, n_runs, "batches", lambda on_run: run_throughput(
        engine, prompts, parallels, repeats=req.repeats, gen=GenOptions(max_tokens=req.max_tokens, sampling=sampling),
        on_run=on_run))
    if not runs:
        return interrupts.exit_code()
    rows = summarize(runs)
    results = {"target": str(plan.target.value), "draft": str(plan.draft.value) if plan.draft.value else None,
               "machine": _machine(), "settings": {"repeats": req.repeats, "max_tokens": req.max_tokens,
                                                   "ctx": req.load.ctx, "parallel": parallels},
               "throughput": rows, "memory_estimate": est.to_dict(), "cost_model": costs.to_dict(),
               "runs": [r.to_dict() for r in runs]}
    if req.json_out:
        _write_json(req, results)
    print_table(rows, _stdout())
    print_costs(costs, _stdout())
    return interrupts.exit_code() if interrupted else EXIT_OK


def _measure(engine, n_runs: int, unit: str, run) -> tuple[list, bool]:
    """``run(on_each)`` under a progress bar; a signal keeps what was measured so far (and says so).
    Returns what was measured and whether a signal cut it short; the engine is closed after."""
    got: list = []
    try:
        with console.progress() as bar:
            task = bar.add_task("measuring", total=n_runs)
            run(lambda x: (got.append(x), bar.advance(task)))
        return got, False
    except KeyboardInterrupt:
        console.warn(f"interrupted after {len(got)} of {n_runs} {unit}; reporting what was measured")
        return got, True
    finally:
        engine.close()


def _tokens(engine, item: PromptItem, chat: bool) -> list[int]:
    if item.messages is not None or chat:
        return engine.tokenize_prompt(engine.render_chat(item.as_messages(None)))
    return engine.tokenize_prompt(item.text or "")


def check_outputs(req: BenchRequest) -> None:
    """Every file the run will write, checked before the first measurement."""
    from ..pairing.tuned import tuned_path
    from ..terminal.outputs import check_folder, check_writable

    if req.json_out:
        check_writable(req.json_out, "--json")
    if req.plot:
        from ..bench.plot import costs_path, pyplot

        pyplot(req.plot)  # the extension, and matplotlib
        check_writable(req.plot, "--plot")
        check_writable(costs_path(req.plot), "--plot")
    if req.save:
        path = tuned_path()
        check_folder(path.parent, "--save", hint="set XDG_CONFIG_HOME (or HOME) to a folder you may write to, or drop --save")
        check_writable(path, "--save")


CURVE_SIZES = [1, 2, 3, 4, 5, 8, 12, 16, 17, 24, 32, 33, 48, 64]


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


def _results(req, plan, samples, rows, rec, est, costs) -> dict:
    """Every figure of the run, as ``--json`` writes it (and as a late failure keeps it)."""
    overheads = [s.overhead_fraction for s in samples if s.config.use_draft and s.overhead_fraction is not None]
    return {
        "target": str(plan.target.value),
        "draft": str(plan.draft.value) if plan.draft.value else None,
        "machine": _machine(),
        "settings": {"repeats": req.repeats, "max_tokens": req.max_tokens, "ctx": req.load.ctx,
                     "flash_attn": req.load.flash_attn, "cache_type_k": req.load.cache_type_k,
                     "cache_type_v": req.load.cache_type_v},
        "rows": [r.to_dict() for r in rows],
        "recommendation": rec,
        "python_overhead_fraction_median": sorted(overheads)[len(overheads) // 2] if overheads else None,
        "memory_estimate": est.to_dict(),
        "cost_model": costs.to_dict(),
        "samples": [s.to_dict() for s in samples],
    }


def _write_json(req, results: dict) -> Path | None:
    """``--json``; when it cannot be written after all, the results go to a named fallback file."""
    from ..terminal.outputs import write_atomic

    try:
        path = write_atomic(req.json_out, json.dumps(results, indent=1) + "\n", "the results")
    except OutputError as exc:
        console.warn(exc.one_line())
        return _keep(results, f"--json {req.json_out} failed")
    console.note(f"results written to {path}")
    return path


def _keep(results: dict, why: str) -> Path | None:
    """Save the measured results somewhere, so minutes of measuring are not lost to one bad path."""
    from ..terminal.outputs import fallback_path, write_atomic

    try:
        path = write_atomic(fallback_path("specdec-bench"), json.dumps(results, indent=1) + "\n", "the results")
    except OutputError as exc:
        console.warn(f"{why}, and the results could not be kept either: {exc.one_line()}")
        return None
    console.warn(f"{why}; the results were kept in {path}")
    return path


def _plot(req, rows, rec, costs) -> None:
    """The charts; a plot that fails this late is a warning, since the figures are already out."""
    from ..bench.plot import plot, plot_costs

    try:
        console.note(f"plot written to {plot(rows, rec, req.plot)}")
        if costs.curve():
            console.note(f"cost curve plotted to {plot_costs(costs, req.plot)}")
    except OSError as exc:
        console.warn(f"cannot write the plot {req.plot} ({exc.strerror or exc}); the figures above are the same")


def _machine() -> str:
    from ..memory.devices import probe_devices

    gpus = [d.description or d.name for d in probe_devices() if d.is_gpu]
    return f"{platform.machine()} {platform.processor() or ''} {', '.join(gpus) or 'CPU only'}".strip()


def _save(target: Path, draft: Path, rec) -> None:
    from ..pairing.tuned import Tuned, save_tuned

    o = rec["overall"]
    tuned = Tuned(
        use_draft=o["use_draft"], method=o["method"] or "draft", draft_max=o["draft_max"], p_min=o["p_min"], speedup=o["speedup"],
        scenarios={k: v["speedup"] for k, v in rec["per_scenario"].items()}, machine=_machine(),
    )
    try:
        path = save_tuned(target, draft, tuned, console.warn)
    except OutputError as exc:
        console.warn(f"{exc.one_line()} The recommended setting, to pass by hand: {o['label']}")
        return
    console.note(f"saved {o['label']} for this pair to {path}; `specdec run` uses it unless flags say otherwise")

"""``specdec run`` as a library call: pick the models, load them once, generate, report.

``run_request`` takes a ``RunRequest`` (the CLI's options as data), writes text or JSON to
stdout and notes to stderr, and returns the exit code, so tests can call it directly.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import console, interrupts
from .errors import EXIT_FAILURE, EXIT_OK, SpecdecError, UsageError
from .prompts import PromptItem, decode_text, read_batch, read_prompt
from .registry import METHODS as RUN_METHODS


@dataclass
class RunRequest:
    prompt: str | None = None
    file: Path | None = None
    pair: str | None = None
    target: str | None = None
    draft: str | None = None
    no_draft: bool = False
    chat: bool = False
    system: str | None = None
    max_tokens: int = 256
    temp: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    ctx: int = 4096
    threads: int | None = None
    gpu_layers: str = "auto"
    gpu_layers_draft: str = "auto"
    margin: float = 1.0
    force: bool = False
    draft_max: int | None = None
    draft_min: int | None = None
    draft_p_min: float | None = None
    flash_attn: str = "auto"
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    batch: Path | None = None
    as_json: bool = False
    quiet: bool = False
    show_accept: bool = False
    explain_divergence: bool = False
    verbose: bool = False
    registry: Path | None = None
    quant: str | None = None
    yes: bool = False
    method: str | None = None  # force a drafting method: draft | eagle3 | dflash | dspark | ngram
    verify: str = "auto"


def run_request(req: RunRequest) -> int:
    from .engine.runner import AUTO_DRAFT_MAX, Engine, GenOptions
    from .engine.verify import SamplingParams, check_verify_mode, resolve_seed
    from .registry import load_registry
    from .selection import fetch_missing, select

    check_verify_mode(req.verify)
    if req.method not in (None, "auto", *RUN_METHODS):
        raise UsageError(f"unknown --method {req.method}", hint=f"use one of auto, {', '.join(RUN_METHODS)}")
    ngram = req.method == "ngram"
    forced = req.method if req.method not in (None, "auto") else None
    if ngram and (req.draft or req.no_draft):
        raise UsageError("--method ngram drafts without a draft model", hint="drop --draft/--no-draft")
    if req.batch is not None and (req.prompt is not None or req.file is not None):
        raise UsageError("--batch takes its prompts from the file; drop the prompt argument and -f")
    if req.explain_divergence and req.temp > 0:
        raise UsageError("--explain-divergence compares greedy runs", hint="use --temp 0")
    check_numbers(req)
    items = read_batch(req.batch) if req.batch else [PromptItem(text=read_prompt(req.prompt, req.file))]
    if req.system is not None:
        req.system = decode_text(req.system, "--system")
        if not req.chat and any(item.messages is None for item in items):
            raise UsageError("--system needs --chat", hint="add --chat to apply the target's chat template with it")
    req.stop = [decode_text(s, "--stop") for s in req.stop]

    registry = load_registry(req.registry)
    target, draft = fetch_missing(
        registry, pair=req.pair, target=req.target, draft=req.draft, no_draft=req.no_draft or ngram,
        quant=req.quant, yes=req.yes,
    )
    sel = select(registry, pair=req.pair, target=target, draft=draft, no_draft=req.no_draft or ngram, quant=req.quant,
                 method=None if ngram else forced)
    if ngram:
        sel.method, sel.how = "ngram", "--method ngram"
    elif forced and not req.no_draft and sel.method != req.method:
        raise UsageError(
            f"--method {req.method} needs {'a draft model' if req.method == 'draft' else ('an ' if req.method[0] in 'aeiou' else 'a ') + req.method + ' draft head'}, "
            "and none was given or found",
            hint="pass --draft FILE.gguf or --pair NAME (specdec pairs --method " + req.method + " lists them)",
        )
    if req.explain_divergence and sel.method is None:
        raise UsageError("--explain-divergence needs a draft to compare against", hint="pass --draft or --pair")
    for w in sel.warnings:
        console.warn(w)

    draft_opts, sources = draft_settings(sel, req.draft_max, req.draft_min, req.draft_p_min)
    stored = sources.get("draft") == "bench" or sources.get("method") == "bench"
    if stored and not forced and not req.explain_divergence:
        if not req.quiet:
            console.note(f"`specdec bench --save` found the draft model {sel.draft.name} slower than going without it "
                         "on this machine: auto drafts from the text alone")
        sel.draft = sel.draft_info = None
        sel.method, sel.how = "auto", "bench"
    use_auto = not forced and not req.no_draft and sel.method in (None, "draft", "auto")
    if use_auto:
        sel.method = "auto"
        if req.draft_max is None:
            draft_opts.draft_max, sources["draft_max"] = AUTO_DRAFT_MAX, sources.get("auto", "auto")
    est = check_memory(sel, draft_opts.draft_max, req, force=req.force, quiet=req.quiet)
    engine_opts = engine_options(req, est)
    if not req.quiet:
        what = f"draft {sel.draft.name} ({sel.how})" if sel.draft else ("n-gram drafting" if sel.method == "ngram" else "no draft")
        if use_auto:
            what = "auto: n-gram lookup" + (f" and draft {sel.draft.name} ({sel.how})" if sel.draft else "") + ", chosen per step"
        tuning = f", draft-max {draft_opts.draft_max} ({sources['draft_max']})" if sel.method else ""
        if sel.draft and not use_auto:
            tuning += f", p-min {draft_opts.p_min} ({sources['p_min']})"
        console.note(f"target {sel.target.name}, {what}{tuning}")

    engine = Engine(sel.target, sel.draft, options=engine_opts, draft=draft_opts, method=sel.method, warn=console.warn)
    try:
        seed = resolve_seed(req.seed) if req.temp > 0 else req.seed
        gen = GenOptions(
            max_tokens=req.max_tokens,
            sampling=SamplingParams(temp=req.temp, top_k=req.top_k, top_p=req.top_p, seed=seed),
            stop=list(req.stop),
            verify=req.verify,
        )
        meta = {
            "target": str(sel.target),
            "draft": str(sel.draft) if sel.draft else None,
            "method": sel.method,
            "draft_max": draft_opts.draft_max if sel.method else None,
            "draft_p_min": draft_opts.p_min if sel.draft else None,
        }
        if req.batch is not None:
            return _run_batch(engine, items, gen, req, meta)
        return _run_one(engine, items[0], gen, req, meta)
    finally:
        engine.close()


def check_numbers(req) -> None:
    """Option values the parser lets through but the engine cannot honour (a RunRequest or BenchRequest)."""
    if not math.isfinite(req.temp):
        raise UsageError(f"--temp {req.temp} is not a finite number", hint="use 0 (greedy) or a temperature such as 0.8")
    draft_min, draft_max = getattr(req, "draft_min", None), getattr(req, "draft_max", None)
    if isinstance(draft_max, int) and draft_min is not None and draft_min > draft_max:
        raise UsageError(f"--draft-min {draft_min} is above --draft-max {draft_max}",
                         hint="set --draft-min at most --draft-max")
    req.threads = thread_count(req.threads)


def thread_count(threads: int | None) -> int | None:
    """``--threads``, clamped (with a warning) to the logical CPUs: more only makes llama.cpp's threads
    wait for each other (10,000 threads took minutes per token)."""
    cpus = os.cpu_count() or 1
    if threads is not None and threads > cpus:
        console.warn(f"--threads {threads} is more than the {cpus} logical CPUs here; using {cpus}")
        return cpus
    return threads


def check_memory(sel, draft_max: int, req, *, force: bool, quiet: bool):
    """Budget the setup before loading anything; choose the offload when -ngl is auto; refuse if it cannot fit.

    ``req`` is a RunRequest or BenchRequest: both carry ctx, cache types, flash_attn, layers and margin.
    """
    from .budget import parse_layers, plan, suggestions
    from .views import budget_table

    gpu_layers = req.gpu_layers
    est = plan(
        sel.target_info,
        sel.draft_info,
        n_ctx=req.ctx,
        cache_type_k=req.cache_type_k,
        cache_type_v=req.cache_type_v,
        flash_attn=req.flash_attn,
        draft_max=draft_max,
        ngl_target=parse_layers(gpu_layers, "-ngl"),
        ngl_draft=parse_layers(req.gpu_layers_draft, "-ngld"),
        margin_gib=req.margin,
    )
    short = [(d, est.short(d)) for d in est.devices if d.usable and est.short(d)]
    if short and not force:
        budget_table(est, console.err)
        dev, missing = max(short, key=lambda x: x[1])
        raise SpecdecError(
            f"this setup does not fit in memory: short by {missing / 2**30:.2f} GiB on {dev.name}",
            hint="to fit, try " + "; ".join(suggestions(est)) + "; or --force to run anyway",
        )
    if short:
        console.warn("the memory check says this does not fit; running anyway (--force)")
    if not quiet and any(d.is_gpu for d in est.devices):
        auto = " (auto)" if gpu_layers == "auto" else ""
        console.note(f"offload{auto}: target -ngl {est.ngl_target}, draft -ngld {est.ngl_draft}")
    return est


def engine_options(req, est):
    """llama.cpp settings of a RunRequest or BenchRequest, with the offload the memory check chose."""
    from .engine.runner import EngineOptions

    return EngineOptions(
        n_ctx=req.ctx,
        threads=req.threads,
        gpu_layers=est.ngl_target,
        gpu_layers_draft=est.ngl_draft,
        flash_attn=req.flash_attn,
        cache_type_k=req.cache_type_k,
        cache_type_v=req.cache_type_v,
        verbose=req.verbose,
    )


def draft_settings(sel, draft_max=None, draft_min=None, p_min=None):
    """Draft settings and where each came from: a flag, `bench --save`, the registry entry, or the default.

    ``sources["draft"] == "bench"`` means the stored measurement says to run without the draft.
    """
    from .engine.runner import DraftOptions
    from .tuned import load_tuned

    entry, default = sel.entry, DraftOptions()
    tuned = load_tuned(sel.target, sel.draft, console.warn) if sel.draft is not None else None
    flags = {"draft_max": draft_max, "draft_min": draft_min, "p_min": p_min}
    layers = [
        ("flag", flags),
        ("bench", {"draft_max": tuned.draft_max, "p_min": tuned.p_min} if tuned and tuned.use_draft else {}),
        ("registry", {"draft_max": entry.draft_max, "draft_min": entry.draft_min, "p_min": entry.draft_p_min} if entry else {}),
        ("default", {"draft_max": default.draft_max, "draft_min": default.draft_min, "p_min": default.p_min}),
    ]
    values, sources = {}, {}
    for name in flags:
        for source, layer in layers:
            if layer.get(name) is not None:
                values[name], sources[name] = layer[name], source
                break
    if tuned is not None and all(v is None for v in flags.values()):
        if not tuned.use_draft:
            sources["draft"] = "bench"
        elif tuned.method == "ngram":
            sources["method"] = "bench"
        elif tuned.method == "auto":
            sources["auto"] = "bench"
    return DraftOptions(**values), sources


def _prompt_tokens(engine, item: PromptItem, req: RunRequest) -> list[int]:
    if item.messages is not None or req.chat:
        text = engine.render_chat(item.as_messages(req.system))
    else:
        if req.system:
            raise UsageError("--system needs --chat")
        text = item.text or ""
    return engine.tokenize_prompt(text)


def _run_one(engine, item: PromptItem, gen, req: RunRequest, meta: dict) -> int:
    tokens = _prompt_tokens(engine, item, req)
    colour = req.show_accept and console.ansi_ok(sys.stdout)

    def show(segments):
        for text, drafted in segments:
            console.write_text(f"{console.DRAFT_COLOUR}{text}{console.RESET}" if colour and drafted else text)

    divergence_code = EXIT_OK
    report = None
    if req.explain_divergence:
        plain = engine.generate(tokens, gen, use_draft=False, trace=True)
        if plain.interrupted:
            return _finish(plain, req, meta, None)
        result = engine.generate(tokens, gen, on_text=None if req.as_json else show, trace=True)
        report, divergence_code = _explain(plain, result)
    else:
        result = engine.generate(tokens, gen, on_text=None if req.as_json else show)
    code = _finish(result, req, meta, report)
    return code if code != EXIT_OK else divergence_code


def _finish(result, req: RunRequest, meta: dict, report: dict | None) -> int:
    if req.as_json:
        out = {**result.to_dict(), **meta}
        if report is not None:
            out["divergence"] = report
        console.write_json(out)
    elif sys.stdout.isatty() and result.text and not result.text.endswith("\n"):
        console.write_text("\n")
    if not req.quiet:
        console.note(result.stats.summary())
    return interrupts.exit_code() if result.interrupted else EXIT_OK


def _explain(plain, spec) -> tuple[dict, int]:
    """Compare a traced plain run with a traced speculative run; report on stderr."""
    from .divergence import argmax_violations, first_divergence

    bad = argmax_violations(spec.trace)
    div = first_divergence(plain.tokens, plain.trace, spec.tokens)
    report = {
        "identical": div is None and plain.tokens == spec.tokens,
        "argmax_violations": [p.index for p in bad],
        "first_divergence": div.to_dict() if div else None,
    }
    if bad:
        console.warn(f"{len(bad)} emitted tokens were not the target's argmax (first at {bad[0].index}): a bug")
        return report, EXIT_FAILURE
    if div is None:
        console.note(f"identical to the target alone over {min(len(plain.tokens), len(spec.tokens))} tokens")
        return report, EXIT_OK
    margin = "n/a" if div.margin is None else f"{div.margin:.3f}"
    verdict = "a near-tie (batch-shape numerics), not an error" if div.near_tie else "NOT a near-tie: a bug"
    console.note(
        f"outputs part at generated token {div.index}: target alone chose {div.plain_token}, "
        f"speculative chose {div.spec_token}; their logits in the plain run differ by {margin}: {verdict}"
    )
    return report, EXIT_OK if div.near_tie else EXIT_FAILURE


def _run_batch(engine, items: list[PromptItem], gen, req: RunRequest, meta: dict) -> int:
    """One JSON line per prompt; a signal between prompts ends the run after the last whole line."""
    from .engine.stats import GenerationStats

    total = GenerationStats()
    done, code = 0, EXIT_OK
    try:
        for i, item in enumerate(items):
            tokens = _prompt_tokens(engine, item, req)
            result = engine.generate(tokens, gen)
            s = result.stats
            total.merge(s)
            done += 1
            console.write_json({"index": i, "id": item.id, **result.to_dict(), **meta})
            if not req.quiet:
                console.note(f"[{i + 1}/{len(items)}] {s.summary()}")
            if result.interrupted:
                code = interrupts.exit_code()
                break
    except KeyboardInterrupt as exc:
        console.warn(f"interrupted after {done} of {len(items)} prompts")
        code = interrupts.exit_code(exc)
    if not req.quiet and done > 1:
        console.note(f"{'all ' if done == len(items) else ''}{done} prompts: {total.summary()}")
    return code

"""How ``run``, ``serve`` and ``bench`` load a pair: the options they share, the memory check
before anything loads, and the engine settings that come out of it."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecdecError, UsageError
from ..pairing.plan import DraftFlags, ModelChoice
from ..terminal import console


@dataclass(frozen=True)
class LoadOptions:
    """The options of ``run`` and ``bench`` that decide how the models load."""

    ctx: int = 4096
    threads: int | None = None
    gpu_layers: str = "auto"
    gpu_layers_draft: str = "auto"
    margin: float = 1.0
    flash_attn: str = "auto"
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    verbose: bool = False
    # the prompt cache (``engine/promptcache``): where on disk (None: the default folder), how many
    # bytes there at most (None: its default), or none at all (bench, whose timings must read prompts)
    prompt_cache: Path | None = None
    prompt_cache_size: int | None = None
    no_prompt_cache: bool = False


@dataclass(frozen=True)
class PairRequest:
    """What ``run`` and ``serve`` requests share: which pair, how it loads, and how it drafts."""

    models: ModelChoice = ModelChoice()
    load: LoadOptions = LoadOptions()
    draft: DraftFlags = DraftFlags()
    registry: Path | None = None
    yes: bool = False
    no_draft: bool = False
    method: str | None = None  # None or "auto", or one method forced: draft | eagle3 | dflash | dspark | ngram | mtp


def plan_pair(req: PairRequest, **extra):
    """The run plan of a request's pair (the registry read, downloads confirmed as ``--yes`` says)."""
    from ..pairing.plan import build_plan
    from ..pairing.registry import load_registry
    from .consent import confirm_downloads

    return build_plan(load_registry(req.registry), req.models, flags=req.draft, method=req.method,
                      no_draft=req.no_draft, confirm=confirm_downloads(req.yes), **extra)


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def byte_size(text: str, option: str) -> int:
    """``10G``, ``500M``, ``1.5GiB`` or a plain number of bytes, as bytes (powers of 1,024)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if not m:
        raise UsageError(f"{option} {text!r} is not a size", hint="give bytes with a unit, e.g. 10G or 500M")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def check_temperature(temp: float) -> None:
    """A temperature the parser lets through but the sampler cannot honour."""
    if not math.isfinite(temp):
        raise UsageError(f"--temp {temp} is not a finite number", hint="use 0 (greedy) or a temperature such as 0.8")


def thread_count(threads: int | None) -> int | None:
    """``--threads``, clamped (with a warning) to the logical CPUs: more only makes llama.cpp's threads
    wait for each other (10,000 threads took minutes per token)."""
    cpus = os.cpu_count() or 1
    if threads is not None and threads > cpus:
        console.warn(f"--threads {threads} is more than the {cpus} logical CPUs here; using {cpus}")
        return cpus
    return threads


def _estimate(plan, draft_max: int, load: LoadOptions, n_seq: int = 1):
    from ..memory.budget import parse_layers
    from ..memory.budget import plan as budget_plan
    from ..models.methods import Method

    return budget_plan(
        plan.target_info,
        plan.draft_info,
        n_ctx=load.ctx,
        cache_type_k=load.cache_type_k,
        cache_type_v=load.cache_type_v,
        flash_attn=load.flash_attn,
        draft_max=draft_max,
        ngl_target=parse_layers(load.gpu_layers, "-ngl"),
        ngl_draft=parse_layers(load.gpu_layers_draft, "-ngld"),
        margin_gib=load.margin,
        method=plan.method.value,
        mtp=plan.drafter is Method.MTP,
        n_seq=n_seq,
    )


def fit_parallel(plan, load: LoadOptions, draft_max: int, want: int) -> int:
    """The most sequences, up to ``want``, whose KV cells (``--ctx`` each) and buffers fit (1 at least)."""
    n = want
    while n > 1 and not _estimate(plan, draft_max, load, n).fits:
        n = max(1, n * 3 // 4)
    return n


def check_memory(plan, draft_max: int, load: LoadOptions, *, force: bool, quiet: bool, n_seq: int = 1):
    """Budget the plan's files before loading anything; choose the offload when -ngl is auto; refuse
    if it cannot fit (unless ``force``)."""
    from ..memory.placement import suggestions
    from .views import budget_table

    est = _estimate(plan, draft_max, load, n_seq)
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
        auto = " (auto)" if load.gpu_layers == "auto" else ""
        console.note(f"offload{auto}: target -ngl {est.ngl_target}, draft -ngld {est.ngl_draft}")
    return est


def engine_options(load: LoadOptions, est, n_seq: int = 1, kv_streams: bool = False):
    """llama.cpp settings, with the offload the memory check chose; ``kv_streams``: each sequence
    of the target in a KV stream of its own (``ContextParams.kv_streams``)."""
    from ..engine.decode.engine import EngineOptions

    return EngineOptions(
        n_seq=n_seq,
        kv_streams=kv_streams,
        n_ctx=load.ctx,
        threads=thread_count(load.threads),
        gpu_layers=est.ngl_target,
        gpu_layers_draft=est.ngl_draft,
        flash_attn=load.flash_attn,
        cache_type_k=load.cache_type_k,
        cache_type_v=load.cache_type_v,
        verbose=load.verbose,
    )


def print_plan_notes(plan, *, quiet: bool) -> None:
    """The plan's warnings always; its notes unless ``quiet``."""
    for w in plan.warnings:
        console.warn(w)
    if not quiet:
        for n in plan.notes:
            console.note(n)


def warn_snapshot_cap(plan) -> None:
    """A forced draft longer than a hybrid target can take back is cut (auto plans within it)."""
    from ..models.memory_kinds import SNAPSHOT_CAP, Rollback

    info = plan.target_info
    if plan.method.value and not plan.is_auto and plan.draft_max.value > SNAPSHOT_CAP \
            and info is not None and info.rollback is Rollback.SNAPSHOTS:
        console.warn(f"{plan.target.value.name} takes back at most {SNAPSHOT_CAP} drafted tokens "
                     f"(recurrent-state snapshots): drafts are cut to {SNAPSHOT_CAP}")


def open_engine(plan, load: LoadOptions, draft, *, method: str | None, force: bool = False, quiet: bool = False,
                describe: str | None = None, n_seq: int = 1, cells=None, kv_streams: bool = False):
    """Everything between a plan and a loaded engine, in order: the plan's notes, the memory
    check (which chooses the offload), what runs (``describe``, unless ``quiet``), then the load.
    ``draft``: the engine's ``DraftOptions``; its ``draft_max`` sizes the memory check. Returns the
    engine and the memory estimate it was loaded under. ``cells``: the engine's (``Engine``), sizing
    the caches of many sequences to the jobs; the memory check counts ``n_seq`` whole contexts.
    ``kv_streams``: the target's sequences in KV streams of their own (a server's)."""
    from ..engine.decode.engine import Engine
    from ..models.methods import Method

    print_plan_notes(plan, quiet=quiet)
    warn_snapshot_cap(plan)
    est = check_memory(plan, draft.draft_max, load, force=force, quiet=quiet, n_seq=n_seq)
    if describe and not quiet:
        console.note(describe)
    engine = Engine(plan.target.value, plan.draft.value, options=engine_options(load, est, n_seq, kv_streams),
                    draft=draft,
                    method=method, mtp=plan.drafter is Method.MTP, warn=console.warn,
                    note=None if quiet else console.note, cells=cells)
    if not load.no_prompt_cache:
        attach_prompt_cache(engine, load)
    return engine, est


def attach_prompt_cache(engine, load: LoadOptions) -> None:
    """The engine's prompt cache, as ``load`` sets it: saved prompts' cells in memory and on disk,
    for targets whose memory is one attention cache (the others' cells cannot be saved apart)."""
    from ..engine.promptcache.cache import DISK_DEFAULT, default_folder, open_cache

    if not engine.target_ctx.plain_kv:
        return
    engine.prompt_cache = open_cache(engine.target_model.path, cache_type_k=load.cache_type_k,
                                     cache_type_v=load.cache_type_v, flash_attn=load.flash_attn,
                                     folder=load.prompt_cache or default_folder(),
                                     disk_cap=DISK_DEFAULT if load.prompt_cache_size is None else load.prompt_cache_size,
                                     note=console.warn)

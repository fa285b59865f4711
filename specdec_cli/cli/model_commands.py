"""The commands about models and pairs: the registry (``pairs``), a file's metadata (``inspect``),
a pair's compatibility (``check``), fetching (``pull``), what is on this machine (``models``),
the memory a setup needs (``budget``) and the same pair for other servers (``export``).
Each is a thin function that builds its request from its options and calls ``commands/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..commands.options import (
    CacheType,
    CacheTypeKOpt,
    CacheTypeVOpt,
    CtxOpt,
    FlashAttn,
    FlashAttnOpt,
    JsonOpt,
    MarginOpt,
    MethodFilterOpt,
    NgldOpt,
    NglOpt,
    PairOpt,
    QuantOpt,
    RegistryOpt,
    RunMethodOpt,
    plain,
)
from ..terminal import console
from .app import command


@command()
def pairs(
    method: MethodFilterOpt = None,
    target: Annotated[Optional[str], typer.Option("--target", help="Only entries whose target matches this text.")] = None,
    as_json: JsonOpt = False,
    registry: RegistryOpt = None,
) -> None:
    """List the registry of target/draft pairs."""
    from ..commands.views import pairs_table
    from ..pairing.registry import load_registry

    entries = load_registry(registry).filter(method=plain(method), target=target)
    if as_json:
        console.write_json([e.to_dict() for e in entries])
    else:
        pairs_table(entries)


@command()
def inspect(
    file: Annotated[Path, typer.Argument(help="A GGUF file.")],
    as_json: JsonOpt = False,
) -> None:
    """Show a GGUF's metadata (architecture, sizes, vocabulary, chat template, draft method) without loading weights."""
    from ..commands.views import info_table
    from ..models.meta import read_gguf

    info = read_gguf(file)
    if as_json:
        console.write_json(info.to_dict())
    else:
        info_table(info)


TargetFileOpt = Annotated[Path, typer.Option("--target", "-t", help="Target GGUF.")]


@command()
def check(
    target: TargetFileOpt,
    draft: Annotated[Optional[Path], typer.Option("--draft", "-d", help="Draft GGUF (leave out for a target with MTP layers).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Say whether a draft can serve a target, before loading any weights. Exit 0 compatible, 1 not, 2 usage error."""
    from ..commands.views import verdict_table
    from ..models.meta import read_gguf
    from ..pairing.compat import check_pair, check_self

    tinfo = read_gguf(target)
    dinfo = read_gguf(draft) if draft is not None else None
    verdict = check_pair(tinfo, dinfo, method=dinfo.spec_method or "draft") if dinfo else check_self(tinfo)
    if as_json:
        console.write_json(verdict.to_dict())
    else:
        verdict_table(verdict, tinfo, dinfo)
    raise typer.Exit(0 if verdict.ok else 1)


@command()
def pull(
    what: Annotated[str, typer.Argument(help="A registry pair name, or a model reference: hf://org/repo/file.gguf, org/repo:Q4_K_M.")],
    quant: QuantOpt = None,
    registry: RegistryOpt = None,
) -> None:
    """Download a pair's target and draft GGUFs (or one model) into the Hugging Face cache; print their paths."""
    from dataclasses import replace

    from .. import hub
    from ..pairing.pulls import pull as pull_pair
    from ..pairing.registry import load_registry

    ref = hub.parse_ref(what)
    if ref is not None and "/" in what:
        path = hub.download(replace(ref, quant=quant) if quant else ref)
        console.write_text(f"{path}\n")
        return
    pulled = pull_pair(load_registry(registry).get(what), quant)
    for p in pulled.plan:
        console.note(f"{p.role}: {'already here' if p.cached else 'downloaded'} {p.label}")
    for path in (pulled.target, pulled.draft):
        if path is not None:
            console.write_text(f"{path}\n")


@command()
def models(
    dirs: Annotated[list[Path], typer.Option("--dir", help="Also look in this folder (repeatable; SPECDEC_MODEL_DIRS too).")] = [],  # noqa: B006
    as_json: JsonOpt = False,
    registry: RegistryOpt = None,
) -> None:
    """List the GGUFs on this machine (Hugging Face cache and folders) and the registry pairs they complete."""
    from ..commands.views import models_table
    from ..pairing.models_list import list_local_models
    from ..pairing.registry import load_registry

    found = list_local_models(dirs, load_registry(registry))
    if as_json:
        console.write_json([m.to_dict() for m in found])
    else:
        models_table(found)


@command()
def budget(
    target: TargetFileOpt,
    draft: Annotated[Optional[Path], typer.Option("--draft", "-d", help="Draft GGUF.")] = None,
    ctx: CtxOpt = 4096,
    gpu_layers: NglOpt = "auto",
    gpu_layers_draft: NgldOpt = "auto",
    margin: MarginOpt = 1.0,
    draft_max: Annotated[Optional[int], typer.Option("--draft-max", min=1, max=64, help="Draft length (sizes the target's output buffer and a hybrid target's snapshots; default: what run uses).")] = None,
    flash_attn: FlashAttnOpt = FlashAttn.AUTO,
    cache_type_k: CacheTypeKOpt = CacheType.F16,
    cache_type_v: CacheTypeVOpt = CacheType.F16,
    method: RunMethodOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Say whether a target (+ draft) fits in memory, per device, before loading anything. Exit 0 fits, 1 not."""
    from ..commands.budget import BudgetRequest, run_budget

    req = BudgetRequest(
        target=target, draft=draft, ctx=ctx, gpu_layers=gpu_layers, gpu_layers_draft=gpu_layers_draft, margin=margin,
        draft_max=draft_max, flash_attn=plain(flash_attn), cache_type_k=plain(cache_type_k),
        cache_type_v=plain(cache_type_v), method=plain(method), as_json=as_json,
    )
    raise typer.Exit(run_budget(req))


@command("export")
def export_cmd(
    to: Annotated[str, typer.Option("--to", help="llama-server, vllm or sglang.")],
    pair: PairOpt = None,
    target: Annotated[Optional[str], typer.Option("--target", "-t", help="Target GGUF path (or checkpoint for vLLM/SGLang).")] = None,
    draft: Annotated[Optional[str], typer.Option("--draft", "-d", help="Draft GGUF path (or checkpoint).")] = None,
    draft_max: Annotated[Optional[int], typer.Option("--draft-max", min=1, max=64, help="Override the draft length.")] = None,
    draft_min: Annotated[Optional[int], typer.Option("--draft-min", min=0, help="Override the minimum draft length.")] = None,
    draft_p_min: Annotated[Optional[float], typer.Option("--draft-p-min", min=0.0, max=1.0, help="Override p-min.")] = None,
    ctx: Annotated[Optional[int], typer.Option("--ctx", "-c", min=16, help="Context size for the server.")] = None,
    gpu_layers: Annotated[Optional[int], typer.Option("-ngl", "--gpu-layers", min=-1, help="Target GPU layers (llama-server).")] = None,
    gpu_layers_draft: Annotated[Optional[int], typer.Option("-ngld", "--gpu-layers-draft", min=-1, help="Draft GPU layers (llama-server).")] = None,
    tensor_parallel: Annotated[Optional[int], typer.Option("--tensor-parallel-size", "-tp", min=1, help="GPUs to shard over (vLLM/SGLang).")] = None,
    target_repo: Annotated[Optional[str], typer.Option("--target-repo", help="The target's Hugging Face checkpoint (vLLM/SGLang load those, not GGUF).")] = None,
    draft_repo: Annotated[Optional[str], typer.Option("--draft-repo", help="The draft's Hugging Face checkpoint (vLLM/SGLang).")] = None,
    as_json: JsonOpt = False,
    registry: RegistryOpt = None,
) -> None:
    """Print a ready-to-run llama-server, vLLM or SGLang command for the same pair and settings."""
    from ..commands.export import ServerOptions, export_pair
    from ..pairing.plan import DraftFlags, ModelChoice

    out = export_pair(
        to, ModelChoice(pair=pair, target=target, draft=draft), registry=registry,
        flags=DraftFlags(draft_max=draft_max, draft_min=draft_min, p_min=draft_p_min),
        server=ServerOptions(ctx=ctx, gpu_layers=gpu_layers, gpu_layers_draft=gpu_layers_draft,
                             tensor_parallel=tensor_parallel, target_repo=target_repo, draft_repo=draft_repo),
    )
    if as_json:
        console.write_json(out.to_dict())
        return
    console.write_text(out.command_line() + "\n")
    for n in out.notes:
        console.note(f"note: {n}")

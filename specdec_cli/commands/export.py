"""``specdec export`` as a library call: the plan ``run`` would make, written as a server's command."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecdecError, UsageError
from ..export import Export, ExportSpec, export
from ..models.methods import Method
from ..pairing.plan import DraftFlags, ModelChoice


@dataclass(frozen=True)
class ServerOptions:
    """What only a server command takes: its context, offload and tensor parallelism, and checkpoints."""

    ctx: int | None = None
    gpu_layers: int | None = None
    gpu_layers_draft: int | None = None
    tensor_parallel: int | None = None
    target_repo: str | None = None
    draft_repo: str | None = None


def export_pair(engine: str, models: ModelChoice, *, registry: Path | None = None,
                flags: DraftFlags = DraftFlags(), server: ServerOptions = ServerOptions()) -> Export:
    from ..pairing.plan import build_plan, plan_from_registry
    from ..pairing.registry import load_registry

    reg = load_registry(registry)
    entry = reg.get(models.pair) if models.pair else None
    if entry is None and not models.target:
        raise UsageError("nothing to export", hint="pass --pair NAME, or --target T --draft D")
    try:
        plan = build_plan(reg, models, flags=flags, auto=False, follow_bench=False, fetch=False)
    except SpecdecError:
        if entry is None:
            raise
        plan = plan_from_registry(entry, models, flags)  # not on this machine: by repository, for a server elsewhere
    method = plan.drafter or (Method(entry.method) if entry else None)
    if method is None:
        raise UsageError("no draft to export", hint="pass --draft FILE or a --pair")
    tinfo, dinfo = plan.target_info, plan.draft_info
    kv = dinfo.kv if dinfo else {}
    source = plan.draft_max.source
    spec = ExportSpec(
        method=method.value,
        target=str(plan.target.value),
        draft=str(plan.draft.value) if plan.draft.value and method.needs_draft_file else None,
        draft_max=plan.draft_max.value,
        draft_min=plan.draft_min.value,
        p_min=plan.p_min.value,
        ctx=server.ctx,
        gpu_layers=server.gpu_layers,
        gpu_layers_draft=server.gpu_layers_draft,
        tensor_parallel=server.tensor_parallel,
        settings_source={"flag": "flags", "default": "defaults"}.get(source, source),
        target_repo=server.target_repo,
        draft_repo=server.draft_repo or (entry.draft_repo if entry and method.is_head else None),
        target_n_vocab=tinfo.n_vocab if tinfo else None,
        draft_n_vocab=dinfo.n_vocab if dinfo else None,
        draft_block_size=kv.get("dflash.block_size"),
        draft_has_confidence_head=kv.get("dflash.has_confidence_head"),
        target_has_mtp=tinfo.has_mtp if tinfo else None,
    )
    return export(spec, engine)

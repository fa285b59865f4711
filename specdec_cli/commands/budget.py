"""``specdec budget`` as a library call: the memory a run would need, per device, before loading."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..terminal import console


@dataclass(frozen=True)
class BudgetRequest:
    """Every option of ``specdec budget``, as data."""

    target: Path
    draft: Path | None = None
    ctx: int = 4096
    gpu_layers: str = "auto"
    gpu_layers_draft: str = "auto"
    margin: float = 1.0
    draft_max: int | None = None  # None: what run would use
    flash_attn: str = "auto"
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    method: str | None = None  # None: run's default, auto
    as_json: bool = False


def run_budget(req: BudgetRequest) -> int:
    """Print the estimate (a table, or JSON) and return 0 when it fits, 1 when not."""
    from ..engine.decode.engine import AUTO_DRAFT_MAX, DraftOptions
    from ..memory.budget import parse_layers, plan
    from ..memory.placement import suggestions
    from ..models.meta import read_gguf
    from .views import budget_table

    tinfo = read_gguf(req.target)
    dinfo = read_gguf(req.draft) if req.draft else None
    how = req.method or "auto"  # run's default: auto drafts (n-gram at least) unless told otherwise
    # as run does: a target with MTP layers and no draft drafts with them (auto or --method mtp)
    mtp = dinfo is None and how in ("auto", "mtp") and tinfo.has_mtp
    draft_max = req.draft_max
    if draft_max is None:  # run's: auto plans up to its longest draft, a forced method its default
        draft_max = AUTO_DRAFT_MAX if how == "auto" else DraftOptions().draft_max
    est = plan(
        tinfo, dinfo, n_ctx=req.ctx, cache_type_k=req.cache_type_k, cache_type_v=req.cache_type_v,
        flash_attn=req.flash_attn, draft_max=draft_max, margin_gib=req.margin,
        ngl_target=parse_layers(req.gpu_layers, "-ngl"), ngl_draft=parse_layers(req.gpu_layers_draft, "-ngld"),
        method=how, mtp=mtp,
    )
    if req.as_json:
        console.write_json(est.to_dict())
    else:
        budget_table(est)
        if not est.fits:
            for tip in suggestions(est):
                console.note(f"to fit: {tip}")
    return 0 if est.fits else 1

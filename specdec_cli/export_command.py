"""``specdec export`` as a library call: resolve the pair and its settings as ``run`` would, then export."""

from __future__ import annotations

from pathlib import Path

from .errors import SpecdecError, UsageError
from .export import Export, ExportSpec, export


def export_pair(
    engine: str,
    *,
    pair: str | None = None,
    target: str | None = None,
    draft: str | None = None,
    registry: Path | None = None,
    draft_max: int | None = None,
    draft_min: int | None = None,
    p_min: float | None = None,
    ctx: int | None = None,
    gpu_layers: int | None = None,
    gpu_layers_draft: int | None = None,
    tensor_parallel: int | None = None,
    target_repo: str | None = None,
    draft_repo: str | None = None,
) -> Export:
    from .registry import load_registry
    from .run_command import draft_settings
    from .selection import select

    reg = load_registry(registry)
    entry = reg.get(pair) if pair else None
    if entry is None and not target:
        raise UsageError("nothing to export", hint="pass --pair NAME, or --target T --draft D")
    try:
        sel = select(reg, pair=pair, target=target, draft=draft)
    except SpecdecError:
        if entry is None:
            raise
        sel = None  # not on this machine: export by repository, for a server elsewhere
    if sel is not None:
        method = sel.method or (entry.method if entry else None)
        if method is None:
            raise UsageError("no draft to export", hint="pass --draft FILE or a --pair")
        opts, sources = draft_settings(sel, draft_max, draft_min, p_min)
        spec_target, spec_draft = str(sel.target), str(sel.draft) if sel.draft else None
        n_vocab = (sel.target_info.n_vocab, sel.draft_info.n_vocab if sel.draft_info else None)
        kv = sel.draft_info.kv if sel.draft_info else {}
    else:
        from .engine.runner import DraftOptions

        d = DraftOptions()
        opts = DraftOptions(
            draft_max=draft_max or entry.draft_max or d.draft_max,
            draft_min=draft_min if draft_min is not None else (entry.draft_min or d.draft_min),
            p_min=p_min if p_min is not None else (entry.draft_p_min if entry.draft_p_min is not None else d.p_min),
        )
        sources = {"draft_max": "flag" if draft_max else ("registry" if entry.draft_max else "default")}
        method = entry.method
        spec_target = target or entry.target_path or (entry.target_repos[0] if entry.target_repos else None)
        spec_draft = draft or entry.draft_path or entry.draft_repo
        n_vocab, kv = (None, None), {}
        if spec_target is None:
            raise SpecdecError(f"pair '{entry.name}' names no target", hint="pass --target")
    spec = ExportSpec(
        method=method,
        target=spec_target,
        draft=spec_draft if method != "ngram" else None,
        draft_max=opts.draft_max,
        draft_min=opts.draft_min,
        p_min=opts.p_min,
        ctx=ctx,
        gpu_layers=gpu_layers,
        gpu_layers_draft=gpu_layers_draft,
        tensor_parallel=tensor_parallel,
        settings_source={"flag": "flags", "default": "defaults"}.get(sources["draft_max"], sources["draft_max"]),
        target_repo=target_repo,
        draft_repo=draft_repo or (entry.draft_repo if entry and method in ("eagle3", "dflash", "dspark") else None),
        target_n_vocab=n_vocab[0],
        draft_n_vocab=n_vocab[1],
        draft_block_size=kv.get("dflash.block_size"),
        draft_has_confidence_head=kv.get("dflash.has_confidence_head"),
    )
    return export(spec, engine)

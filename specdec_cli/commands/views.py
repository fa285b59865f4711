"""Human-readable tables for ``pairs``, ``inspect`` and ``check`` (their JSON forms come from ``to_dict``)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..terminal import console
from ..terminal.console import human_bytes

out = Console(highlight=False, soft_wrap=False)


def human_count(n: int | None) -> str:
    if not n:
        return "-"
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def pairs_table(entries) -> None:
    wide = out.width >= 120  # the draft's source only fits a wide terminal; --json always has it
    table = Table(title=None, box=None, header_style="bold")
    for col in ("name", "method", "target", "draft max", "p-min") + (("draft source",) if wide else ()):
        table.add_column(col, no_wrap=True)
    for e in entries:
        row = [e.name, e.method, f"{e.target_family} {e.target_size}", _s(e.draft_max), _s(e.draft_p_min)]
        if wide:
            row.append(_draft_source(e))
        table.add_row(*row)
    out.print(table)
    if not entries:
        out.print("no pairs match")


def _draft_source(e) -> str:
    """Where an entry's draft comes from: a file, a repo, the target's own MTP layers, or nothing."""
    if e.method == "mtp":
        return "(the target's MTP layers)"
    return e.draft_path or e.draft_repo or "(none)"


def info_table(info) -> None:
    d = info.to_dict()
    table = Table(box=None, show_header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    rows = [
        ("file", str(info.path)),
        ("size", human_bytes(info.file_size)),
        ("architecture", info.arch),
        ("name", info.name or "-"),
        ("family / scale", f"{info.family or '-'} / {info.scale or '-'}"),
        ("parameters", human_count(info.n_params)),
        ("file type", info.file_type or "-"),
        ("layers", _s(info.n_layer)),
        ("width (n_embd)", _s(info.n_embd)),
        ("heads / kv heads", f"{_s(info.n_head)} / {_s(info.n_head_kv)}"),
        ("context (train)", _s(info.n_ctx_train)),
        ("memory", info.memory_summary()),
        ("vocabulary", f"{info.vocab_type or '-'} ({info.vocab_model or '-'}), {info.n_vocab} tokens"),
        ("bos / eos", f"{_s(info.bos_id)} (add {info.add_bos}) / {_s(info.eos_id)} (add {info.add_eos})"),
        ("chat template", "yes" if info.chat_template else "no"),
        ("speculative method", info.spec_method or "none (usable as a target or a classic draft)"),
    ]
    if info.has_mtp:
        n = info.n_nextn
        rows.insert(rows.index(("memory", info.memory_summary())) + 1,
                    ("MTP", f"{n} nextn layer{'s' if n != 1 else ''} (specdec run --method mtp)"))
    for k, v in rows:
        table.add_row(k, v)
    for k, v in (d.get("spec_info") or {}).items():
        table.add_row(f"  {k}", str(v))
    out.print(table)


def verdict_table(verdict, tinfo, dinfo=None) -> None:
    """``dinfo`` None: the target checked alone, drafting for itself (MTP)."""
    table = Table(box=None, header_style="bold")
    table.add_column("check", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for c in verdict.checks:
        table.add_row(c.name, "ok" if c.ok else "FAIL", c.detail, style=None if c.ok else "red")
    out.print(table)
    for w in verdict.warnings:  # diagnostics on stderr: the table and the verdict are the result
        console.warn(w)
    for e in verdict.errors:
        console.error_line(e)
    if dinfo is None:
        word = "can draft for itself (specdec run --method mtp)" if verdict.ok else "cannot draft for itself"
        out.print(f"{tinfo.path.name}: {word}", markup=False)
        return
    word = "compatible" if verdict.ok else "incompatible"
    out.print(f"{dinfo.path.name} -> {tinfo.path.name}: {word}", markup=False)


def _s(v) -> str:
    return "-" if v is None else str(v)


def budget_table(est, console=None) -> None:
    """Component, device and bytes, then each device's total against its free memory."""
    con = console or out
    table = Table(box=None, header_style="bold")
    for col, just in (("model", "left"), ("component", "left"), ("device", "left"), ("size", "right")):
        table.add_column(col, justify=just, no_wrap=True)
    for c in est.components:
        table.add_row(c.model, c.what, c.device, human_bytes(c.bytes))
    con.print(table)
    for d in est.devices:
        if not d.usable:
            con.print(f"{d.name} ({d.description}): not usable by this llama-cpp-python build "
                      f"(reinstall with CMAKE_ARGS=\"-DGGML_CUDA=on\")", markup=False)
            continue
        need = est.used(d.name)
        margin = f" + {human_bytes(est.margin)} margin" if d.is_gpu and est.margin else ""
        short = est.short(d)
        verdict = "fits" if short == 0 else f"short by {short / 2**30:.2f} GiB"
        con.print(f"{d.name}: needs {human_bytes(need)}{margin} of {human_bytes(d.free)} free: {verdict}", markup=False)
    gpus = [d for d in est.devices if d.is_gpu]
    if gpus:
        con.print(f"offload: target -ngl {est.ngl_target}, draft -ngld {est.ngl_draft}", markup=False)
    line = rollback_line(est)
    if line:
        con.print(line, markup=False)


def rollback_line(est) -> str | None:
    """How rejected drafts leave each model's memory, where that costs memory (snapshots, checkpoints)."""
    from ..models.memory_kinds import Rollback

    parts = []
    for role, how in est.rollback.items():
        if how == Rollback.SNAPSHOTS:
            parts.append(f"{role} keeps {est.n_rs_seq} recurrent-state snapshots (n_rs_seq {est.n_rs_seq})")
        elif how == Rollback.CHECKPOINT:
            parts.append(f"{role} checkpoints its recurrent state in host memory")
    return "rollback: " + "; ".join(parts) if parts else None


def models_table(found) -> None:
    table = Table(box=None, header_style="bold")
    for col in ("model", "size", "arch", "quant"):
        table.add_column(col, no_wrap=True)
    for col in ("completes", "where"):
        table.add_column(col, overflow="fold")
    home = str(Path.home())
    for m in found:
        where = m.repo or (m.source.replace(home, "~", 1) if m.source.startswith(home) else m.source)
        arch = m.error and "unreadable" or (m.spec_method or m.arch or "-")
        table.add_row(m.name, m.display_size, arch, m.quant or "-", ", ".join(m.pairs) or "-", where)
    out.print(table)
    if not found:
        out.print("no GGUF files found (Hugging Face cache, specdec's model folder, --dir, SPECDEC_MODEL_DIRS)")

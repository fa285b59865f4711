"""Choosing the target and draft files for a run, and vetting the pair before any weights load.

Three ways in, as ``specdec run`` offers them:
- ``--pair NAME``: the registry entry's files (local paths or the Hugging Face cache);
- ``--target PATH --draft PATH``: the two files as given;
- ``--target PATH`` alone: a compatible draft from the registry, else from the GGUFs
  beside the target (the smallest one whose vocabulary matches).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .compat import Verdict, check_pair, check_vocab
from .errors import IncompatibleError, SpecdecError, UsageError
from .gguf_meta import GGUFInfo, read_gguf
from .hub import pull_command
from .registry import PairEntry, Registry, resolve_local


@dataclass
class Selection:
    target: Path
    target_info: GGUFInfo
    draft: Path | None = None
    draft_info: GGUFInfo | None = None
    method: str | None = None  # None = the target alone
    entry: PairEntry | None = None
    how: str = ""  # how the draft was chosen, for the stderr notes
    warnings: list[str] = field(default_factory=list)
    verdict: Verdict | None = None


def fetch_missing(
    registry: Registry,
    *,
    pair: str | None = None,
    target: str | None = None,
    draft: str | None = None,
    no_draft: bool = False,
    quant: str | None = None,
    yes: bool = False,
) -> tuple[str | None, str | None]:
    """Download what a run needs and is not local yet: a pair's files, or hf:// references.

    Asks on a terminal, proceeds with ``yes``, refuses in a script without it, and never
    touches the network under HF_HUB_OFFLINE (the error names the files and the pull command).
    Returns --target/--draft as local paths (references resolved).
    """
    from . import hub

    confirm = _confirm(yes)
    if pair:
        entry = registry.get(pair)
        roles = [r for r in ("target", "draft") if not (r == "target" and target)]
        if draft or no_draft or entry.method == "ngram":
            roles = [r for r in roles if r != "draft"]
        if roles:
            hub.pull(entry, quant, confirm=confirm, roles=roles)
    resolved = [str(hub.resolve_model_arg(x, confirm=confirm)) if x else None for x in (target, draft)]
    return resolved[0], resolved[1]


def _confirm(yes: bool):
    import sys

    if yes:
        return None
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        from .hub import decline

        return decline  # a script: DownloadDeclined says to pass --yes

    def ask(files) -> bool:
        import typer

        for f in files:
            typer.echo(f"  {f.describe()}", err=True)
        return typer.confirm("download these into the Hugging Face cache?", default=True, err=True)

    return ask


def select(
    registry: Registry,
    *,
    pair: str | None = None,
    target: str | None = None,
    draft: str | None = None,
    no_draft: bool = False,
    quant: str | None = None,
    method: str | None = None,
) -> Selection:
    """``method`` forces the drafting method the draft is checked for (default: what the
    draft GGUF is, an EAGLE-3/DFlash/DSpark head or a classic draft model)."""
    if no_draft and draft:
        raise UsageError("--draft and --no-draft contradict each other", hint="pass one of them")
    entry = registry.get(pair) if pair else None
    if entry is not None:
        files = resolve_local(entry, quant)
        target_path = Path(target) if target else files.target
        draft_path = Path(draft) if draft else files.draft
        missing = [m for m in files.missing if not (target and m.startswith("target"))]
        missing = [m for m in missing if not ((draft or no_draft) and m.startswith("draft"))]
        if missing:
            raise SpecdecError(
                f"pair '{entry.name}' is not on this machine: missing {'; '.join(missing)}",
                hint=f"run `{pull_command(entry.name, quant)}`, set target_path/draft_path in your pairs.toml, "
                "or pass --target/--draft",
            )
    elif target:
        target_path, draft_path = Path(target), Path(draft) if draft else None
    else:
        raise UsageError("no model given", hint="pass --pair NAME, or --target FILE.gguf [--draft FILE.gguf]")

    tinfo = read_gguf(target_path)
    sel = Selection(target=target_path, target_info=tinfo)
    if no_draft:
        sel.how = "--no-draft"
        return sel
    if entry is not None and entry.method == "ngram":
        sel.method, sel.entry, sel.how = "ngram", entry, f"pair {entry.name}"
        return sel
    if draft_path is None:
        return _auto_draft(registry, sel, method)
    sel.entry = entry
    sel.how = f"pair {entry.name}" if entry and not draft else "--draft"
    return _vet(sel, draft_path, entry, method)


def _vet(sel: Selection, draft_path: Path, entry: PairEntry | None, method: str | None = None) -> Selection:
    dinfo = read_gguf(draft_path)
    method = method or dinfo.spec_method or (entry.method if entry and entry.method != "ngram" else "draft")
    verdict = check_pair(
        sel.target_info,
        dinfo,
        method=method,
        entry_family=entry.target_family if entry else None,
        entry_size=entry.target_size if entry else None,
    )
    if not verdict.ok:
        raise IncompatibleError(
            f"{draft_path.name} cannot draft for {sel.target.name}: {verdict.errors[0]}",
            hint="pick a draft of the same model family and vocabulary (specdec pairs lists them), or use --no-draft",
        )
    sel.draft, sel.draft_info, sel.method, sel.verdict = draft_path, dinfo, method, verdict
    sel.warnings.extend(verdict.warnings)
    return sel


def _auto_draft(registry: Registry, sel: Selection, method: str | None = None) -> Selection:
    """Find a draft for a target given alone: registry entries first, then the target's folder."""
    info = sel.target_info
    want = method or "draft"
    for entry in registry.for_target(info.family or "", info.scale):
        if entry.method != want:
            continue
        files = resolve_local(entry)
        if files.draft is not None and files.draft.resolve() != sel.target.resolve():
            try:
                chosen = _vet(sel, files.draft, entry)
            except SpecdecError:
                continue
            chosen.entry, chosen.how = entry, f"registry pair {entry.name}"
            return chosen
    best: tuple[int, Path, GGUFInfo] | None = None
    for path in sorted(sel.target.parent.glob("*.gguf")):
        if path.resolve() == sel.target.resolve():
            continue
        try:
            cand = read_gguf(path)
        except SpecdecError:
            continue
        if cand.spec_method != (None if want == "draft" else want):
            continue
        if want == "draft" and cand.n_params >= info.n_params:
            continue
        if not all(c.ok for c in check_vocab(info, cand)):
            continue
        if best is None or cand.n_params < best[0]:
            best = (cand.n_params, path, cand)
    if best is None:
        sel.how = "none found"
        sel.warnings.append(
            f"no compatible draft found in the registry or next to {sel.target.name}; "
            "running the target alone (pass --draft FILE to choose one)"
        )
        return sel
    chosen = _vet(sel, best[1], None, method)
    chosen.how = f"found next to the target: {best[1].name}"
    return chosen

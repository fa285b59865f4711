"""Which draft serves a target, vetted before any weights load.

A draft is given (``--draft``, a pair's file) or found: the registry's entries for the target's
family and size first, then the GGUFs beside the target (the smallest whose vocabulary matches).
Either way :func:`vet` checks the pairing, so a draft for another base or size is refused here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import IncompatibleError, SpecdecError
from ..models.meta import GGUFInfo, read_gguf
from ..models.methods import Method
from .compat import Verdict, check_pair, vocab_matches
from .local import resolve_local
from .registry import PairEntry, Registry


@dataclass(frozen=True)
class DraftChoice:
    """The draft for a target (or none), how it was chosen, and what the pairing check said."""

    path: Path | None
    info: GGUFInfo | None
    method: Method | None  # what the draft is; NGRAM for an n-gram pair; None: the target alone
    how: str  # for the notes: "--draft", "pair NAME", "registry pair NAME", "found next to the target: F"
    entry: PairEntry | None = None
    verdict: Verdict | None = None
    warnings: tuple[str, ...] = ()


def vet(target: Path, target_info: GGUFInfo, draft: Path, entry: PairEntry | None, how: str,
        method: Method | None = None, draft_info: GGUFInfo | None = None) -> DraftChoice:
    """Check ``draft`` against the target; ``method`` forces what it is checked as (default: what the
    GGUF is, an EAGLE-3/DFlash/DSpark head or a classic draft model). ``draft_info``: the draft's
    metadata when the caller has read it already. Raises IncompatibleError."""
    dinfo = draft_info or read_gguf(draft)
    entry_method = entry.method if entry and entry.method != Method.NGRAM else None
    method = Method(method or dinfo.spec_method or entry_method or Method.DRAFT)
    verdict = check_pair(
        target_info, dinfo, method=method,
        entry_family=entry.target_family if entry else None,
        entry_size=entry.target_size if entry else None,
    )
    if not verdict.ok:
        raise IncompatibleError(
            f"{draft.name} cannot draft for {target.name}: {verdict.errors[0]}",
            hint="pick a draft of the same model family and vocabulary (specdec pairs lists them), or use --no-draft",
        )
    return DraftChoice(draft, dinfo, method, how, entry, verdict, tuple(verdict.warnings))


def find_draft(registry: Registry, target: Path, target_info: GGUFInfo, method: Method | None = None) -> DraftChoice:
    """A draft for a target given alone: registry entries first, then the target's folder."""
    want = method or Method.DRAFT
    for entry in registry.for_target(target_info.family or "", target_info.scale):
        if entry.method != want:
            continue
        files = resolve_local(entry)
        if files.draft is not None and files.draft.resolve() != target.resolve():
            try:
                return vet(target, target_info, files.draft, entry, f"registry pair {entry.name}")
            except SpecdecError:
                continue
    best, best_info = _beside(target, target_info, want)
    if best is None:
        return DraftChoice(None, None, None, "none found", warnings=(
            f"no compatible draft found in the registry or next to {target.name}; "
            "running the target alone (pass --draft FILE to choose one)",
        ))
    return vet(target, target_info, best, None, f"found next to the target: {best.name}", method, best_info)


def _beside(target: Path, target_info: GGUFInfo, want: Method) -> tuple[Path | None, GGUFInfo | None]:
    """The smallest GGUF beside the target that is a ``want`` draft with the target's vocabulary,
    and its metadata (so it is read once)."""
    best: tuple[int, Path, GGUFInfo] | None = None
    for path in sorted(target.parent.glob("*.gguf")):
        if path.resolve() == target.resolve():
            continue
        try:
            cand = read_gguf(path)
        except SpecdecError:
            continue
        if cand.spec_method != (None if want == Method.DRAFT else want):
            continue
        if want == Method.DRAFT and cand.n_params >= target_info.n_params:
            continue
        if not vocab_matches(target_info, cand):
            continue
        if best is None or cand.n_params < best[0]:
            best = (cand.n_params, path, cand)
    return (best[1], best[2]) if best else (None, None)

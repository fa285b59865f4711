"""Which of a registry pair's files are already on this machine, without downloading anything.

``specdec run --pair`` and ``specdec models`` need a pair's target and draft as local paths: the
entry's ``*_path`` when it has one, else the file its repo and pattern name in the Hugging Face
cache. The registry only describes pairs; finding their files is the hub package's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..hub.cache import find_cached
from ..models.methods import Method

if TYPE_CHECKING:
    from .registry import PairEntry

__all__ = ["ResolvedFiles", "resolve_local"]


@dataclass
class ResolvedFiles:
    """What of an entry is already on disk; ``missing`` says, in words, what is not."""

    target: Path | None
    draft: Path | None
    missing: list[str] = field(default_factory=list)


def resolve_local(entry: PairEntry, quant: str | None = None) -> ResolvedFiles:
    """Find the entry's target and draft GGUFs locally (``*_path`` first, then the HF cache). Never downloads."""
    missing: list[str] = []

    target: Path | None = None
    if entry.target_path:
        target = _local_path("target", entry.target_path, missing)
    elif entry.target_repos and entry.target_file:
        q = quant or entry.target_quant or "*"
        pattern = entry.target_file.replace("{quant}", q)
        for repo in entry.target_repos:
            target = find_cached(repo, pattern)
            if target:
                break
        else:
            also = f"; also looked in {', '.join(entry.target_repos[1:])}" if len(entry.target_repos) > 1 else ""
            missing.append(f"target {entry.target_repos[0]}/{pattern} (not in the Hugging Face cache{also})")
    else:
        missing.append(f"target {entry.target_family} {entry.target_size} (the entry names no target_path or target_repos)")

    draft: Path | None = None
    if Method(entry.method).needs_draft_file:
        if entry.draft_path:
            draft = _local_path("draft", entry.draft_path, missing)
        elif entry.draft_repo:
            draft = find_cached(entry.draft_repo, entry.draft_file)
            if draft is None:
                missing.append(f"draft {entry.draft_repo}/{entry.draft_file} (not in the Hugging Face cache)")
        else:  # a validated entry always has one of the two
            missing.append("draft (the entry names no draft_path or draft_repo)")
    return ResolvedFiles(target=target, draft=draft, missing=missing)


def _local_path(side: str, value: str, missing: list[str]) -> Path | None:
    path = Path(value).expanduser()
    if path.is_file():
        return path
    missing.append(f"{side} {value} (the {side}_path does not exist)")
    return None

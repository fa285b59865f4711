"""The one module that reads the Hugging Face hub cache.

Files specdec downloads land in the standard cache (``HF_HOME`` / ``HF_HUB_CACHE``), laid out by
``huggingface_hub``; ``specdec run``, ``pull`` and ``models`` all need to find them there again,
without the network. Every lookup goes through here, so there is one notion of "this model is
cached": every shard present, links to blobs that never finished left out, the snapshot that
``refs/main`` names first, then the other snapshots newest first.

``huggingface_hub``'s own cache API is used where it answers the question:
``constants.HF_HUB_CACHE`` is the cache (read at each call, so a changed ``HF_HUB_CACHE`` seen by
huggingface_hub is seen here), and ``try_to_load_from_cache`` finds a file by exact name in the
``main`` (or a named) revision. It does not do the rest, so that part walks the documented layout
(``models--org--name/{refs,snapshots}``) itself:

- glob patterns (a registry's ``draft_file = "*.gguf"``) and case-insensitive names:
  ``try_to_load_from_cache`` takes one exact file name;
- snapshots other than the one a ref names (a file fetched at an older commit still counts);
- sets of files that must all be present (the shards of a split GGUF) in one snapshot;
- listing every cached GGUF: ``scan_cache_dir`` drops a whole repo when one snapshot link is
  broken or one ref names a missing commit (so a half-deleted quant would hide the complete ones),
  and it resolves the cache folder, so its paths are not the ones the user configured.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecdecError
from .filenames import is_gguf, is_later_shard, pattern_hit, pick_quant_files, shard_names
from .refs import ModelRef

__all__ = [
    "CachedFile",
    "hf_hub_cache",
    "repo_dir",
    "snapshots",
    "cached_file",
    "find_cached",
    "cached_files",
    "cached_path",
    "repo_of_cached",
    "cached_gguf_files",
]

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_GLOB_CHARS = set("*?[")


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache directory, as huggingface_hub sees it now (HF_HOME / HF_HUB_CACHE)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def repo_dir(repo: str) -> Path:
    """``<cache>/models--org--name``, the folder of a model repo (it may not exist)."""
    return hf_hub_cache() / ("models--" + repo.replace("/", "--"))


def _read_ref(folder: Path, revision: str) -> str | None:
    try:
        return (folder / "refs" / revision).read_text().strip() or None
    except OSError:
        return None


def snapshots(repo: str, revision: str | None = None) -> list[Path]:
    """Snapshot folders to look in: for ``revision=None`` the one ``refs/main`` names first, then
    the others newest first; else only the revision's own (a commit, or a branch/tag ref)."""
    return _snapshots_of(repo_dir(repo), revision)


def _snapshots_of(folder: Path, revision: str | None) -> list[Path]:
    snaps = folder / "snapshots"
    if not snaps.is_dir():
        return []
    if revision is not None:
        commit = revision if _COMMIT_RE.match(revision) else _read_ref(folder, revision)
        return [snaps / commit] if commit and (snaps / commit).is_dir() else []
    dirs = sorted((p for p in snaps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    main = _read_ref(folder, "main")
    dirs.sort(key=lambda p: p.name != main)  # stable: keeps mtime order among the rest
    return dirs


def _snapshot_files(snapshot: Path) -> list[str]:
    """Repo-relative paths of the complete files in a snapshot (links to missing blobs left out)."""
    return sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())


def cached_file(repo: str, filename: str, revision: str | None = None) -> Path | None:
    """``filename`` (exact, repo-relative) in the snapshot ``revision`` names (a commit, branch or
    tag; default main), if it is complete there: huggingface_hub's own lookup, asked only when the
    repo has a folder in the cache (importing it takes 0.1 s, a tenth of a short run's start-up,
    and ``specdec run -t FILE`` asks this of every registry pair of the target's family)."""
    if not (repo_dir(repo) / "snapshots").is_dir():
        return None
    from huggingface_hub import try_to_load_from_cache

    try:
        hit = try_to_load_from_cache(repo, filename, cache_dir=hf_hub_cache(), revision=revision)
    except ValueError:  # a repo id or file name it rejects (HFValidationError): the walk decides
        return None
    return Path(hit) if isinstance(hit, str) and Path(hit).is_file() else None


def find_cached(repo: str, pattern: str) -> Path | None:
    """A cached file of ``repo`` matching ``pattern`` (exact name or glob, case-insensitive, the
    registry's rules: see ``filenames.pattern_hit``). For a split GGUF the first shard stands for
    the whole (whether the other shards are there is not checked here)."""
    if not _GLOB_CHARS & set(pattern):
        hit = cached_file(repo, pattern, None)
        if hit is not None:
            return hit
    for snap in snapshots(repo):
        hits = sorted(snap / rel for rel in _snapshot_files(snap)
                      if pattern_hit(rel, pattern) and not is_later_shard(rel, pattern))
        if hits:
            return hits[0]
    return None


def _cached_set(repo: str, revision: str | None, pick: Callable[[list[str]], list[str] | None]) -> list[Path] | None:
    """The first snapshot where ``pick(files)`` names files that are all present: their paths."""
    for snap in snapshots(repo, revision):
        try:
            names = pick(_snapshot_files(snap))
        except SpecdecError:
            continue
        if names and all((snap / n).is_file() for n in names):
            return [snap / n for n in names]
    return None


def cached_files(ref: ModelRef) -> list[Path] | None:
    """Every file ``ref`` stands for (all shards of a split GGUF, in order) if one snapshot holds
    them all, else None. No network."""
    if ref.filename:
        names = shard_names(ref.filename)
        exact = [cached_file(ref.repo, n, ref.revision) for n in names]
        if all(p is not None for p in exact):
            return exact  # type: ignore[return-value]
        return _cached_set(ref.repo, ref.revision, lambda files: names)
    return _cached_set(ref.repo, ref.revision, lambda files: pick_quant_files(files, ref.quant, repo=ref.repo))


def cached_path(ref: ModelRef) -> Path | None:
    """The local path of ``ref`` if the HF cache holds it whole (every shard), else None. No network.

    For a split GGUF this is the first shard; the others are in the same folder.
    """
    found = cached_files(ref)
    return found[0] if found else None


def repo_of_cached(path: Path) -> tuple[str | None, str | None]:
    """(org/repo, repo-relative path) for a path inside the HF cache's snapshots, else (None, None)."""
    parts = path.parts
    for i, part in enumerate(parts):
        if part.startswith("models--") and i + 3 < len(parts) and parts[i + 1] == "snapshots":
            bits = part.split("--")
            if len(bits) >= 3:
                return "/".join(bits[1:3]), "/".join(parts[i + 3:])
    return None, None


@dataclass(frozen=True)
class CachedFile:
    """A complete GGUF in the cache: its snapshot path, ``org/repo`` and the snapshot's commit."""

    path: Path
    repo: str
    revision: str


def cached_gguf_files() -> list[CachedFile]:
    """Every complete GGUF in the cache's model snapshots: repos by name, each repo's snapshots in
    :func:`snapshots` order, files sorted within a snapshot (later shards included)."""
    cache = hf_hub_cache()
    if not cache.is_dir():
        return []
    out: list[CachedFile] = []
    for folder in sorted(cache.glob("models--*")):
        bits = folder.name.split("--")
        if len(bits) < 3 or not folder.is_dir():
            continue
        repo = "/".join(bits[1:3])
        for snap in _snapshots_of(folder, None):
            for path in sorted(snap.rglob("*")):
                if is_gguf(path.name) and path.is_file():  # is_file: the blob is complete
                    out.append(CachedFile(path, repo, snap.name))
    return out


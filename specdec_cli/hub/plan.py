"""What a pull would fetch, worked out before anything is downloaded.

A confirmation prompt must show the files and sizes, and a script must be told what is missing,
before a byte moves; so planning is separate from downloading. Cached files are planned without
the network; the rest by listing the repos (unless offline, or when the caller said no listing).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from . import listing as remote
from .cache import cached_files, repo_of_cached
from .env import is_offline
from .errors import RemoteFileNotFoundError
from .filenames import describe_quants, match_files, pick_quant_files, shard_names
from .refs import ModelRef
from .sizes import human_size

__all__ = ["PlannedFile", "cached_plan", "plan_ref", "remote_names", "remote_plan", "pull_command"]


@dataclass
class PlannedFile:
    """One model a pull needs: where it comes from, whether it is already here, how big it is.

    ``files`` are repo-relative names (every shard of a split GGUF, in order); for a file that is
    missing while offline they are the registry's name or pattern. ``local_path`` is set when
    ``cached`` (the first shard). ``size`` is the total in bytes when known.
    """

    role: str  # "target" | "draft" | "model"
    repo: str | None
    files: tuple[str, ...]
    revision: str | None = None
    size: int | None = None
    cached: bool = False
    local_path: Path | None = None

    @property
    def label(self) -> str:
        """``org/repo/file.gguf`` (``... (+2 parts)`` for a split GGUF), or the local path."""
        if self.repo is None:
            return str(self.local_path or self.files[0])
        first = f"{self.repo}/{self.files[0]}"
        return first + (f" (+{len(self.files) - 1} parts)" if len(self.files) > 1 else "")

    def describe(self) -> str:
        """One line for a confirmation prompt: ``target org/repo/file.gguf (4.7 GB)``."""
        size = f" ({human_size(self.size)})" if self.size is not None else ""
        return f"{self.role} {self.label}{size}"

    def to_dict(self) -> dict:
        return {
            "role": self.role, "repo": self.repo, "files": list(self.files), "revision": self.revision,
            "size": self.size, "cached": self.cached,
            "local_path": str(self.local_path) if self.local_path else None,
        }


def cached_plan(role: str, path: Path, revision: str | None = None) -> PlannedFile | None:
    """A PlannedFile for a file found on disk; None if it is a split GGUF with parts missing."""
    names = shard_names(path.name)
    paths = [path.parent / n for n in names]
    if not all(p.is_file() for p in paths):
        return None
    repo, rel = repo_of_cached(path)
    files = tuple(str(PurePosixPath(rel).with_name(n)) for n in names) if rel else tuple(str(p) for p in paths)
    return PlannedFile(role, repo, files, revision, sum(p.stat().st_size for p in paths), True, path)


def plan_ref(ref: ModelRef, *, token: str | None = None) -> PlannedFile:
    """What fetching ``ref`` involves: cached (no network), else the remote file names and size
    (network, unless offline: then the names are the reference's own and the size is unknown)."""
    found = cached_files(ref)
    if found:
        return PlannedFile("model", ref.repo, tuple(repo_of_cached(p)[1] or p.name for p in found), ref.revision,
                           sum(p.stat().st_size for p in found), True, found[0])
    if is_offline():
        return PlannedFile("model", ref.repo, (ref.filename or str(ref),), ref.revision)
    names, sizes = remote_names(ref, token=token, sizes=True)
    size = sum(sizes) if sizes and all(s is not None for s in sizes) else None  # type: ignore[misc]
    return PlannedFile("model", ref.repo, tuple(names), ref.revision, size, False, None)


def remote_names(ref: ModelRef, *, token, sizes: bool = False) -> tuple[list[str], list[int | None]]:
    """The repo-relative files ``ref`` stands for, and their sizes when the repo was listed.

    A named file needs no listing (its shards follow from its name) unless ``sizes`` is asked for.
    """
    if ref.filename and not sizes:
        return shard_names(ref.filename), []
    tree = remote.list_repo_files(ref.repo, ref.revision, token)
    paths = [f.path for f in tree]
    if ref.filename:
        names = shard_names(ref.filename)
        if not set(names) <= set(paths):
            names = match_files(paths, ref.filename, repo=ref.repo) or []
        if not names:
            raise RemoteFileNotFoundError(f"{ref.repo} has no file {ref.filename}",
                                          hint=f"its GGUF quants: {describe_quants(paths)}")
    else:
        names = pick_quant_files(paths, ref.quant, repo=ref.repo)
    by_path = {f.path: f.size for f in tree}
    return names, [by_path.get(n) for n in names]


def pull_command(name: str, quant: str | None = None, registry_file: str | Path | None = None) -> str:
    """``specdec pull NAME [--quant Q] [--registry FILE]``, quoted for a POSIX shell where needed."""
    cmd = f"specdec pull {shlex.quote(name)}"
    if quant:
        cmd += f" --quant {shlex.quote(quant)}"
    if registry_file:
        cmd += f" --registry {shlex.quote(str(registry_file))}"
    return cmd


def remote_plan(role: str, repo: str, names: list[str], tree: list[remote.RemoteFile]) -> PlannedFile:
    sizes = {f.path: f.size for f in tree}
    known = [sizes.get(n) for n in names]
    size = sum(known) if all(s is not None for s in known) else None  # type: ignore[misc]
    return PlannedFile(role, repo, tuple(names), None, size, False, None)

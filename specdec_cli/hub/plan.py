"""What a pull would fetch, worked out before anything is downloaded.

A confirmation prompt must show the files and sizes, and a script must be told what is missing,
before a byte moves; so planning is separate from downloading. Cached files are planned without
the network; the rest by listing the repos (unless offline, or when the caller said no listing).
"""

from __future__ import annotations

import shlex
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import SpecdecError, UsageError
from ..methods import Method
from ..registry import PairEntry
from . import listing as remote
from .cache import cached_files, repo_of_cached
from .env import is_offline
from .errors import DraftNotGGUFError, RemoteFileNotFoundError, RepoNotFoundError
from .filenames import describe_quants, is_gguf, match_files, pick_quant_files, shard_names
from .local import resolve_local
from .refs import ModelRef
from .sizes import human_size

__all__ = ["PlannedFile", "plan_ref", "remote_names", "pair_files", "pull_command", "entry_pull_command"]


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


def _cached_plan(role: str, path: Path, revision: str | None = None) -> PlannedFile | None:
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


def _entry_registry_file(entry: PairEntry) -> str | None:
    """The --registry file an entry came from (None for the built-in and the user registry)."""
    if not entry.source:
        return None
    from ..registry import _display, builtin_registry_path, user_registry_path

    if entry.source in (_display(builtin_registry_path()), _display(user_registry_path())):
        return None
    return entry.source


def entry_pull_command(entry: PairEntry, quant: str | None) -> str:
    """The ``specdec pull`` command that fetches this registry pair (with its ``--registry`` file)."""
    return pull_command(entry.name, quant, _entry_registry_file(entry))


def pair_files(
    entry: PairEntry,
    quant: str | None = None,
    *,
    roles: Collection[str] = ("target", "draft"),
    token: str | None = None,
    listing: bool = True,
) -> list[PlannedFile]:
    """What ``specdec pull NAME`` needs for a registry pair, target first then draft.

    Local files (``*_path``, or the HF cache as ``resolve_local`` finds them, with every
    shard present) come back ``cached=True`` without any network access. For the rest the repos
    are listed (network) to find the exact files and sizes: ``target_repos`` in order, the first
    that has the quant wins. Under HF_HUB_OFFLINE (or ``listing=False``) nothing is listed: a missing file is planned
    under its registry name (``org/repo/pattern``) with no size.

    Raises UsageError for a quant no target repo has (listing the quants they have), a
    ``*_path`` that does not exist or a pattern that matches several models; DraftNotGGUFError
    when the draft repo holds a Hugging Face checkpoint rather than a GGUF; SpecdecError when the
    entry names no target repo, and for network failures.
    """
    local = resolve_local(entry, quant)
    q = quant or entry.target_quant or "*"
    plan: list[PlannedFile] = []
    if "target" in roles:
        plan.append(_plan_target(entry, q, local.target, token=token, may_list=listing))
    if "draft" in roles and Method(entry.method).needs_draft_file:
        plan.append(_plan_draft(entry, local.draft, token=token, may_list=listing))
    return plan


def _local_file(entry: PairEntry, role: str, value: str) -> PlannedFile:
    path = Path(value).expanduser()
    if not path.is_file():
        raise UsageError(
            f"pair '{entry.name}': {role}_path {value} does not exist",
            hint=f"fix {role}_path in {entry.source or 'your pairs.toml'} (specdec pull downloads from Hugging Face repos only)",
        )
    return PlannedFile(role, None, (str(path),), None, path.stat().st_size, True, path)


def _plan_target(entry: PairEntry, q: str, local: Path | None, *, token, may_list: bool) -> PlannedFile:
    if entry.target_path:
        return _local_file(entry, "target", entry.target_path)
    if not (entry.target_repos and entry.target_file):
        raise SpecdecError(
            f"pair '{entry.name}' names no Hugging Face repo for its target",
            hint="set target_path to a local GGUF for this pair in ~/.config/specdec/pairs.toml",
        )
    pattern = entry.target_file.replace("{quant}", q)
    if local is not None:
        planned = _cached_plan("target", local)
        if planned:
            return planned
    if not may_list or is_offline():
        return PlannedFile("target", entry.target_repos[0], (pattern,))
    seen: list[str] = []
    for repo in entry.target_repos:
        try:
            tree = remote.list_repo_files(repo, None, token)
        except RepoNotFoundError:  # a repo that is gone: try the next one
            seen.append(f"{repo} (not found)")
            continue
        names = match_files([f.path for f in tree], pattern, repo=repo)
        if names:
            return _remote_plan("target", repo, names, tree)
        seen.append(f"{repo} ({describe_quants([f.path for f in tree])})")
    asked = q if q != "*" else "a"
    raise UsageError(
        f"pair '{entry.name}': no {asked} target GGUF ({pattern}) in {', '.join(entry.target_repos)}",
        hint=f"quants available: {'; '.join(seen)}. pass --quant with one of them",
    )


def _plan_draft(entry: PairEntry, local: Path | None, *, token, may_list: bool) -> PlannedFile:
    if entry.draft_path:
        return _local_file(entry, "draft", entry.draft_path)
    repo = entry.draft_repo
    assert repo is not None  # a validated entry of a method with a draft file has draft_path or draft_repo
    if local is not None:
        planned = _cached_plan("draft", local)
        if planned:
            return planned
    if not may_list or is_offline():
        return PlannedFile("draft", repo, (entry.draft_file,))
    tree = remote.list_repo_files(repo, None, token)
    paths = [f.path for f in tree]
    names = match_files(paths, entry.draft_file, repo=repo)
    if names:
        return _remote_plan("draft", repo, names, tree)
    if not any(is_gguf(p) for p in paths):
        checkpoint = any(p.endswith((".safetensors", ".bin", ".pt")) or p == "config.json" for p in paths)
        kind = "a Hugging Face checkpoint (safetensors)" if checkpoint else "no GGUF file"
        raise DraftNotGGUFError(
            f"pair '{entry.name}': the draft repo {repo} holds {kind}, not a GGUF llama.cpp can load",
            hint="convert it to GGUF with llama.cpp's convert_hf_to_gguf.py, then set draft_path to the .gguf "
            f"for '{entry.name}' in ~/.config/specdec/pairs.toml (specdec pull fetches GGUFs only)",
        )
    raise UsageError(
        f"pair '{entry.name}': no file matching '{entry.draft_file}' in {repo}",
        hint=f"its GGUFs: {', '.join(sorted(PurePosixPath(p).name for p in paths if is_gguf(p))[:6])}; fix draft_file",
    )


def _remote_plan(role: str, repo: str, names: list[str], tree: list[remote.RemoteFile]) -> PlannedFile:
    sizes = {f.path: f.size for f in tree}
    known = [sizes.get(n) for n in names]
    size = sum(known) if all(s is not None for s in known) else None  # type: ignore[misc]
    return PlannedFile(role, repo, tuple(names), None, size, False, None)

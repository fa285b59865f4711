"""A registry pair's files made local: what ``specdec pull NAME`` would fetch, and the pull.

The hub package knows repositories, files and the cache; a pair (a target pattern over several
repos, a draft repo or a local ``*_path``) is the registry's notion, so planning and pulling a
pair lives here, over the hub. Consent works as in :mod:`specdec_cli.hub.pulls`: cache first,
then refuse offline, then ``confirm``, then download.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..errors import SpecdecError, UsageError
from ..hub import listing as remote
from ..hub.env import is_offline
from ..hub.errors import DownloadDeclined, DraftNotGGUFError, OfflineError, RepoNotFoundError
from ..hub.filenames import describe_quants, is_gguf, match_files
from ..hub.plan import PlannedFile, cached_plan, pull_command, remote_plan
from ..hub.pulls import Confirm, Decline, refused_hint
from ..hub.resumable import download_files
from ..models.methods import Method
from .local import resolve_local
from .registry import PairEntry, _display, builtin_registry_path, user_registry_path

__all__ = ["PulledPair", "pair_files", "entry_pull_command", "pull"]


def _entry_registry_file(entry: PairEntry) -> str | None:
    """The --registry file an entry came from (None for the built-in and the user registry)."""
    if not entry.source:
        return None
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
        planned = cached_plan("target", local)
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
            return remote_plan("target", repo, names, tree)
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
        planned = cached_plan("draft", local)
        if planned:
            return planned
    if not may_list or is_offline():
        return PlannedFile("draft", repo, (entry.draft_file,))
    tree = remote.list_repo_files(repo, None, token)
    paths = [f.path for f in tree]
    names = match_files(paths, entry.draft_file, repo=repo)
    if names:
        return remote_plan("draft", repo, names, tree)
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


@dataclass
class PulledPair:
    """What :func:`pull` returns: local paths (first shard for a split GGUF) and what it did.

    ``plan`` is every file of the pair (``cached`` = it was here before); ``downloaded`` those that
    were fetched. Both have ``local_path`` set afterwards."""

    target: Path | None
    draft: Path | None
    plan: list[PlannedFile] = field(default_factory=list)
    downloaded: list[PlannedFile] = field(default_factory=list)



def pull(
    entry: PairEntry,
    quant: str | None = None,
    *,
    progress: bool = True,
    confirm: Confirm | None = None,
    roles: Collection[str] = ("target", "draft"),
    token: str | None = None,
) -> PulledPair:
    """Make a registry pair's files local: ``specdec pull NAME`` and ``run --pair NAME``.

    Plans with :func:`pair_files` (no network when everything is cached, and then no
    ``confirm`` call either). Missing files under HF_HUB_OFFLINE raise OfflineError naming them
    and the exact ``specdec pull`` command. Otherwise ``confirm(missing)`` is asked (when given;
    False raises DownloadDeclined and nothing is fetched), then the files are downloaded, target
    first. ``roles`` limits the pull (e.g. ``("draft",)`` when ``run`` was given ``--target``).
    """
    plan = pair_files(entry, quant, roles=roles, token=token, listing=not isinstance(confirm, Decline))
    missing = [p for p in plan if not p.cached]
    if missing and is_offline():
        raise OfflineError(
            f"pair '{entry.name}'",
            [f"{p.repo}/{p.files[0]}" for p in missing],
            entry_pull_command(entry, quant),
        )
    if missing and confirm is not None and not confirm(missing):
        names = ", ".join(f"{p.repo}/{p.files[0]}" for p in missing)
        raise DownloadDeclined(
            f"pair '{entry.name}' is not on this machine ({names}) and was not downloaded",
            hint=refused_hint(entry_pull_command(entry, quant), confirm),
        )
    paths: dict[str, Path | None] = {"target": None, "draft": None}
    for p in plan:
        if not p.cached:
            assert p.repo is not None
            got = download_files(p.repo, list(p.files), p.revision, token=token, progress=progress)
            p.local_path = got[0]  # ``cached`` keeps saying whether it was here before the pull
        paths[p.role] = p.local_path
    return PulledPair(target=paths["target"], draft=paths["draft"], plan=plan, downloaded=missing)

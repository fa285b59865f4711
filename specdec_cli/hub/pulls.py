"""Making one model reference local: ``run --target/--draft REF`` and the downloads of a pair's pull.

The steps every entry point shares, in order: use the cache (no network), else refuse under
``HF_HUB_OFFLINE`` naming the files and the pull command, else ask ``confirm`` (when given),
then download. The caller decides how consent is asked; a ``confirm`` callback may carry a
``hint`` attribute, the caller's words for how to agree another time (the CLI says which flag),
which a refusal's hint then offers. :class:`Decline` is the answer of a caller that cannot ask.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import UsageError
from . import listing as remote
from .cache import cached_path
from .env import is_offline
from .errors import DownloadDeclined, OfflineError, RemoteFileNotFoundError
from .filenames import describe_quants, match_files, split_info
from .plan import PlannedFile, plan_ref, remote_names
from .refs import ModelRef, check_repo_id, parse_ref
from .resumable import download_files

__all__ = ["Confirm", "Decline", "refused_hint", "download", "ensure_ref", "resolve_model_arg"]

Confirm = Callable[[list[PlannedFile]], bool]


class Decline:
    """A ``confirm`` answer known before anything is asked: no. The Hub is then not even listed,
    so a missing file is reported without network access. ``hint`` says how to agree instead."""

    def __init__(self, hint: str | None = None):
        self.hint = hint

    def __call__(self, files: list[PlannedFile]) -> bool:  # noqa: ARG002 - a confirm callback
        return False

    def __repr__(self) -> str:
        return f"Decline(hint={self.hint!r})"


def refused_hint(command: str, confirm: Confirm | None) -> str:
    """The hint of a DownloadDeclined: the pull command, and the caller's way to agree, if any."""
    hint = getattr(confirm, "hint", None)
    return f"run `{command}`, or {hint}" if hint else f"run `{command}` to fetch it"


def _missing_name(ref: ModelRef) -> str:
    return f"{ref.repo}/{ref.filename}" if ref.filename else str(ref)


def download(ref: ModelRef, *, progress: bool = True, token: str | None = None) -> Path:
    """Fetch ``ref`` into the HF cache (every shard of a split GGUF) and return the local path of
    its first file. A cached file is returned without any network access; an interrupted download
    continues where it stopped. OfflineError under HF_HUB_OFFLINE when it is not cached."""
    check_repo_id(ref.repo)
    found = cached_path(ref)
    if found:
        return found
    if is_offline():
        raise OfflineError(str(ref), [_missing_name(ref)], ref.pull_command)
    names, _ = remote_names(ref, token=token)
    try:
        paths = download_files(ref.repo, names, ref.revision, token=token, progress=progress)
    except RemoteFileNotFoundError:
        # hf://org/repo/x.gguf for a model the repo splits into x-00001-of-0000N.gguf: take the split
        if not ref.filename or split_info(ref.filename):
            raise
        files = [f.path for f in remote.list_repo_files(ref.repo, ref.revision, token)]
        names = match_files(files, ref.filename, repo=ref.repo)
        if not names:
            raise UsageError(f"{ref.repo} has no file {ref.filename}",
                             hint=f"its GGUF quants: {describe_quants(files)}") from None
        paths = download_files(ref.repo, names, ref.revision, token=token, progress=progress)
    return paths[0]


def ensure_ref(ref: ModelRef, *, confirm: Confirm | None = None, progress: bool = True,
               token: str | None = None) -> Path:
    """:func:`download` for ``run --target/--draft REF``: the cached path if there is one; else
    OfflineError when offline; else ``confirm([plan])`` (DownloadDeclined on False) and fetch."""
    found = cached_path(ref)
    if found:
        return found
    if is_offline():
        raise OfflineError(str(ref), [_missing_name(ref)], ref.pull_command)
    if isinstance(confirm, Decline):  # no listing for a plan nobody will see
        raise DownloadDeclined(f"{ref} is not downloaded", hint=refused_hint(ref.pull_command, confirm))
    if confirm is not None:
        plan = plan_ref(ref, token=token)
        if not confirm([plan]):
            raise DownloadDeclined(f"{ref} is not downloaded", hint=refused_hint(ref.pull_command, confirm))
    return download(ref, progress=progress, token=token)


def resolve_model_arg(text: str, **kwargs) -> Path:
    """A ``--target``/``--draft`` value as a local path: a path is returned as given (not checked);
    a reference goes through :func:`ensure_ref` (``confirm``, ``progress``, ``token`` passed on)."""
    ref = parse_ref(text)
    if ref is None:
        return Path(text).expanduser()
    return ensure_ref(ref, **kwargs)

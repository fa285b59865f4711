"""What files a repository holds: the one request specdec makes to list a repo.

Choosing a quant or matching a registry pattern needs the repo's file names and sizes. This is
the Hub's tree API called directly, as ``HfApi.list_repo_tree`` does, but with at most one retry
so an unreachable Hub fails in seconds rather than minutes. Callers that should be patchable in
tests call it as ``listing.list_repo_files(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from .env import hf_headers, hub_endpoint, is_offline
from .errors import OfflineError, hub_errors
from .filenames import is_gguf
from .refs import ModelRef, check_repo_id

__all__ = ["RemoteFile", "list_repo_files", "list_gguf_files"]


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repo listing: repo-relative path, size in bytes, sha256 for LFS files."""

    path: str
    size: int | None = None
    sha256: str | None = None


def list_repo_files(repo: str, revision: str | None = None, token: str | None = None) -> list[RemoteFile]:
    """Every file of ``repo`` at ``revision`` with its size (network; one request per 1000 files).

    Uses the Hub's tree API (``GET /api/models/{repo}/tree/{revision}?recursive=true``) as
    ``HfApi.list_repo_tree`` does, with at most one retry so an unreachable Hub fails in seconds.
    """
    if is_offline():
        raise OfflineError(repo, [repo], f"specdec pull {ModelRef(repo, None, None, revision)}")
    from huggingface_hub.errors import FileMetadataError
    from huggingface_hub.utils import hf_raise_for_status, http_backoff

    check_repo_id(repo)
    endpoint = hub_endpoint()
    rev = quote(revision or "main", safe="")
    url: str | None = f"{endpoint}/api/models/{repo}/tree/{rev}"
    params: dict[str, Any] | None = {"recursive": "true", "expand": "false"}
    out: list[RemoteFile] = []
    with hub_errors(repo, revision=revision):
        headers = hf_headers(token)
        while url:
            r = http_backoff("GET", url, params=params, headers=headers, max_retries=1, base_wait_time=0.5,
                             timeout=30)
            hf_raise_for_status(r)
            try:
                items = r.json()
            except ValueError:
                items = None
            if not isinstance(items, list):
                raise FileMetadataError("the file listing is not a JSON list")
            for item in items:
                if item.get("type") != "file":
                    continue
                lfs = item.get("lfs") or {}
                out.append(RemoteFile(path=item["path"], size=lfs.get("size", item.get("size")),
                                      sha256=lfs.get("oid") or lfs.get("sha256")))
            url = r.links.get("next", {}).get("url")
            params = None
    return out


def list_gguf_files(repo: str, revision: str | None = None, token: str | None = None) -> list[str]:
    """The repo-relative paths of the ``.gguf`` files in ``repo`` (network), sorted."""
    return sorted(f.path for f in list_repo_files(repo, revision, token) if is_gguf(f.path))

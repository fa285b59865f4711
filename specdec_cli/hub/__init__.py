"""Getting models from Hugging Face: model references, quant choice, the cache, resumable downloads.

Everything lands in the standard Hugging Face hub cache (``HF_HOME`` / ``HF_HUB_CACHE``), laid
out by ``huggingface_hub`` itself, so files fetched here are seen by ``huggingface_hub`` and by
every other tool that reads that cache. This package knows repositories and files; a registry
pair's files (found locally, planned, pulled) are ``specdec_cli.pairing``'s job, over this one.
It may use ``models``, ``terminal`` and the shared modules. One job per module:

- ``refs``: ``hf://org/repo/file.gguf``, ``hf://org/repo@rev/file.gguf``, ``org/repo:Q4_K_M``,
  ``org/repo`` and huggingface.co URLs (:func:`parse_ref`);
- ``filenames``: quants and split GGUFs in file names, which files a quant or pattern picks;
- ``listing``: a repo's files and sizes (the one listing request);
- ``cache``: the one reader of the HF cache (:func:`cached_path`), so nothing is downloaded
  twice and cached files work offline;
- ``resumable``: downloads that continue across runs, checked against their etag;
- ``plan`` and ``pulls``: what fetching a reference needs, consent, and the download;
- ``env`` and ``errors``: ``HF_ENDPOINT``/``HF_HUB_OFFLINE``/``HF_TOKEN`` read at call time, and
  every Hub failure as a one-line ``SpecdecError`` with a hint.

This package names no CLI flag in its messages; callers say how to agree to a download through
the ``hint`` of their ``confirm`` callback (see :class:`Decline` and ``specdec_cli.commands.consent``).
"""

from __future__ import annotations

from .cache import cached_path, hf_hub_cache
from .env import hub_endpoint, is_offline
from .errors import (
    DownloadDeclined,
    DraftNotGGUFError,
    OfflineError,
    RemoteFileNotFoundError,
    RepoNotFoundError,
)
from .filenames import available_quants, match_files, pick_quant_files, quant_of, shard_names, split_info
from .listing import RemoteFile, list_gguf_files, list_repo_files
from .plan import PlannedFile, plan_ref, pull_command
from .pulls import Confirm, Decline, download, ensure_ref, resolve_model_arg
from .refs import ModelRef, parse_ref
from .sizes import human_size

__all__ = [
    "ModelRef",
    "RemoteFile",
    "PlannedFile",
    "Confirm",
    "Decline",
    "OfflineError",
    "DownloadDeclined",
    "DraftNotGGUFError",
    "RepoNotFoundError",
    "RemoteFileNotFoundError",
    "parse_ref",
    "is_offline",
    "hub_endpoint",
    "hf_hub_cache",
    "quant_of",
    "split_info",
    "shard_names",
    "list_repo_files",
    "list_gguf_files",
    "available_quants",
    "pick_quant_files",
    "match_files",
    "cached_path",
    "plan_ref",
    "download",
    "ensure_ref",
    "resolve_model_arg",
    "pull_command",
    "human_size",
]

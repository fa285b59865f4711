"""Getting models from Hugging Face: model references, quant choice, resumable downloads, pulls.

Everything lands in the standard Hugging Face hub cache (``HF_HOME`` / ``HF_HUB_CACHE``), laid
out by ``huggingface_hub`` itself, so files fetched here are seen by ``registry.resolve_local``,
by ``huggingface_hub`` and by every other tool that reads that cache.

What this module adds over a bare ``hf_hub_download``:

- **References**: ``hf://org/repo/file.gguf``, ``hf://org/repo@rev/file.gguf``, ``org/repo:Q4_K_M``,
  ``org/repo`` (a repo with a single GGUF) and huggingface.co file URLs (:func:`parse_ref`).
- **Quants**: the GGUFs of a repo are listed, the requested quant is picked, split GGUFs
  (``name-00001-of-00003.gguf``) are taken whole; a missing quant is an error that lists
  the ones that exist (:func:`pick_quant_files`).
- **The cache first**: a file already cached is used without touching the network
  (:func:`cached_path`), so nothing is downloaded twice and cached files work offline.
- **Resume across runs**: ``huggingface_hub`` 2.x resumes a dropped connection within one
  call but deletes its partial file when the process stops (Ctrl-C, a crash). Here the bytes
  go to ``blobs/<etag>.incomplete`` (the cache's own name for an interrupted download, which
  ``hf cache`` tools recognise) and a later run continues from there with a ``Range``
  request. The finished file is checked against its etag (sha256 for LFS files, the git blob
  sha1 otherwise) before it is moved into place; ``huggingface_hub`` then links it into the
  snapshot and records the revision as usual. Transfers use plain HTTP (``hf_xet``'s
  transfers cannot be resumed across runs), with ``huggingface_hub``'s own ``http_get``:
  its retries, its progress bars (on stderr), its headers and token handling.
- **Offline**: with ``HF_HUB_OFFLINE`` set (checked at call time) nothing touches the
  network; a missing file raises :class:`OfflineError`, which names the files and the
  exact ``specdec pull`` command.
- **One-line errors**: every network or Hub failure becomes a ``SpecdecError`` (or a
  ``UsageError`` for a wrong name) with a hint, never a traceback: no connection, 401/403
  (set ``HF_TOKEN``), gated repos, a repo, revision or file that does not exist, a
  truncated or corrupt download, a full disk.

``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` and ``HF_TOKEN`` are read when a function runs (not only when
``huggingface_hub`` is imported), so they can be set by the CLI or a test at any point.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import sys
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from .errors import SpecdecError, UsageError
from .registry import PairEntry, hf_hub_cache, resolve_local

__all__ = [
    "ModelRef",
    "RemoteFile",
    "PlannedFile",
    "PulledPair",
    "OfflineError",
    "DownloadDeclined",
    "DraftNotGGUFError",
    "RepoNotFoundError",
    "RemoteFileNotFoundError",
    "parse_ref",
    "is_offline",
    "hub_endpoint",
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
    "pair_files",
    "pull",
    "pull_command",
    "human_size",
]

# --------------------------------------------------------------------------- errors


class OfflineError(SpecdecError):
    """Files are needed that are not in the cache, and ``HF_HUB_OFFLINE`` forbids fetching them.

    ``missing`` lists them (``org/repo/file.gguf``); ``command`` is the ``specdec pull ...``
    command that fetches them once a network is available.
    """

    def __init__(self, what: str, missing: list[str], command: str):
        super().__init__(
            f"{what} is not on this machine and HF_HUB_OFFLINE is set: missing {', '.join(missing)}",
            hint=f"run `{command}` where Hugging Face can be reached, or unset HF_HUB_OFFLINE",
        )
        self.missing = list(missing)
        self.command = command


class DownloadDeclined(SpecdecError):
    """The ``confirm`` callback said no: nothing was downloaded."""


def decline(files) -> bool:  # noqa: ARG001 - a confirm callback
    """The answer of a run that cannot ask (a script without --yes): no, known before the Hub is
    asked anything, so a missing file is reported without listing repos over the network."""
    return False


class DraftNotGGUFError(SpecdecError):
    """The draft repo holds a Hugging Face checkpoint (safetensors), not a GGUF llama.cpp can load."""


class RepoNotFoundError(UsageError):
    """The Hub has no such repository (or it is private and the token cannot see it)."""


class RemoteFileNotFoundError(UsageError):
    """The repository exists but has no such file at that revision."""


# --------------------------------------------------------------------------- environment


def _env_true(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def is_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) as it is set now; else huggingface_hub's view."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var):
            return _env_true(os.environ[var])
    try:
        from huggingface_hub import constants

        return bool(constants.is_offline_mode())
    except Exception:  # pragma: no cover - huggingface_hub is a dependency
        return False


def hub_endpoint() -> str:
    """The Hub to talk to: ``HF_ENDPOINT`` as set now, else huggingface_hub's (https://huggingface.co)."""
    env = os.environ.get("HF_ENDPOINT", "").strip()
    if env:
        return env.rstrip("/")
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


# --------------------------------------------------------------------------- references

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_REPO_RE = re.compile(rf"^{_NAME}/{_NAME}$")
_SHORT_RE = re.compile(rf"^(?P<repo>{_NAME}/{_NAME})(?:@(?P<rev>[^:@\s]+))?(?::(?P<quant>[A-Za-z0-9_.+-]+))?$")
_URL_RE = re.compile(
    rf"^https?://(?:www\.)?(?:huggingface\.co|hf\.co)/(?P<repo>{_NAME}/{_NAME})"
    r"(?:/(?:resolve|blob)/(?P<rev>[^/]+)/(?P<file>[^?#]+))?/?(?:[?#].*)?$"
)
_QUANT_OK = re.compile(r"^[A-Za-z0-9_.+-]+$")


@dataclass(frozen=True)
class ModelRef:
    """A GGUF on the Hub: a repo and either one file, a quant, or neither (the repo's only GGUF)."""

    repo: str
    filename: str | None = None
    quant: str | None = None
    revision: str | None = None

    def __str__(self) -> str:
        rev = f"@{quote(self.revision, safe='')}" if self.revision else ""
        if self.filename:
            return f"hf://{self.repo}{rev}/{self.filename}"
        return f"{self.repo}{rev}{':' + self.quant if self.quant else ''}"

    @property
    def pull_command(self) -> str:
        """The ``specdec pull`` command that fetches this reference."""
        return f"specdec pull {self}"


def parse_ref(text: str) -> ModelRef | None:
    """Parse a model reference; ``None`` means ``text`` is a local path.

    Accepted: ``hf://org/repo/path/file.gguf``, ``hf://org/repo@rev/file.gguf`` (a revision with
    ``/`` is URL-encoded, ``refs%2Fpr%2F1``), ``hf://org/repo[@rev][:QUANT]``, ``org/repo:QUANT``,
    ``org/repo@rev:QUANT``, ``org/repo`` and ``https://huggingface.co/org/repo/(resolve|blob)/rev/file``.
    Anything that exists on disk, or ends in ``.gguf`` without ``hf://``, is a local path.
    A malformed ``hf://`` reference raises UsageError.
    """
    s = text.strip()
    if not s:
        return None
    if s.lower().startswith("hf://"):
        return _parse_hf_uri(s, text)
    m = _URL_RE.match(s)
    if m:
        rev = unquote(m["rev"]) if m["rev"] else None
        filename = unquote(m["file"]) if m["file"] else None
        if filename is not None:
            _check_gguf_name(filename, text)
        return ModelRef(repo=m["repo"], filename=filename, revision=None if rev == "main" else rev)
    if os.path.exists(os.path.expanduser(s)) or s.lower().endswith(".gguf"):
        return None
    m = _SHORT_RE.match(s)
    if m:
        return ModelRef(repo=m["repo"], quant=m["quant"], revision=unquote(m["rev"]) if m["rev"] else None)
    return None


def _parse_hf_uri(s: str, original: str) -> ModelRef:
    rest = s[5:].strip("/")
    head = rest.split("/", 1)[0]
    if head in ("datasets", "spaces", "buckets", "kernels"):
        raise UsageError(f"'{original}' is not a model repository", hint="pass hf://org/repo/file.gguf of a model repo")
    if head == "models":
        rest = rest.split("/", 1)[1] if "/" in rest else ""
    parts = rest.split("/")
    bad = UsageError(
        f"'{original}' is not a model reference",
        hint="write hf://org/repo/file.gguf, hf://org/repo@revision/file.gguf or org/repo:Q4_K_M",
    )
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise bad
    org, name = parts[0], parts[1]
    path = "/".join(parts[2:])
    quant = rev = None
    if ":" in name:
        name, quant = name.split(":", 1)
    if "@" in name:
        name, rev = name.split("@", 1)
        rev = unquote(rev)
        if not rev:
            raise bad
    repo = f"{org}/{name}"
    if not _REPO_RE.match(repo) or (quant is not None and not _QUANT_OK.match(quant)):
        raise bad
    if path and quant:
        raise UsageError(f"'{original}' names both a file and a quant", hint="give one of them")
    if path:
        _check_gguf_name(path, original)
    return ModelRef(repo=repo, filename=path or None, quant=quant or None, revision=rev)


def _check_gguf_name(path: str, original: str) -> None:
    if not path.lower().endswith(".gguf") or ".." in PurePosixPath(path).parts:
        raise UsageError(f"'{original}' does not name a .gguf file", hint="llama.cpp loads GGUF files only")


# --------------------------------------------------------------------------- file names

_SHARD_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
# A quant as it appears in GGUF file names: Q4_K_M, q8_0, IQ2_XXS, Q4_0_4_4, TQ1_0, BF16, F16,
# F32, MXFP4, and unsloth's dynamic ones (UD-Q4_K_XL). The last one in the name wins.
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q\d(?:_[A-Z0-9]{1,4})*|TQ\d_\d|BF16|FP16|F16|FP32|F32|MXFP4(?:_MOE)?))"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)


def split_info(filename: str) -> tuple[int, int] | None:
    """``(index, count)`` of a split-GGUF shard (``x-00002-of-00003.gguf`` -> ``(2, 3)``), else None."""
    m = _SHARD_RE.search(filename)
    return (int(m.group(1)), int(m.group(2))) if m else None


def shard_names(filename: str) -> list[str]:
    """All shards of the split GGUF ``filename`` belongs to, in order; ``[filename]`` if it is not split."""
    m = _SHARD_RE.search(filename)
    if not m:
        return [filename]
    stem, count = filename[: m.start()], int(m.group(2))
    return [f"{stem}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def _model_key(path: str) -> str:
    """A split GGUF's shards share one key (the name without ``-0000k-of-0000N``)."""
    m = _SHARD_RE.search(path)
    return (path[: m.start()] + ".gguf" if m else path).lower()


def quant_of(filename: str) -> str | None:
    """The quant in a GGUF file name, upper-case (``qwen2.5-7b-instruct-q4_k_m.gguf`` -> ``Q4_K_M``)."""
    stem = PurePosixPath(_model_key(filename)).name[: -len(".gguf")]
    found = _QUANT_RE.findall(stem)
    return found[-1].upper() if found else None


def _is_gguf(path: str) -> bool:
    return path.lower().endswith(".gguf")


def _is_projector(path: str) -> bool:
    return PurePosixPath(path).name.lower().startswith("mmproj")


def _groups(files: list[str]) -> dict[str, list[str]]:
    """GGUF files grouped by model (a split GGUF's shards together), shards in order."""
    groups: dict[str, list[str]] = {}
    for f in files:
        if _is_gguf(f):
            groups.setdefault(_model_key(f), []).append(f)
    for shards in groups.values():
        shards.sort(key=lambda f: (split_info(f) or (0, 0))[0])
    return groups


def _complete_shards(shards: list[str], *, repo: str | None, what: str) -> list[str]:
    """The shards of one group, checked to be the whole split (1..N) when it is a split GGUF."""
    info = split_info(shards[0])
    if info is None:
        if len(shards) > 1:  # cannot happen for one key, kept for safety
            raise UsageError(f"several files for {what}: {', '.join(shards)}", hint="name one file")
        return shards
    expected = shard_names(shards[0])
    have = {s.lower() for s in shards}
    lost = [e for e in expected if e.lower() not in have]
    if lost:
        where = f" in {repo}" if repo else ""
        raise SpecdecError(
            f"split GGUF {PurePosixPath(expected[0]).name}{where} is incomplete: "
            f"{len(lost)} of {len(expected)} parts missing ({PurePosixPath(lost[0]).name}, ...)",
            hint="the repository lacks parts of this model; pick another quant or file",
        )
    by_lower = {s.lower(): s for s in shards}
    return [by_lower[e.lower()] for e in expected]


def available_quants(files: list[str]) -> list[str]:
    """The quants of the GGUF models in ``files`` (projectors left out), sorted."""
    quants = {quant_of(f) for f in files if _is_gguf(f) and not _is_projector(f)}
    quants.discard(None)
    return sorted(quants, key=_quant_sort_key)  # type: ignore[arg-type]


def _quant_sort_key(q: str) -> tuple:
    m = re.search(r"(\d+)", q)
    return (int(m.group(1)) if m else 99, q)


def _describe_quants(files: list[str]) -> str:
    quants = available_quants(files)
    return ", ".join(quants) if quants else "none"


def pick_quant_files(files: list[str], quant: str | None, *, repo: str | None = None) -> list[str]:
    """The file(s) of ``quant`` among ``files`` (repo-relative paths): one GGUF, or every shard
    of a split GGUF in order (llama.cpp opens the first and finds the rest beside it).

    ``quant=None`` asks for the repo's only GGUF model. UsageError when the quant is absent
    (listing the quants there are), when several different models match, or when the repo has
    no GGUF at all; SpecdecError when a split GGUF lacks parts.
    """
    where = f" in {repo}" if repo else ""
    ggufs = [f for f in files if _is_gguf(f)]
    if not ggufs:
        raise UsageError(f"no GGUF files{where}", hint="pick a repository that publishes .gguf files")
    models = {k: v for k, v in _groups(ggufs).items() if not _is_projector(v[0])}
    ref = f"{repo}:" if repo else ""
    if quant is None:
        if len(models) == 1:
            return _complete_shards(next(iter(models.values())), repo=repo, what=f"the GGUF{where}")
        quants = available_quants(ggufs)
        if quants:
            hint = f"e.g. {ref}{quants[0]} (available: {', '.join(quants)})"
        else:
            names = sorted(PurePosixPath(v[0]).name for v in models.values())
            hint = f"name the file: hf://{repo or 'org/repo'}/<file> ({', '.join(names[:6])})"
        raise UsageError(f"{len(models)} GGUF models{where}; say which quant", hint=hint)
    want = quant.strip().upper()
    hits = [v for v in models.values() if quant_of(v[0]) == want]
    if not hits:
        raise UsageError(
            f"no {want} GGUF{where}",
            hint=f"available quants: {_describe_quants(ggufs)}",
        )
    if len(hits) > 1:
        names = ", ".join(PurePosixPath(v[0]).name for v in hits)
        raise UsageError(
            f"several {want} GGUFs{where}: {names}",
            hint=f"name the file: hf://{repo or 'org/repo'}/{hits[0][0]}",
        )
    return _complete_shards(hits[0], repo=repo, what=f"{want}{where}")


def _pattern_hit(path: str, pattern: str) -> bool:
    """registry.py's matching rules, for repo-relative paths: case-insensitive glob on the base name
    (on the whole path when the pattern has a ``/``); ``x.gguf`` matches the first shard of a split
    ``x-00001-of-0000N.gguf``; projectors only when asked for."""
    pat = pattern.lower()
    cand = path.lower() if "/" in pat else PurePosixPath(path).name.lower()
    if _is_projector(cand) and not PurePosixPath(pat).name.startswith("mmproj"):
        return False
    if fnmatchcase(cand, pat):
        return True
    m = _SHARD_RE.search(cand)
    return bool(m) and fnmatchcase(cand[: m.start()] + ".gguf", pat)


def match_files(files: list[str], pattern: str, *, repo: str | None = None) -> list[str] | None:
    """The model ``pattern`` (a registry ``*_file``: a name or glob) picks among ``files``: all its
    shards in order. None when nothing matches; UsageError when several models do."""
    hits = [f for f in files if _is_gguf(f) and _pattern_hit(f, pattern)]
    if not hits:
        return None
    groups = _groups(files)
    keys = sorted({_model_key(h) for h in hits})
    if len(keys) > 1:
        names = sorted({PurePosixPath(groups[k][0]).name for k in keys})
        where = f" in {repo}" if repo else ""
        quants = available_quants([groups[k][0] for k in keys])
        hint = f"choose a quant ({', '.join(quants)})" if len(quants) > 1 else "make the pattern name one file"
        raise UsageError(f"'{pattern}' matches {len(keys)} models{where}: {', '.join(names[:6])}", hint=hint)
    return _complete_shards(groups[keys[0]], repo=repo, what=f"'{pattern}'")


# --------------------------------------------------------------------------- Hub errors


def _has_token() -> bool:
    try:
        from huggingface_hub import get_token

        return get_token() is not None
    except Exception:  # pragma: no cover
        return False


def _token_hint(repo: str) -> str:
    if _has_token():
        return f"your Hugging Face token has no access to {repo}: check it, or accept the repo's terms on its page"
    return "set HF_TOKEN to a Hugging Face access token (or run `hf auth login`) with access to it"


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = next((t.strip() for t in text if t.strip()), type(exc).__name__)
    return line[:200]


@contextmanager
def _hub_errors(repo: str, *, filename: str | None = None, revision: str | None = None) -> Iterator[None]:
    """Turn huggingface_hub / HTTP failures into one-line SpecdecErrors with a hint."""
    from huggingface_hub import errors as hfe

    try:
        import httpx2 as _httpx
    except ImportError:  # pragma: no cover - older huggingface_hub
        import httpx as _httpx  # type: ignore[no-redef]

    endpoint = hub_endpoint()
    what = f"{repo}/{filename}" if filename else repo
    # huggingface_hub logs each failed attempt and each retry as a warning of its own; the error
    # this ends in says it in one line, so those stay unprinted while the call runs
    hf_log = logging.getLogger("huggingface_hub")
    level = hf_log.level
    hf_log.setLevel(logging.ERROR)
    try:
        yield
    except SpecdecError:
        raise
    except hfe.GatedRepoError:
        if _has_token():
            hint = f"accept its terms at {endpoint}/{repo} with the account your token (HF_TOKEN) belongs to"
        else:
            hint = (f"accept its terms at {endpoint}/{repo}, then set HF_TOKEN to an access token of that "
                    "account (or run `hf auth login`)")
        raise SpecdecError(
            f"{repo} is a gated repository: downloading it needs a Hugging Face account that accepted its terms",
            hint=hint,
        ) from None
    except hfe.RepositoryNotFoundError:
        raise RepoNotFoundError(
            f"repository {repo} not found on {endpoint} (or it is private)",
            hint=f"check the name (org/repo); for a private repo {_token_hint(repo)}",
        ) from None
    except hfe.RevisionNotFoundError:
        raise UsageError(
            f"revision '{revision}' not found in {repo}", hint="check the branch, tag or commit after '@'"
        ) from None
    except hfe.RemoteEntryNotFoundError:
        raise RemoteFileNotFoundError(f"{repo} has no file {filename}", hint="check the file name") from None
    except hfe.OfflineModeIsEnabled:
        raise OfflineError(what, [what], f"specdec pull {ModelRef(repo, filename, None, revision)}") from None
    except hfe.HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            raise SpecdecError(f"access to {what} denied (HTTP {status})", hint=_token_hint(repo)) from None
        if status == 429 or (status or 0) >= 500:
            raise SpecdecError(
                f"{endpoint} answered HTTP {status} for {what}", hint="the Hub is busy or down; try again in a while"
            ) from None
        raise SpecdecError(f"{endpoint} answered HTTP {status} for {what}: {_short(exc)}",
                           hint="check the repo and file names") from None
    except hfe.FileMetadataError:
        raise SpecdecError(
            f"the server at {endpoint} did not answer like the Hugging Face Hub for {what}",
            hint="check HF_ENDPOINT and any proxy or firewall between you and the Hub",
        ) from None
    except (_httpx.HTTPError, hfe.LocalEntryNotFoundError, ConnectionError, TimeoutError) as exc:
        cause = exc.__cause__ if isinstance(exc, hfe.LocalEntryNotFoundError) and exc.__cause__ else exc
        raise SpecdecError(
            f"cannot reach {endpoint} for {what}: {_short(cause)}",
            hint="check the network connection (and HF_ENDPOINT or proxy settings); files already in the "
            "cache work offline with HF_HUB_OFFLINE=1",
        ) from None
    except OSError as exc:  # a short or oversized transfer, a full disk, an unwritable cache
        raise SpecdecError(
            f"downloading {what} failed: {_short(exc)}",
            hint="run the same command again: the download continues where it stopped",
        ) from None
    finally:
        hf_log.setLevel(level)


# --------------------------------------------------------------------------- listing


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
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_backoff

    _check_repo_id(repo)
    endpoint = hub_endpoint()
    rev = quote(revision or "main", safe="")
    url: str | None = f"{endpoint}/api/models/{repo}/tree/{rev}"
    params: dict[str, Any] | None = {"recursive": "true", "expand": "false"}
    out: list[RemoteFile] = []
    with _hub_errors(repo, revision=revision):
        headers = build_hf_headers(token=token, library_name="specdec", library_version=_version())
        while url:
            r = http_backoff("GET", url, params=params, headers=headers, max_retries=1, base_wait_time=0.5,
                             timeout=30)
            hf_raise_for_status(r)
            try:
                items = r.json()
            except ValueError:
                items = None
            if not isinstance(items, list):
                from huggingface_hub.errors import FileMetadataError

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
    return sorted(f.path for f in list_repo_files(repo, revision, token) if _is_gguf(f.path))


def _check_repo_id(repo: str) -> None:
    if not _REPO_RE.match(repo):
        raise UsageError(f"'{repo}' is not a Hugging Face repo id", hint="write it as org/name")


def _version() -> str:
    from . import __version__

    return __version__


# --------------------------------------------------------------------------- the local cache

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


def _repo_dir(repo: str) -> Path:
    return hf_hub_cache() / ("models--" + repo.replace("/", "--"))


def _snapshot_dirs(repo: str, revision: str | None) -> list[Path]:
    """Snapshot folders to look in: for ``revision=None`` the one ``refs/main`` names first, then
    the others newest first (as registry.resolve_local does); else only the revision's own."""
    repo_dir = _repo_dir(repo)
    snaps = repo_dir / "snapshots"
    if not snaps.is_dir():
        return []
    if revision is not None:
        commit = revision if _COMMIT_RE.match(revision) else _read_ref(repo_dir, revision)
        return [snaps / commit] if commit and (snaps / commit).is_dir() else []
    dirs = sorted((p for p in snaps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    main = _read_ref(repo_dir, "main")
    dirs.sort(key=lambda p: p.name != main)
    return dirs


def _read_ref(repo_dir: Path, revision: str) -> str | None:
    try:
        return (repo_dir / "refs" / revision).read_text().strip() or None
    except OSError:
        return None


def _snapshot_files(snapshot: Path) -> list[str]:
    """Repo-relative paths of the complete files in a snapshot (links to missing blobs left out)."""
    return sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())


def _cached_set(repo: str, revision: str | None, pick: Callable[[list[str]], list[str] | None]) -> list[Path] | None:
    """The first snapshot where ``pick(files)`` names files that are all present: their paths."""
    for snap in _snapshot_dirs(repo, revision):
        try:
            names = pick(_snapshot_files(snap))
        except SpecdecError:
            continue
        if names and all((snap / n).is_file() for n in names):
            return [snap / n for n in names]
    return None


def _cached_files(ref: ModelRef) -> list[Path] | None:
    if ref.filename:
        names = shard_names(ref.filename)
        return _cached_set(ref.repo, ref.revision, lambda files: names)
    return _cached_set(ref.repo, ref.revision, lambda files: pick_quant_files(files, ref.quant, repo=ref.repo))


def cached_path(ref: ModelRef) -> Path | None:
    """The local path of ``ref`` if the HF cache holds it whole (every shard), else None. No network.

    For a split GGUF this is the first shard; the others are in the same folder.
    """
    found = _cached_files(ref)
    return found[0] if found else None


# --------------------------------------------------------------------------- downloading


class _Verifier:
    """Checks a download against its etag: sha256 (LFS files) or the git blob sha1 (small files)."""

    def __init__(self, etag: str | None, size: int | None):
        etag = (etag or "").lower()
        self.expected = None
        self.kind = ""
        if re.fullmatch(r"[0-9a-f]{64}", etag):
            self.expected, self.kind, self._prefix = etag, "sha256", b""
        elif re.fullmatch(r"[0-9a-f]{40}", etag) and size is not None:
            self.expected, self.kind, self._prefix = etag, "sha1", f"blob {size}\0".encode()
        self.reset()

    def reset(self) -> None:
        self.h = hashlib.new(self.kind) if self.expected else None
        if self.h is not None:
            self.h.update(self._prefix)

    def update(self, data: bytes) -> None:
        if self.h is not None:
            self.h.update(data)

    def ok(self) -> bool:
        return self.h is None or self.h.hexdigest() == self.expected


class _HashingFile:
    """The file object handed to huggingface_hub's ``http_get``: hashes what it writes."""

    def __init__(self, raw, path: Path, verifier: _Verifier):
        self.raw, self.path, self.verifier = raw, path, verifier
        self._rehash(raw.tell())

    def _rehash(self, upto: int) -> None:
        self.verifier.reset()
        if upto and self.verifier.h is not None:
            with open(self.path, "rb") as f:
                left = upto
                while left:
                    block = f.read(min(left, 8 << 20))
                    if not block:
                        break
                    self.verifier.update(block)
                    left -= len(block)

    def write(self, data: bytes) -> int:
        self.verifier.update(data)
        return self.raw.write(data)

    def tell(self) -> int:
        return self.raw.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.raw.seek(offset, whence)

    def truncate(self, size: int | None = None) -> int:
        out = self.raw.truncate(size)
        self.raw.flush()
        self._rehash(out)
        return out

    def flush(self) -> None:
        self.raw.flush()


def _no_bar_class():
    from huggingface_hub.utils import tqdm as hf_tqdm

    class _NoBar(hf_tqdm):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return _NoBar


def _origin(url: str) -> tuple[str, str, int | None]:
    u = urlsplit(url)
    return (u.scheme, (u.hostname or "").lower(), u.port or {"http": 80, "https": 443}.get(u.scheme))


def _transfer(meta, resolve_url: str, blob: Path, filename: str, *, token, progress: bool) -> None:
    """Download one file's bytes into ``blob``, continuing ``<blob>.incomplete`` from an earlier run."""
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    partial = blob.with_name(blob.name + ".incomplete")
    size = meta.size
    have = partial.stat().st_size if partial.exists() else 0
    if size is not None and have > size:  # not a prefix of this file: start again
        partial.unlink()
        have = 0
    if size is not None:
        free = shutil.disk_usage(blob.parent).free
        if free < size - have:
            raise SpecdecError(
                f"not enough disk space for {filename}: it needs {human_size(size - have)} more, "
                f"{human_size(free)} free in {blob.parent}",
                hint="free some space, or point HF_HOME (or HF_HUB_CACHE) at a larger disk",
            )
    headers = build_hf_headers(token=token, library_name="specdec", library_version=_version())
    url = resolve_url
    if meta.xet_file_data is None and meta.location and meta.location != resolve_url:
        url = meta.location  # a CDN address: skip the redirect, and keep the token on the Hub
        if _origin(url) != _origin(resolve_url):
            headers.pop("authorization", None)
    verifier = _Verifier(meta.etag, size)
    if progress and have and size is not None and have < size:
        print(f"resuming {PurePosixPath(filename).name} at {human_size(have)} of {human_size(size)}", file=sys.stderr)
    with open(partial, "ab") as raw:
        out = _HashingFile(raw, partial, verifier)
        http_get(
            url,
            out,  # type: ignore[arg-type]
            resume_size=have,
            headers=headers,
            expected_size=size,
            displayed_filename=PurePosixPath(filename).name,
            tqdm_class=None if progress else _no_bar_class(),
        )
    if not verifier.ok():
        partial.unlink(missing_ok=True)
        raise SpecdecError(
            f"the download of {filename} is corrupt (its {verifier.kind} does not match the Hub's)",
            hint="run the same command again to download it afresh",
        )
    os.replace(partial, blob)


def _fetch_file(repo: str, filename: str, revision: str, *, token, progress: bool) -> tuple[Path, str]:
    """One file into the HF cache, resumably. Returns (snapshot path, commit)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.utils import WeakFileLock

    cache = hf_hub_cache()
    storage = cache / repo_folder_name(repo_id=repo, repo_type="model")
    if _COMMIT_RE.match(revision):
        pointer = storage / "snapshots" / revision / filename
        if pointer.is_file():
            return pointer, revision
    endpoint = hub_endpoint()
    bar = None if progress else _no_bar_class()
    with _hub_errors(repo, filename=filename, revision=revision):
        url = hf_hub_url(repo, filename, revision=revision, endpoint=endpoint)
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint)
        if not meta.commit_hash or not meta.etag:
            from huggingface_hub.errors import FileMetadataError

            raise FileMetadataError("no X-Repo-Commit or ETag header")
        pointer = storage / "snapshots" / meta.commit_hash / filename
        from huggingface_hub import constants

        too_big_for_http = meta.size is not None and meta.size > constants.MAX_HTTP_DOWNLOAD_SIZE
        if not pointer.is_file() and not (too_big_for_http and meta.xet_file_data is not None):
            blob = storage / "blobs" / meta.etag
            if not blob.is_file():
                blob.parent.mkdir(parents=True, exist_ok=True)
                lock = cache / ".locks" / storage.name / f"{meta.etag}.lock"
                lock.parent.mkdir(parents=True, exist_ok=True)
                with WeakFileLock(lock):  # the lock huggingface_hub takes for this blob
                    if not blob.is_file():
                        _transfer(meta, url, blob, filename, token=token, progress=progress)
        # huggingface_hub links the blob into the snapshot and records the revision (for a file over
        # its 50 GB plain-HTTP limit it downloads through hf_xet itself, without cross-run resume)
        path = hf_hub_download(repo, filename, revision=revision, cache_dir=cache, token=token,
                               endpoint=endpoint, tqdm_class=bar)
    return Path(path), meta.commit_hash


def _download_files(repo: str, files: list[str], revision: str | None, *, token, progress: bool) -> list[Path]:
    """Files of one repo into one snapshot folder (the first fixes the commit for the rest)."""
    paths: list[Path] = []
    commit: str | None = None
    for name in files:
        path, got = _fetch_file(repo, name, commit or revision or "main", token=token, progress=progress)
        commit = commit or got
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- plans


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


@dataclass
class PulledPair:
    """What :func:`pull` returns: local paths (first shard for a split GGUF) and what it did.

    ``plan`` is every file of the pair (``cached`` = it was here before); ``downloaded`` those that
    were fetched. Both have ``local_path`` set afterwards."""

    target: Path | None
    draft: Path | None
    plan: list[PlannedFile] = field(default_factory=list)
    downloaded: list[PlannedFile] = field(default_factory=list)


def _cached_plan(role: str, path: Path, revision: str | None = None) -> PlannedFile | None:
    """A PlannedFile for a file found on disk; None if it is a split GGUF with parts missing."""
    names = shard_names(path.name)
    paths = [path.parent / n for n in names]
    if not all(p.is_file() for p in paths):
        return None
    repo, rel = _repo_of_cached(path)
    files = tuple(str(PurePosixPath(rel).with_name(n)) for n in names) if rel else tuple(str(p) for p in paths)
    return PlannedFile(role, repo, files, revision, sum(p.stat().st_size for p in paths), True, path)


def _repo_of_cached(path: Path) -> tuple[str | None, str | None]:
    """(org/repo, repo-relative path) for a path inside the HF cache's snapshots, else (None, None)."""
    parts = path.parts
    for i, part in enumerate(parts):
        if part.startswith("models--") and i + 3 < len(parts) and parts[i + 1] == "snapshots":
            bits = part.split("--")
            if len(bits) >= 3:
                return "/".join(bits[1:3]), "/".join(parts[i + 3:])
    return None, None


def plan_ref(ref: ModelRef, *, token: str | None = None) -> PlannedFile:
    """What fetching ``ref`` involves: cached (no network), else the remote file names and size
    (network, unless offline: then the names are the reference's own and the size is unknown)."""
    found = _cached_files(ref)
    if found:
        return PlannedFile("model", ref.repo, tuple(_rel(p, ref) for p in found), ref.revision,
                           sum(p.stat().st_size for p in found), True, found[0])
    if is_offline():
        return PlannedFile("model", ref.repo, (ref.filename or str(ref),), ref.revision)
    names, sizes = _remote_names(ref, token=token, sizes=True)
    size = sum(sizes) if sizes and all(s is not None for s in sizes) else None  # type: ignore[misc]
    return PlannedFile("model", ref.repo, tuple(names), ref.revision, size, False, None)


def _rel(path: Path, ref: ModelRef) -> str:
    return _repo_of_cached(path)[1] or path.name


def _remote_names(ref: ModelRef, *, token, sizes: bool = False) -> tuple[list[str], list[int | None]]:
    """The repo-relative files ``ref`` stands for, and their sizes when the repo was listed.

    A named file needs no listing (its shards follow from its name) unless ``sizes`` is asked for.
    """
    if ref.filename and not sizes:
        return shard_names(ref.filename), []
    listing = list_repo_files(ref.repo, ref.revision, token)
    paths = [f.path for f in listing]
    if ref.filename:
        names = shard_names(ref.filename)
        if not set(names) <= set(paths):
            names = match_files(paths, ref.filename, repo=ref.repo) or []
        if not names:
            raise RemoteFileNotFoundError(f"{ref.repo} has no file {ref.filename}",
                                          hint=f"its GGUF quants: {_describe_quants(paths)}")
    else:
        names = pick_quant_files(paths, ref.quant, repo=ref.repo)
    by_path = {f.path: f.size for f in listing}
    return names, [by_path.get(n) for n in names]


def download(ref: ModelRef, *, progress: bool = True, token: str | None = None) -> Path:
    """Fetch ``ref`` into the HF cache (every shard of a split GGUF) and return the local path of
    its first file. A cached file is returned without any network access; an interrupted download
    continues where it stopped. OfflineError under HF_HUB_OFFLINE when it is not cached."""
    _check_repo_id(ref.repo)
    found = cached_path(ref)
    if found:
        return found
    if is_offline():
        raise OfflineError(str(ref), [_missing_name(ref)], ref.pull_command)
    names, _ = _remote_names(ref, token=token)
    try:
        paths = _download_files(ref.repo, names, ref.revision, token=token, progress=progress)
    except RemoteFileNotFoundError:
        # hf://org/repo/x.gguf for a model the repo splits into x-00001-of-0000N.gguf: take the split
        if not ref.filename or split_info(ref.filename):
            raise
        files = [f.path for f in list_repo_files(ref.repo, ref.revision, token)]
        names = match_files(files, ref.filename, repo=ref.repo)
        if not names:
            raise UsageError(f"{ref.repo} has no file {ref.filename}",
                             hint=f"its GGUF quants: {_describe_quants(files)}") from None
        paths = _download_files(ref.repo, names, ref.revision, token=token, progress=progress)
    return paths[0]


def _missing_name(ref: ModelRef) -> str:
    return f"{ref.repo}/{ref.filename}" if ref.filename else str(ref)


def ensure_ref(
    ref: ModelRef,
    *,
    confirm: Callable[[list[PlannedFile]], bool] | None = None,
    progress: bool = True,
    token: str | None = None,
) -> Path:
    """:func:`download` for ``run --target/--draft REF``: the cached path if there is one; else
    OfflineError when offline; else ``confirm([plan])`` (DownloadDeclined on False) and fetch."""
    found = cached_path(ref)
    if found:
        return found
    if is_offline():
        raise OfflineError(str(ref), [_missing_name(ref)], ref.pull_command)
    if confirm is decline:
        raise DownloadDeclined(f"{ref} is not downloaded", hint=f"run `{ref.pull_command}`, or pass --yes to fetch it")
    if confirm is not None:
        plan = plan_ref(ref, token=token)
        if not confirm([plan]):
            raise DownloadDeclined(f"{ref} is not downloaded", hint=f"run `{ref.pull_command}` to fetch it")
    return download(ref, progress=progress, token=token)


def resolve_model_arg(text: str, **kwargs) -> Path:
    """A ``--target``/``--draft`` value as a local path: a path is returned as given (not checked);
    a reference goes through :func:`ensure_ref` (``confirm``, ``progress``, ``token`` passed on)."""
    ref = parse_ref(text)
    if ref is None:
        return Path(text).expanduser()
    return ensure_ref(ref, **kwargs)


# --------------------------------------------------------------------------- pairs


def pull_command(name: str, quant: str | None = None, registry_file: str | Path | None = None) -> str:
    """``specdec pull NAME [--quant Q] [--registry FILE]``, quoted for a POSIX shell where needed."""
    import shlex

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
    from .registry import _display, builtin_registry_path, user_registry_path

    if entry.source in (_display(builtin_registry_path()), _display(user_registry_path())):
        return None
    return entry.source


def _entry_pull_command(entry: PairEntry, quant: str | None) -> str:
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

    Local files (``*_path``, or the HF cache as ``registry.resolve_local`` finds them, with every
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
        plan.append(_plan_target(entry, q, local.target, token=token, listing=listing))
    if "draft" in roles and entry.method != "ngram":
        plan.append(_plan_draft(entry, local.draft, token=token, listing=listing))
    return plan


def _local_file(entry: PairEntry, role: str, value: str) -> PlannedFile:
    path = Path(value).expanduser()
    if not path.is_file():
        raise UsageError(
            f"pair '{entry.name}': {role}_path {value} does not exist",
            hint=f"fix {role}_path in {entry.source or 'your pairs.toml'} (specdec pull downloads from Hugging Face repos only)",
        )
    return PlannedFile(role, None, (str(path),), None, path.stat().st_size, True, path)


def _plan_target(entry: PairEntry, q: str, local: Path | None, *, token, listing: bool) -> PlannedFile:
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
    if not listing or is_offline():
        return PlannedFile("target", entry.target_repos[0], (pattern,))
    seen: list[str] = []
    for repo in entry.target_repos:
        try:
            listing = list_repo_files(repo, None, token)
        except RepoNotFoundError:  # a repo that is gone: try the next one
            seen.append(f"{repo} (not found)")
            continue
        names = match_files([f.path for f in listing], pattern, repo=repo)
        if names:
            return _remote_plan("target", repo, names, listing)
        seen.append(f"{repo} ({_describe_quants([f.path for f in listing])})")
    asked = q if q != "*" else "a"
    raise UsageError(
        f"pair '{entry.name}': no {asked} target GGUF ({pattern}) in {', '.join(entry.target_repos)}",
        hint=f"quants available: {'; '.join(seen)}. pass --quant with one of them",
    )


def _plan_draft(entry: PairEntry, local: Path | None, *, token, listing: bool) -> PlannedFile:
    if entry.draft_path:
        return _local_file(entry, "draft", entry.draft_path)
    repo = entry.draft_repo
    assert repo is not None  # a validated non-ngram entry has draft_path or draft_repo
    if local is not None:
        planned = _cached_plan("draft", local)
        if planned:
            return planned
    if not listing or is_offline():
        return PlannedFile("draft", repo, (entry.draft_file,))
    listing = list_repo_files(repo, None, token)
    paths = [f.path for f in listing]
    names = match_files(paths, entry.draft_file, repo=repo)
    if names:
        return _remote_plan("draft", repo, names, listing)
    if not any(_is_gguf(p) for p in paths):
        checkpoint = any(p.endswith((".safetensors", ".bin", ".pt")) or p == "config.json" for p in paths)
        kind = "a Hugging Face checkpoint (safetensors)" if checkpoint else "no GGUF file"
        raise DraftNotGGUFError(
            f"pair '{entry.name}': the draft repo {repo} holds {kind}, not a GGUF llama.cpp can load",
            hint="convert it to GGUF with llama.cpp's convert_hf_to_gguf.py, then set draft_path to the .gguf "
            f"for '{entry.name}' in ~/.config/specdec/pairs.toml (specdec pull fetches GGUFs only)",
        )
    raise UsageError(
        f"pair '{entry.name}': no file matching '{entry.draft_file}' in {repo}",
        hint=f"its GGUFs: {', '.join(sorted(PurePosixPath(p).name for p in paths if _is_gguf(p))[:6])}; fix draft_file",
    )


def _remote_plan(role: str, repo: str, names: list[str], listing: list[RemoteFile]) -> PlannedFile:
    sizes = {f.path: f.size for f in listing}
    known = [sizes.get(n) for n in names]
    size = sum(known) if all(s is not None for s in known) else None  # type: ignore[misc]
    return PlannedFile(role, repo, tuple(names), None, size, False, None)


def pull(
    entry: PairEntry,
    quant: str | None = None,
    *,
    progress: bool = True,
    confirm: Callable[[list[PlannedFile]], bool] | None = None,
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
    plan = pair_files(entry, quant, roles=roles, token=token, listing=confirm is not decline)
    missing = [p for p in plan if not p.cached]
    if missing and is_offline():
        raise OfflineError(
            f"pair '{entry.name}'",
            [f"{p.repo}/{p.files[0]}" for p in missing],
            _entry_pull_command(entry, quant),
        )
    if missing and confirm is not None and not confirm(missing):
        names = ", ".join(f"{p.repo}/{p.files[0]}" for p in missing)
        raise DownloadDeclined(
            f"pair '{entry.name}' is not on this machine ({names}) and was not downloaded",
            hint=f"run `{_entry_pull_command(entry, quant)}`, or pass --yes to download without asking",
        )
    paths: dict[str, Path | None] = {"target": None, "draft": None}
    for p in plan:
        if not p.cached:
            assert p.repo is not None
            got = _download_files(p.repo, list(p.files), p.revision, token=token, progress=progress)
            p.local_path = got[0]  # ``cached`` keeps saying whether it was here before the pull
        paths[p.role] = p.local_path
    return PulledPair(target=paths["target"], draft=paths["draft"], plan=plan, downloaded=missing)


# --------------------------------------------------------------------------- small helpers


def human_size(n: int | None) -> str:
    """Bytes in decimal units, as download sizes are usually quoted: ``4.68 GB``."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1000
    return f"{n} B"  # pragma: no cover

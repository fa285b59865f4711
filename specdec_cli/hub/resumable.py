"""Downloads that survive the process: a GGUF interrupted at 30 of 40 GB continues next run.

Why this exists: ``huggingface_hub`` resumes a dropped connection within one call, but deletes
its temporary file when the process stops (Ctrl-C, a crash, a closed laptop), so the next run
starts from zero. Here the bytes go to ``blobs/<etag>.incomplete`` (the cache's own name for an
interrupted download, which ``hf cache`` tools recognise) and a later run continues from there
with a ``Range`` request. The finished file is checked against its etag (sha256 for LFS files,
the git blob sha1 otherwise) before it is moved to ``blobs/<etag>``; ``hf_hub_download`` then
finds the blob, links it into the snapshot and records the revision as usual. Transfers use
plain HTTP (``hf_xet``'s transfers cannot be resumed across runs), through ``huggingface_hub``'s
own ``http_get``: its retries, progress bars (on stderr), headers and token handling.

Public ``huggingface_hub`` API used: ``get_hf_file_metadata`` (and the ``HfFileMetadata`` fields
``commit_hash``, ``etag``, ``size``, ``location``, ``xet_file_data``), ``hf_hub_url``,
``hf_hub_download``, ``utils.build_hf_headers``, ``utils.tqdm``, ``constants.HF_HUB_CACHE``.

Private API relied on (check these when raising the upper bound in pyproject.toml):

- ``huggingface_hub.file_download.http_get(url, temp_file, *, resume_size, headers,
  expected_size, displayed_filename, tqdm_class)``; it resumes a dropped connection itself (1.20+) and
  restarts when a server ignores ``Range`` (truncating the file, which ``_HashingFile`` follows);
- ``huggingface_hub.utils.WeakFileLock``, and the lock path ``.locks/models--org--name/<etag>.lock``
  ``hf_hub_download`` takes for a blob;
- ``huggingface_hub.constants.MAX_HTTP_DOWNLOAD_SIZE`` (over it, huggingface_hub insists on xet);
- the cache layout ``models--org--name/blobs/<etag>`` and ``blobs/<etag>.incomplete`` (what
  ``hf_hub_download`` finds and links instead of downloading again). Reading the cache goes
  through ``hub.cache``, as everywhere else.

Tested with huggingface_hub 1.27.0, 1.33.0, 2.0.0 and 2.4.0 (tests/test_hub.py, test_registry.py,
test_models_list.py, test_hub_cache.py, each run against that version alone). Older 1.x fail:
1.0.x has no ``http_get(tqdm_class=)``; before 1.20 ``http_get`` does not resume a connection
dropped mid-body within the call; before 1.27 ``http_backoff`` retries a refused connection on
the session it has just closed (``RuntimeError``, not a one-line error). 2.x moved from httpx to
httpx2 (``hub.errors`` catches either).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from ..errors import SpecdecError
from .cache import cached_file, hf_hub_cache, repo_dir
from .env import hf_headers, hub_endpoint
from .errors import hub_errors
from .sizes import human_size

__all__ = ["EtagChecksum", "fetch_file", "download_files"]

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


class EtagChecksum:
    """Checks a download against its etag: sha256 (LFS files) or the git blob sha1 (small files).

    An etag of neither form (a proxy's) checks nothing: ``ok()`` is then always True."""

    def __init__(self, etag: str | None, size: int | None):
        etag = (etag or "").lower()
        self.expected = None
        self.kind = ""
        self._prefix = b""
        if re.fullmatch(r"[0-9a-f]{64}", etag):
            self.expected, self.kind = etag, "sha256"
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
    """The file object handed to huggingface_hub's ``http_get``: hashes what it writes.

    ``http_get`` truncates the file when a server ignores ``Range``; the hash restarts from
    what is left on disk then."""

    def __init__(self, raw, path: Path, checksum: EtagChecksum):
        self.raw, self.path, self.checksum = raw, path, checksum
        self._rehash(raw.tell())

    def _rehash(self, upto: int) -> None:
        self.checksum.reset()
        if upto and self.checksum.h is not None:
            with open(self.path, "rb") as f:
                left = upto
                while left:
                    block = f.read(min(left, 8 << 20))
                    if not block:
                        break
                    self.checksum.update(block)
                    left -= len(block)

    def write(self, data: bytes) -> int:
        self.checksum.update(data)
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
    headers = hf_headers(token)
    url = resolve_url
    if meta.xet_file_data is None and meta.location and meta.location != resolve_url:
        url = meta.location  # a CDN address: skip the redirect, and keep the token on the Hub
        if _origin(url) != _origin(resolve_url):
            headers.pop("authorization", None)
    checksum = EtagChecksum(meta.etag, size)
    if progress and have and size is not None and have < size:
        print(f"resuming {PurePosixPath(filename).name} at {human_size(have)} of {human_size(size)}", file=sys.stderr)
    with open(partial, "ab") as raw:
        out = _HashingFile(raw, partial, checksum)
        http_get(
            url,
            out,  # type: ignore[arg-type]
            resume_size=have,
            headers=headers,
            expected_size=size,
            displayed_filename=PurePosixPath(filename).name,
            tqdm_class=None if progress else _no_bar_class(),
        )
    if not checksum.ok():
        partial.unlink(missing_ok=True)
        raise SpecdecError(
            f"the download of {filename} is corrupt (its {checksum.kind} does not match the Hub's)",
            hint="run the same command again to download it afresh",
        )
    os.replace(partial, blob)


def fetch_file(repo: str, filename: str, revision: str, *, token, progress: bool) -> tuple[Path, str]:
    """One file into the HF cache, resumably. Returns (snapshot path, commit)."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.errors import FileMetadataError
    from huggingface_hub.utils import WeakFileLock

    cache = hf_hub_cache()
    storage = repo_dir(repo)
    if _COMMIT_RE.match(revision):
        pointer = cached_file(repo, filename, revision)
        if pointer is not None:
            return pointer, revision
    endpoint = hub_endpoint()
    bar = None if progress else _no_bar_class()
    with hub_errors(repo, filename=filename, revision=revision):
        url = hf_hub_url(repo, filename, revision=revision, endpoint=endpoint)
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint)
        if not meta.commit_hash or not meta.etag:
            raise FileMetadataError("no X-Repo-Commit or ETag header")
        linked = cached_file(repo, filename, meta.commit_hash) is not None
        too_big_for_http = meta.size is not None and meta.size > constants.MAX_HTTP_DOWNLOAD_SIZE
        if not linked and not (too_big_for_http and meta.xet_file_data is not None):
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


def download_files(repo: str, files: list[str], revision: str | None, *, token, progress: bool) -> list[Path]:
    """Files of one repo into one snapshot folder (the first fixes the commit for the rest)."""
    paths: list[Path] = []
    commit: str | None = None
    for name in files:
        path, got = fetch_file(repo, name, commit or revision or "main", token=token, progress=progress)
        commit = commit or got
        paths.append(path)
    return paths

"""Parsed GGUF headers kept between runs, so a run does not step over the same vocabulary again.

Why: a real vocabulary is two arrays of about 150,000 strings each (tokens and BPE merges),
and stepping over them in Python takes 30-50 ms a file. Every run reads its target, and
auto reads every GGUF beside it to find a draft: with a draft and one other model there,
about 0.1 s of a short prompt's 2.8 s went to headers that had not changed since the last
run. No library keeps such a cache (``gguf.GGUFReader`` parses every field on every open).

An entry is one JSON file per model under ``$XDG_CACHE_HOME/specdec/gguf-headers/`` (or
``$SPECDEC_HEADER_CACHE``; ``off`` turns the cache off), holding what
:func:`specdec_cli.models.reader._parse` returned: the key/value pairs (large arrays as
:class:`ArrayRef`, which still point into the unchanged file) and the tensor infos. It is
used only while the file's size, times, inode and first bytes are those it was read with;
anything else, a corrupt entry included, means the file is parsed again. Small files are
not cached: their headers parse in a millisecond or two, and test fixtures rewrite them in
place faster than the file system's clock ticks.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..paths import cache_home, write_whole
from .reader import ArrayRef, TensorInfo

__all__ = ["load", "store", "MIN_CACHED_BYTES"]

# Bump when reader._parse changes what it returns.
FORMAT = 1
MIN_CACHED_BYTES = 16 << 20
_HEAD_BYTES = 1 << 16


def _cache_dir() -> Path | None:
    override = os.environ.get("SPECDEC_HEADER_CACHE", "").strip()
    if override.lower() in ("off", "0", "no"):
        return None
    if override:
        return Path(override)
    return cache_home() / "gguf-headers"


def _identity(path: Path, buf) -> list:
    """What must be unchanged for an entry to stand: size, times, inode, and a hash of the
    file's first 64 KiB (its version, counts and first keys), read from the mmap already open."""
    st = path.stat()
    head = hashlib.blake2b(buf[:_HEAD_BYTES], digest_size=16).hexdigest()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, head]


def _entry_path(root: Path, path: Path) -> Path:
    name = hashlib.blake2b(str(path.resolve()).encode(), digest_size=12).hexdigest()
    return root / f"{name}.json"


def _encode(v: Any) -> Any:
    if isinstance(v, ArrayRef):
        return {"@array": [v.type, v.count, v.offset, v.end]}
    if isinstance(v, list):
        return [_encode(x) for x in v]
    return v


def _decode(v: Any) -> Any:
    if isinstance(v, dict):
        return ArrayRef(*v["@array"])
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v


def load(path: Path, buf, size: int) -> tuple[dict, list[TensorInfo], int] | None:
    """The cached (kv, tensors, version) of ``path``, or None when there is none that stands."""
    root = _cache_dir()
    if root is None or size < MIN_CACHED_BYTES:
        return None
    try:
        data = json.loads(_entry_path(root, path).read_text(encoding="utf-8"))
        if data["format"] != FORMAT or data["path"] != str(path.resolve()) or data["identity"] != _identity(path, buf):
            return None
        kv = {k: _decode(v) for k, v in data["kv"].items()}
        tensors = [TensorInfo(name, tuple(shape), ttype, n_el, nbytes, off)
                   for name, shape, ttype, n_el, nbytes, off in data["tensors"]]
        return kv, tensors, int(data["version"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store(path: Path, buf, size: int, kv: dict, tensors: list[TensorInfo], version: int) -> None:
    """Keep what was parsed for the next run; a cache that cannot be written is skipped silently
    (it only saves time)."""
    root = _cache_dir()
    if root is None or size < MIN_CACHED_BYTES:
        return
    data = {"format": FORMAT, "path": str(path.resolve()), "identity": _identity(path, buf), "version": version,
            "kv": {k: _encode(v) for k, v in kv.items()},
            "tensors": [[t.name, list(t.shape), t.type, t.n_elements, t.n_bytes, t.offset] for t in tensors]}
    try:
        root.mkdir(parents=True, exist_ok=True)
        write_whole(_entry_path(root, path), json.dumps(data))
    except (OSError, ValueError, TypeError):
        pass

"""The disk tier: saved prompts in files under one folder (``~/.cache/specdec/prompts/`` by
default), one subfolder per cache key (``key.py``), the whole folder held within a size cap by
deleting the least recently used files first, whatever model they belong to.

It is safe to point at a shared machine's disk: the folder is made readable by its owner only,
and one that another user owns or can write is refused (a file planted there would be fed to
llama.cpp). A file that fails its checks (``entry_file.py``) is refused with one line, deleted,
and its prompt read again. A write that fails (a full disk, a folder made read-only) is said
once and ends writing for this process; reading and serving go on.

Writes happen on a thread of their own (``cache.py``), so the index of what is on disk is
guarded by a lock.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .entry_file import Cells, EntryFileError, EntryHeader, entry_name, read_cells, read_header, write_entry
from .key import CacheKey

# the only names this tier makes: a folder per key digest, an entry per token digest, a write's temporary
# file; nothing else under a cache folder is ever read or deleted (a user may point --prompt-cache at $HOME)
_KEY_DIR = re.compile(r"[0-9a-f]{24}")
_ENTRY = re.compile(r"[0-9a-f]{32}\.kv")
_TEMPORARY = re.compile(r"\.([0-9a-f]{32}\.kv)\.(\d+)\.tmp")


def cache_files(root: Path, *, temporary: bool = False) -> list[Path]:
    """The entry files under ``root`` (with ``temporary``: the writes' temporary files instead),
    in the folders of every key: only the names this tier makes."""
    pattern = _TEMPORARY if temporary else _ENTRY
    out: list[Path] = []
    with contextlib.suppress(OSError):
        for sub in sorted(root.iterdir()):
            if _KEY_DIR.fullmatch(sub.name) and sub.is_dir():
                out += sorted(f for f in sub.iterdir() if pattern.fullmatch(f.name))
    return out


class CacheDirRefused(Exception):
    """A cache folder that is not this user's alone: why."""


@dataclass
class DiskEntry:
    name: str
    header: EntryHeader
    tokens: np.ndarray


def check_dir(folder: Path) -> None:
    """Make ``folder`` (owner-only) if it is missing; refuse one another user owns or can write."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = folder.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise CacheDirRefused(f"{folder} belongs to another user")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheDirRefused(f"{folder} can be written by other users (chmod 700 it)")


class DiskTier:
    """The files of one cache key under ``root``, and the cap over all of ``root``."""

    def __init__(self, root: Path, key: CacheKey, cap: int, note: Callable[[str], None]):
        """Raises ``CacheDirRefused`` for a folder that is not this user's alone, OSError for one
        that cannot be made."""
        check_dir(root)
        self.root, self.key, self.cap, self.note = root, key, cap, note
        self.folder = root / key.digest
        self.folder.mkdir(mode=0o700, exist_ok=True)
        check_dir(self.folder)
        self.lock = threading.Lock()
        self.writable = True  # False after a write failed: said once, no more tried
        self.entries: dict[str, DiskEntry] = {}
        self._sweep_temporaries()
        for path in cache_files(self.root):
            if path.parent == self.folder:
                self._index(path)

    def _sweep_temporaries(self) -> None:
        """Temporary files of writes that never finished (their process died mid-write)."""
        for tmp in cache_files(self.root, temporary=True):
            pid = tmp.name.rsplit(".", 2)[-2]
            if not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    tmp.unlink()

    def _index(self, path: Path) -> DiskEntry | None:
        try:
            header, tokens = read_header(path)
            if header.key != self.key.digest:
                raise EntryFileError(f"it was saved by another model or build ({header.model})")
        except (OSError, EntryFileError) as exc:
            self._refuse(path, str(exc))
            return None
        entry = DiskEntry(path.name, header, tokens)
        self.entries[path.name] = entry
        return entry

    def _refuse(self, path: Path, why: str) -> None:
        self.note(f"prompt cache: refused {path.name}: {why}; deleted, the prompt is read again")
        with contextlib.suppress(OSError):
            path.unlink()
        self.entries.pop(path.name, None)

    @property
    def n_bytes(self) -> int:
        return sum(e.header.n_bytes for e in list(self.entries.values()))

    def load(self, name: str) -> Cells | None:
        """The cells of entry ``name``, checked; None (the file refused and deleted) where they fail."""
        entry = self.entries.get(name)
        if entry is None:
            return None
        path = self.folder / name
        try:
            cells = read_cells(path, entry.header, entry.tokens)
        except (OSError, EntryFileError) as exc:
            with self.lock:
                self._refuse(path, str(exc))
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to be evicted
        return cells

    def save(self, tokens: np.ndarray, cells: Cells) -> None:
        """Write an entry (on the writer thread): room made under the cap first, least recently
        used files out. A failure is said once, and no more writes are tried."""
        name = entry_name(tokens)
        if not self.writable or len(cells) > self.cap or name in self.entries:
            return
        try:
            self._make_room(len(cells))
            path = self.folder / name
            write_entry(path, key=self.key.digest, model=self.key.model, tokens=tokens, cells=cells)
        except OSError as exc:
            self.writable = False
            self.note(f"prompt cache: cannot write to {self.folder} ({exc.strerror or exc}); "
                      "going on without saving prompts to disk")
            return
        with self.lock:
            self._index(path)

    def drop(self, name: str) -> None:
        """Delete entry ``name`` (a longer one holds all of it now)."""
        with self.lock:
            self.entries.pop(name, None)
        with contextlib.suppress(OSError):
            (self.folder / name).unlink()

    def _make_room(self, need: int) -> None:
        """Delete the least recently used files of the whole folder (every key's) until ``need``
        more bytes fit under the cap."""
        files = []
        for path in cache_files(self.root):
            with contextlib.suppress(OSError):
                st = path.stat()
                files.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files, key=lambda f: f[0]):
            if total + need <= self.cap:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                total -= size
                if path.parent == self.folder:
                    with self.lock:
                        self.entries.pop(path.name, None)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != os.getpid()  # this process has no write in flight while it starts


def scan(root: Path) -> list[tuple[Path, EntryHeader | None, float, int]]:
    """Every entry file under ``root`` with its header (None where it fails its checks), when it
    was last used and its size: what ``specdec cache`` lists, without loading any model."""
    out = []
    for path in cache_files(root):
        try:
            header, _ = read_header(path)
        except (OSError, EntryFileError):
            header = None
        with contextlib.suppress(OSError):
            st = path.stat()
            out.append((path, header, st.st_mtime, st.st_size))
    return out

"""The prompt cache's tiers together: what a prompt can restore instead of reading, what a
finished sequence leaves behind, and what was served from where.

``lookup`` finds, over host RAM and disk, the entry sharing the longest token prefix with a
prompt; ``restore`` puts its cells into a sequence and drops the ones past the shared prefix.
``offer`` is called where a sequence's cells are worth keeping (a finished turn: what an
agent's next turn begins with, and what an evicted conversation comes back to; a prompt
``run`` has read): it keeps them in RAM at once and queues them for the disk, where a thread
of their own writes them, so no pass waits on the disk. An entry another one now extends is
dropped: a conversation keeps one entry, its latest turn.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...terminal.console import human_bytes
from .disk import CacheDirRefused, DiskTier
from .entry_file import Cells, entry_name
from .host import HostEntry, HostTier
from .key import CacheKey

if TYPE_CHECKING:
    from ..llama.context import Context

# a prompt restores an entry, and a sequence is saved, only for at least this many tokens past
# what is already held: a few hundred tokens are read in 3 s on 2 CPU cores and in tens of ms on a
# GPU, where restoring them is a copy of a few MB either way; below it, files would only churn
MIN_TOKENS = 256
DISK_DEFAULT = 10 << 30  # bytes on disk unless --prompt-cache-size says otherwise
HOST_MAX = 4 << 30  # host RAM at most (and an eighth of the memory free at start)


@dataclass
class Hit:
    """An entry that holds a prompt's head: where, its name, how many tokens it gives."""

    tier: str  # "host" or "disk"
    name: str
    n: int


@dataclass
class Served:
    """What the cache has done since it opened (``/metrics``)."""

    hits: dict[str, int] = field(default_factory=lambda: {"host": 0, "disk": 0})
    tokens: dict[str, int] = field(default_factory=lambda: {"host": 0, "disk": 0})
    bytes_read: dict[str, int] = field(default_factory=lambda: {"host": 0, "disk": 0})
    saved: int = 0
    bytes_saved: int = 0
    refused: int = 0  # restores llama.cpp refused (too few free cells)


class PromptCache:
    """The host and disk tiers of one context's cells (``key``)."""

    def __init__(self, key: CacheKey, *, folder: Path | None, disk_cap: int = DISK_DEFAULT, host_cap: int,
                 note: Callable[[str], None]):
        """``folder`` None: host RAM only. A folder that cannot be used is said (``note``) and
        left out: the cache then keeps prompts in RAM alone."""
        self.key, self.note = key, note
        self.host = HostTier(host_cap)
        self.disk: DiskTier | None = None
        if folder is not None:
            try:
                self.disk = DiskTier(folder, key, disk_cap, note)
            except (CacheDirRefused, OSError) as exc:
                note(f"prompt cache: not using {folder}: {exc}; prompts are kept in memory only")
        self.served = Served()
        self._writes: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._writer: threading.Thread | None = None
        # files read on a thread of their own for a scheduler (``prefetch``), so that its other
        # sequences decode meanwhile: names asked for, and (name, cells or None) once read
        self._fetching: set[str] = set()
        self._fetched: queue.Queue[tuple[str, Cells | None]] = queue.Queue()

    def describe(self) -> str:
        """One line on what the cache holds, for a server's start."""
        if self.disk is None:
            return f"prompt cache: in memory only (up to {human_bytes(self.host.cap)})"
        d = self.disk
        return (f"prompt cache: {len(d.entries)} prompt{'' if len(d.entries) == 1 else 's'} of this model, "
                f"{human_bytes(d.n_bytes)} in {d.folder} "
                f"(cap {human_bytes(d.cap)} on disk, {human_bytes(self.host.cap)} in memory)")

    # --- finding and restoring ---------------------------------------------------------------
    def lookup(self, prompt: list[int], limit: int, held: int, room: int | None = None) -> Hit | None:
        """The entry sharing the longest prefix (at most ``limit`` tokens) with ``prompt``, where
        that is at least ``MIN_TOKENS`` more than the ``held`` tokens the sequences already hold;
        RAM first on a tie. ``room``: the cells a sequence may hold; a longer entry is passed
        over (it is restored whole before it is cut, and llama.cpp would refuse it at every try)."""
        p = np.asarray(prompt[:limit], dtype=np.int32)
        best: Hit | None = None
        for tier, name, tokens in self._named_tokens():
            if room is not None and tokens.size > room:
                continue
            n = _common(tokens, p)
            if best is None or n > best.n:
                best = Hit(tier, name, n)
        return best if best is not None and best.n >= held + MIN_TOKENS else None

    def restore(self, ctx: Context, seq: int, hit: Hit, *, counted_as: str | None = None) -> int:
        """Put ``hit``'s cells into ``seq`` (emptied first) and keep the first ``hit.n``; how
        many tokens it holds then (0: the entry could not be read or llama.cpp refused it, and
        ``seq`` is empty). ``counted_as``: the tier the figures name (a file ``prefetch`` read
        into RAM for this prompt came from the disk)."""
        cells = self._cells(hit)
        if cells is None:
            return 0
        if not ctx.seq_restore(seq, cells):
            self.served.refused += 1
            return 0
        ctx.seq_rm(seq, hit.n, -1)
        tier = counted_as or hit.tier
        self.served.hits[tier] += 1
        self.served.tokens[tier] += hit.n
        self.served.bytes_read[tier] += len(cells)
        return hit.n

    # --- reading files off the engine's thread ------------------------------------------------
    def prefetch(self, name: str) -> None:
        """Read the file of entry ``name`` on a thread of its own; ``collect`` hands it over."""
        if name in self._fetching:
            return
        self._fetching.add(name)
        disk = self.disk
        assert disk is not None, "a disk entry comes from the disk tier"
        threading.Thread(target=lambda: self._fetched.put((name, disk.load(name))), name="specdec-prompt-read",
                         daemon=True).start()

    def collect(self, wait: float = 0.0) -> set[str]:
        """The names whose files were read (or refused) since the last call, the cells of each
        put in the RAM tier; waits up to ``wait`` seconds for a first one."""
        done: set[str] = set()
        try:
            item = self._fetched.get(timeout=wait) if wait > 0 and self._fetching else self._fetched.get_nowait()
            while True:
                name, cells = item
                d = self.disk.entries.get(name) if self.disk is not None else None
                if cells is not None and d is not None:
                    self.host.put(name, HostEntry(d.tokens, cells))
                self._fetching.discard(name)
                done.add(name)
                item = self._fetched.get_nowait()
        except queue.Empty:
            return done

    def _cells(self, hit: Hit) -> Cells | None:
        if hit.tier == "host":
            entry = self.host.get(hit.name)
            return entry.cells if entry is not None else None
        assert self.disk is not None, "a disk hit comes from the disk tier"
        cells = self.disk.load(hit.name)
        d = self.disk.entries.get(hit.name)
        if cells is not None and d is not None:
            self.host.put(hit.name, HostEntry(d.tokens, cells))  # the next restore is a copy in memory
        return cells

    # --- saving ------------------------------------------------------------------------------
    def offer(self, tokens: list[int], cells: Callable[[], Cells | None]) -> bool:
        """Keep a sequence's cells, which hold ``tokens``, where they add at least ``MIN_TOKENS``
        to every entry's prefix of them (``cells`` is called only then: it copies them out of
        the context). Entries that are a prefix of ``tokens`` are dropped. Whether it was kept."""
        t = np.asarray(tokens, dtype=np.int32)
        covered = max((_common(tokens, t) for _, _, tokens in self._named_tokens()), default=0)
        if t.size - covered < MIN_TOKENS:
            return False
        try:
            data = cells()
        except Exception as exc:  # noqa: BLE001 - a sequence not kept is a prompt read again, never a fault
            self.note(f"prompt cache: could not copy a sequence's cells out ({exc}); not kept")
            return False
        if data is None:
            return False
        name = entry_name(t)
        for _, old, entry_tokens in list(self._named_tokens()):
            if old != name and entry_tokens.size <= t.size and _common(entry_tokens, t) == entry_tokens.size:
                self._drop(old)
        self.host.put(name, HostEntry(t, data))
        self.served.saved += 1
        self.served.bytes_saved += len(data)
        disk = self.disk
        if disk is not None and disk.writable:
            self._on_writer(lambda: disk.save(t, data))
        return True

    def _named_tokens(self) -> Iterator[tuple[str, str, np.ndarray]]:
        """(tier, name, tokens) of every entry, the RAM tier's first (a file also in RAM is its)."""
        yield from (("host", n, e.tokens) for n, e in list(self.host.entries.items()))
        if self.disk is not None:
            yield from (("disk", n, e.tokens) for n, e in list(self.disk.entries.items()) if n not in self.host.entries)

    def _drop(self, name: str) -> None:
        self.host.drop(name)
        disk = self.disk
        if disk is not None:  # after the writes queued before it (one of them may be this entry's)
            self._on_writer(lambda: disk.drop(name))

    def _on_writer(self, work: Callable[[], None]) -> None:
        """``work`` on the writer thread, after the work queued before it."""
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="specdec-prompt-cache", daemon=True)
            self._writer.start()
        self._writes.put(work)

    def _write_loop(self) -> None:
        while True:
            item = self._writes.get()
            try:
                if item is None:
                    return
                item()
            except Exception as exc:  # noqa: BLE001 - a write's fault never reaches the engine
                self.note(f"prompt cache: a write failed ({exc}); going on")
            finally:
                self._writes.task_done()

    def flush(self) -> None:
        """Wait until every queued write is on disk."""
        if self._writer is not None:
            self._writes.join()

    def close(self) -> None:
        """Finish the queued writes (a process ending must not leave its last turns unsaved)."""
        if self._writer is not None:
            t0 = time.perf_counter()
            self._writes.put(None)
            self._writer.join()
            self._writer = None
            if time.perf_counter() - t0 > 2:
                self.note(f"prompt cache: finished writing in {time.perf_counter() - t0:.1f} s")


def _common(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two token arrays."""
    m = min(a.size, b.size)
    if m == 0:
        return 0
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if diff.size else m


def default_folder() -> Path:
    """``$SPECDEC_PROMPT_CACHE``, else ``prompts/`` in specdec's cache folder."""
    import os

    from ...paths import cache_home

    env = os.environ.get("SPECDEC_PROMPT_CACHE", "").strip()
    return Path(env) if env else cache_home() / "prompts"


def open_cache(model_path: Path, *, cache_type_k: str, cache_type_v: str, flash_attn: str, folder: Path | None,
               disk_cap: int, note: Callable[[str], None]) -> PromptCache:
    """The prompt cache of a context of ``model_path`` with these cache settings: on disk in
    ``folder`` (None: in memory only), in RAM up to ``HOST_MAX`` or an eighth of what is free."""
    import psutil

    from ..llama.library import build_id
    from .key import key_for

    key = key_for(model_path, build=build_id(), cache_type_k=cache_type_k, cache_type_v=cache_type_v,
                  flash_attn=flash_attn)
    host_cap = min(HOST_MAX, psutil.virtual_memory().available // 8)
    return PromptCache(key, folder=folder, disk_cap=disk_cap, host_cap=host_cap, note=note)

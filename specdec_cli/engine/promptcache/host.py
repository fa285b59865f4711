"""The host-RAM tier: saved prompts' cells in this process's memory, least recently used first
out once they pass the tier's cap. Restoring from here is a copy in memory (about 0.1 s for a
4,000-token prompt of a 1.5B model here), so a conversation evicted from the context's cells
(more sessions than sequences) comes back without reading its prompt again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from .entry_file import Cells


@dataclass
class HostEntry:
    tokens: np.ndarray  # int32
    cells: Cells


class HostTier:
    """Entries by name (``entry_file.entry_name``), in order of use, within ``cap`` bytes."""

    def __init__(self, cap: int):
        self.cap = cap
        self.entries: OrderedDict[str, HostEntry] = OrderedDict()
        self.n_bytes = 0

    def put(self, name: str, entry: HostEntry) -> None:
        """Keep ``entry`` (the most recently used); the least recently used leave until it fits.
        One larger than the whole cap is not kept."""
        self.drop(name)
        if len(entry.cells) > self.cap:
            return
        self.entries[name] = entry
        self.n_bytes += len(entry.cells)
        while self.n_bytes > self.cap:
            _, old = self.entries.popitem(last=False)
            self.n_bytes -= len(old.cells)

    def get(self, name: str) -> HostEntry | None:
        entry = self.entries.get(name)
        if entry is not None:
            self.entries.move_to_end(name)
        return entry

    def drop(self, name: str) -> None:
        old = self.entries.pop(name, None)
        if old is not None:
            self.n_bytes -= len(old.cells)

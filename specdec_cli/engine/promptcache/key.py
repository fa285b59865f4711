"""What must agree for a prompt's saved cells to be reused: the same model file, the same
llama.cpp build and the same cache types. Anything else (another quantization, another build
whose kernels round differently, a q8_0 cache) gives other keys and values, so it gets another
key and its files are never matched.

The stream layout of the context is not part of it: ``ContextMemory.seq_state`` keeps a
sequence's cells without it, so a server's entry serves ``run`` and a batch, and a server
restarted with another ``--parallel``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

SAMPLE = 1 << 20  # bytes of the model file read at its head, middle and tail


@dataclass(frozen=True)
class CacheKey:
    """The identity of the cells a context makes, and a digest of it that names its files."""

    model: str  # the model file's name, shown by ``specdec cache``
    model_id: str  # the file's size and a digest of three samples of it (``model_identity``)
    build: str  # ``llama.library.build_id()``
    kv: str  # the cache's K and V types and the flash-attention setting (which lays V out)

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.model_id}|{self.build}|{self.kv}".encode()).hexdigest()[:24]


def model_identity(path: Path) -> str:
    """A model file's size and a digest of its head (the GGUF header: architecture, tensor types),
    middle and tail. Hashing all of it would take seconds to minutes at every start; a file
    rewritten with other weights of the same size and header differs in its samples."""
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        for at in sorted({0, max(0, size // 2 - SAMPLE // 2), max(0, size - SAMPLE)}):
            f.seek(at)
            h.update(f.read(SAMPLE))
    return f"{size}:{h.hexdigest()[:32]}"


def key_for(model_path: Path, *, build: str, cache_type_k: str, cache_type_v: str, flash_attn: str) -> CacheKey:
    path = Path(model_path).resolve()
    return CacheKey(model=path.name, model_id=model_identity(path), build=build,
                    kv=f"k-{cache_type_k}|v-{cache_type_v}|fa-{flash_attn}")

"""What kind of memory a model keeps, and how a speculative run can take a rejected draft back.

A rejected draft must leave the target's (and the draft's) memory as if it had never been
evaluated. How that is done depends on the memory, as llama.cpp 0.3.36 builds it
(``src/llama-arch.cpp``: ``llm_arch_is_recurrent``, ``llm_arch_is_hybrid``,
``llm_arch_supports_rs_rollback``; ``common/common.cpp``: ``common_context_can_seq_rm``):

- **attention** and **sliding window** caches drop the last positions (``seq_rm``): "partial";
- **recurrent** (Mamba, RWKV) and **hybrid** models (recurrent layers beside attention layers)
  fold every token into a fixed-size state. Some architectures keep per-token snapshots of the
  last ``n_rs_seq`` states when the context is created with ``n_rs_seq > 0``, and then drop up
  to that many positions: "snapshots";
- the others can only be *checkpointed*: the state is copied before a verify pass and copied
  back after a partial acceptance ("checkpoint").

This module reads GGUF metadata only (no native library), so ``inspect``, ``check`` and
``budget`` can say all this before anything loads; the engine probes the loaded context the
way llama.cpp does and uses what it finds.
"""

from __future__ import annotations

from .methods import Choice

#: llama.cpp's llm_arch_is_recurrent
RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
#: llama.cpp's llm_arch_is_hybrid
HYBRID_ARCHS = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe",
    "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen35", "qwen35moe", "qwen4exp",
    "deepseek4", "minimax-01",
})
#: llama.cpp's llm_arch_supports_rs_rollback: n_rs_seq > 0 gives bounded partial removal
SNAPSHOT_ARCHS = frozenset({
    "kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe",
    "lfm2", "lfm2moe", "bailingmoe3",
})
#: llama.cpp's ``llama_model::create_memory`` gives these no memory at all (``res = nullptr``):
#: encoder-only, embedding and diffusion models, which cannot decode one token after another.
NO_MEMORY_ARCHS = frozenset({
    "bert", "jina-bert-v2", "jina-bert-v3", "nomic-bert", "nomic-bert-moe", "neo-bert", "eurobert",
    "wavtokenizer-dec", "modern-bert", "gemma-embedding", "dream", "llada", "llada-moe", "rnd1",
})
#: Most per-token snapshots specdec asks for: each is a whole copy of the recurrent state
#: (about 150 MB for a 27B hybrid), so drafts on such a target are at most this long.
SNAPSHOT_CAP = 16


class MemoryKind(Choice):
    """What a model's context keeps between tokens."""

    ATTENTION = "attention"
    SLIDING_WINDOW = "sliding window"
    RECURRENT = "recurrent"
    HYBRID = "hybrid"
    NONE = "none"  # no memory at all (encoder-only, embedding, diffusion): cannot generate token by token


class Rollback(Choice):
    """How a context takes back the positions of a rejected draft."""

    PARTIAL = "partial"  # seq_rm drops the last positions
    SNAPSHOTS = "snapshots"  # bounded: the last n_rs_seq states are kept per token
    CHECKPOINT = "checkpoint"  # copy the state before a verify, copy it back after a rejection
    NONE = "none"  # no memory to roll back: speculation cannot run


def memory_kind(arch: str, n_swa: int | None = None) -> MemoryKind:
    """The memory of an architecture; ``n_swa`` is its ``attention.sliding_window`` (0/None: none)."""
    if arch in NO_MEMORY_ARCHS:
        return MemoryKind.NONE
    if arch in RECURRENT_ARCHS:
        return MemoryKind.RECURRENT
    if arch in HYBRID_ARCHS:
        return MemoryKind.HYBRID
    if n_swa:
        return MemoryKind.SLIDING_WINDOW
    return MemoryKind.ATTENTION


def rollback_for(arch: str, kind: MemoryKind, *, snapshots: int) -> Rollback:
    """How specdec rolls a context of ``arch`` back when it asks for ``snapshots`` per-token
    snapshots (0 for a draft's context, as llama.cpp does): what the engine's probe finds."""
    if kind is MemoryKind.NONE:
        return Rollback.NONE
    if kind in (MemoryKind.ATTENTION, MemoryKind.SLIDING_WINDOW):
        return Rollback.PARTIAL
    if snapshots > 0 and arch in SNAPSHOT_ARCHS:
        return Rollback.SNAPSHOTS
    return Rollback.CHECKPOINT


def snapshots_for(draft_max: int) -> int:
    """The ``n_rs_seq`` a target context gets for drafts of up to ``draft_max`` tokens."""
    return max(0, min(draft_max, SNAPSHOT_CAP))


# --- helpers for what only reads metadata (inspect, check, budget) ----------------------------


def target_rollback(arch: str, kind: MemoryKind) -> Rollback:
    """How specdec rolls back a *target* of ``arch`` when a method drafts (it then asks for
    ``snapshots_for(draft_max)`` snapshots, at least one)."""
    return rollback_for(arch, kind, snapshots=SNAPSHOT_CAP)


def draft_rollback(arch: str, kind: MemoryKind) -> Rollback:
    """How specdec rolls back a *draft model*: its context gets no snapshots, as in llama.cpp."""
    return rollback_for(arch, kind, snapshots=0)


#: How a rejected draft leaves each kind of memory, for inspect, check and budget.
ROLLBACK_PHRASES = {
    Rollback.PARTIAL: "drafts roll back by dropping cache positions",
    Rollback.SNAPSHOTS: "drafts roll back with recurrent-state snapshots",
    Rollback.CHECKPOINT: "drafts roll back by checkpoint and restore",
    Rollback.NONE: "drafts cannot be rolled back (no memory)",
}

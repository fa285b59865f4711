"""Which layers of a model keep what, as llama.cpp's loaders mark them (``is_recr``/``is_swa``
per architecture): recurrent layers, attention layers with a KV cache, sliding-window layers,
and the nextn (MTP) layers after the trunk.
"""

from __future__ import annotations

from .memory_kinds import HYBRID_ARCHS, RECURRENT_ARCHS, MemoryKind
from .reader import as_int

__all__ = ["SWA_PATTERN", "swa_layer_set", "layer_memory", "n_nextn"]


# Sliding-window layer patterns llama.cpp hard-codes per architecture (every Nth layer is full).
SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gemma3n": 5}
# hybrids whose recurrent layers are every layer but each full_attention_interval-th (default)
_INTERVAL_HYBRIDS = {"qwen3next": 4, "qwen35": 4, "qwen35moe": 4, "qwen4exp": 4, "minimax-01": 8}


def _per_layer_ints(value, n: int, default: int | None) -> list[int | None]:
    """A per-layer key (a scalar or an array) as n values; short arrays repeat their last value."""
    if isinstance(value, list):
        vals = [as_int(x) for x in value[:n]]
        last = vals[-1] if vals else default
        return vals + [last] * (n - len(vals))
    v = as_int(value)
    return [v if v is not None else default] * n


def _flags(value, n: int) -> list[bool] | None:
    """A per-layer boolean array key, or None when absent or not an array."""
    if not isinstance(value, list) or not value:
        return None
    flags = [bool(x) for x in value[:n]]
    return flags + [False] * (n - len(flags))


def swa_layer_set(kv: dict, arch: str, n_layer: int) -> set[int]:
    """Layers of ``arch`` that use the sliding window (when ``attention.sliding_window`` is set)."""
    pattern = kv.get(f"{arch}.attention.sliding_window_pattern")
    flags = _flags(pattern, n_layer)
    if flags is not None:
        return {i for i, is_swa in enumerate(flags) if is_swa}
    period = as_int(pattern)
    period = period if period is not None and period > 0 else SWA_PATTERN.get(arch, 0)
    if period <= 1:
        return set(range(n_layer)) if period == 1 else set()
    return {i for i in range(n_layer) if (i + 1) % period != 0}


def layer_memory(kv: dict, arch: str, kind: MemoryKind, n_trunk: int, n_swa: int):
    """(recurrent, kv, swa) trunk layer indices, as llama.cpp's loaders mark them."""
    layers = range(n_trunk)
    if kind is MemoryKind.NONE:
        return (), (), ()
    if arch in RECURRENT_ARCHS:
        return tuple(layers), (), ()
    recurrent: set[int] = set()
    attention = set(layers)
    if arch in HYBRID_ARCHS:
        n_head_kv = _per_layer_ints(kv.get(f"{arch}.attention.head_count_kv"), n_trunk, None)
        n_head = _per_layer_ints(kv.get(f"{arch}.attention.head_count"), n_trunk, None)
        kv_heads = [h if h is not None else n_head[i] for i, h in enumerate(n_head_kv)]
        if arch == "falcon-h1":  # every layer has both
            recurrent = set(layers)
        elif arch in _INTERVAL_HYBRIDS:
            flags = _flags(kv.get(f"{arch}.attention.recurrent_layers"), n_trunk)
            if flags is not None:
                recurrent = {i for i in layers if flags[i]}
            else:
                interval = as_int(kv.get(f"{arch}.full_attention_interval"))
                interval = interval if interval and interval > 0 else _INTERVAL_HYBRIDS[arch]
                recurrent = {i for i in layers if (i + 1) % interval != 0}
            attention = set(layers) - recurrent
        elif arch in ("nemotron_h", "nemotron_h_moe"):  # a layer is Mamba, attention or MLP only
            n_ff = _per_layer_ints(kv.get(f"{arch}.feed_forward_length"), n_trunk, 0)
            recurrent = {i for i in layers if not kv_heads[i] and not n_ff[i]}
            attention = {i for i in layers if kv_heads[i] and not n_ff[i]}
        else:  # jamba, granitehybrid, plamo2, lfm2, kimi: no KV heads marks a recurrent layer
            recurrent = {i for i in layers if not kv_heads[i]}
            attention = set(layers) - recurrent
    swa = swa_layer_set(kv, arch, n_trunk) & attention if n_swa else set()
    return tuple(sorted(recurrent)), tuple(sorted(attention)), tuple(sorted(swa))


def n_nextn(kv: dict, arch: str, n_layer: int | None, spec_info: dict) -> int:
    """llama.cpp's n_layer_nextn: ``nextn_predict_layers`` (the nextn tensors say 1 without it)."""
    n = as_int(kv.get(f"{arch}.nextn_predict_layers"))
    if n is None or n < 0:
        n = 1 if spec_info.get("mtp") else 0
    return min(n, n_layer or 0)

"""Read what specdec needs to know about a GGUF model without loading its weights.

:func:`read_gguf` walks the file with :mod:`specdec_cli.gguf_reader` (header and
tensor infos only, checked for integrity) and turns the raw metadata into a
:class:`GGUFInfo`: architecture, shapes, vocabulary facts, chat template and the
kind of speculative draft the file is, if any. Names and sizes are guessed by
:mod:`specdec_cli.model_names`.

The vocabulary facts (vocab type, BOS/EOS ids, add_bos/add_eos with their
per-type defaults) follow llama.cpp's ``llama_vocab::impl::load`` so that the
pairing check in :mod:`specdec_cli.compat` sees what llama.cpp will see.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

import gguf

from .errors import UsageError
from .gguf_reader import (
    ArrayRef,
    TensorInfo,
    _check_tensor_data,
    _Corrupt,
    _open_error,
    _parse,
    _read_strings,
    _string_index,
    _Truncated,
)
from .memory_kinds import (
    HYBRID_ARCHS,
    RECURRENT_ARCHS,
    ROLLBACK_PHRASES,
    MemoryKind,
    Rollback,
    memory_kind,
    target_rollback,
)
from .model_names import _TIERS, family_from_name, size_from_label, size_from_name, size_from_params

__all__ = ["GGUFInfo", "TensorInfo", "read_gguf"]


# --- vocabulary facts as llama.cpp derives them -------------------------------------

# tokenizer.ggml.model -> llama.cpp vocab type (llama_vocab::impl::load)
_VOCAB_TYPES = {
    "llama": "spm",
    "bert": "wpm",
    "gpt2": "bpe",
    "hybriddna": "bpe",
    "whitespace": "bpe",
    "gemma4": "bpe",
    "t5": "ugm",
    "rwkv": "rwkv",
    "plamo2": "plamo2",
    "test": "test",
}
# Default (bos, eos) ids per tokenizer model, before the GGUF keys override them.
_DEFAULT_SPECIAL = {
    "llama": (1, 2),
    "bert": (101, None),
    "gpt2": (11, 11),
    "hybriddna": (11, 11),
    "whitespace": (11, 11),
    "t5": (None, 1),
    "plamo2": (1, 2),
}
# Default (add_bos, add_eos) per vocab type.
_DEFAULT_ADD = {"spm": (True, False), "wpm": (True, False), "ugm": (False, True)}
# BPE pre-tokenizers for which llama.cpp defaults add_bos to true / has no BOS.
_BPE_PRE_ADD_BOS = {
    "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
    "midm-2.0", "lfm2", "jina-v5-nano", "tekken", "chameleon",
}
_BPE_PRE_NO_BOS = {"chatglm-bpe", "glm4", "glm5"}
_BPE_PRE_FORCE_BOS = {"gemma4", "granite-embed-multi-311m"}
# Texts llama.cpp recognises as an end-of-turn token when no eot id is recorded.
_EOT_TEXTS = [
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
]


def _as_int(v) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _special_id(kv: dict, key: str, default: int | None, n_vocab: int) -> int | None:
    """llama.cpp: an out-of-range default is disabled; an out-of-range key value is ignored."""
    if default is not None and default >= n_vocab:
        default = None
    v = _as_int(kv.get(key))
    if v is None or v < 0 or v >= n_vocab:
        return default
    return v


def _vocab_facts(kv: dict) -> dict:
    model = kv.get("tokenizer.ggml.model")
    model = model if isinstance(model, str) else None
    pre = kv.get("tokenizer.ggml.pre") if isinstance(kv.get("tokenizer.ggml.pre"), str) else ""
    tokens = kv.get("tokenizer.ggml.tokens")
    vtype = _VOCAB_TYPES.get(model) if model else None
    if isinstance(tokens, ArrayRef):
        n_vocab = tokens.count
    elif isinstance(tokens, list):
        n_vocab = len(tokens)
    else:
        arch = kv.get("general.architecture", "")
        n_vocab = _as_int(kv.get(f"{arch}.vocab_size")) or 0
    if vtype is None:
        return dict(vocab_type=None, n_vocab=n_vocab, bos_id=None, eos_id=None,
                    add_bos=False, add_eos=False)

    bos, eos = _DEFAULT_SPECIAL.get(model, (None, None))
    add_bos, add_eos = _DEFAULT_ADD.get(vtype, (False, False))
    if model == "gemma4":
        pre = "gemma4"
    if vtype == "bpe":
        if pre in _BPE_PRE_ADD_BOS:
            add_bos = True
        if pre in _BPE_PRE_NO_BOS:
            bos = None
    bos = _special_id(kv, "tokenizer.ggml.bos_token_id", bos, n_vocab)
    eos = _special_id(kv, "tokenizer.ggml.eos_token_id", eos, n_vocab)
    if isinstance(kv.get("tokenizer.ggml.add_bos_token"), bool):
        add_bos = kv["tokenizer.ggml.add_bos_token"]
    if isinstance(kv.get("tokenizer.ggml.add_eos_token"), bool):
        add_eos = kv["tokenizer.ggml.add_eos_token"]
    if vtype == "bpe" and pre in _BPE_PRE_FORCE_BOS:
        add_bos = True
    return dict(vocab_type=vtype, n_vocab=n_vocab, bos_id=bos, eos_id=eos,
                add_bos=add_bos, add_eos=add_eos)


# --- the result -------------------------------------------------------------------


@dataclass
class GGUFInfo:
    """Metadata of one GGUF file; token texts are read on first use of tokens()."""

    path: Path
    file_size: int
    arch: str
    name: str | None
    basename: str | None
    size_label: str | None
    finetune: str | None
    n_params: int
    n_layer: int | None
    n_embd: int | None
    n_head: int | None
    n_head_kv: int | None
    n_ctx_train: int | None
    n_ff: int | None
    file_type: str | None
    vocab_model: str | None
    vocab_type: str | None
    n_vocab: int
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    add_bos: bool
    add_eos: bool
    chat_template: str | None
    spec_method: str | None
    spec_info: dict = field(default_factory=dict)
    version: int = 3
    # what the context keeps between tokens (memory_kinds.py), over the trunk layers
    # (block_count less the nextn/MTP blocks, which only an MTP context runs)
    memory: MemoryKind = MemoryKind.ATTENTION
    n_swa: int = 0  # attention.sliding_window (0: none)
    n_nextn: int = 0  # nextn (MTP) blocks at the end of block_count, as llama.cpp's n_layer_nextn
    recurrent_layers: tuple[int, ...] = ()  # trunk layers with a recurrent state
    kv_layers: tuple[int, ...] = ()  # trunk layers with a KV cache
    swa_layers: tuple[int, ...] = ()  # those of kv_layers that see only the last n_swa tokens
    kv: dict = field(default_factory=dict, repr=False, compare=False)
    tensors: list = field(default_factory=list, repr=False, compare=False)
    _tokens_cache: list | None = field(default=None, init=False, repr=False, compare=False)

    def tokens(self) -> list[str]:
        """Token texts by id, exactly as stored (invalid UTF-8 kept via surrogateescape)."""
        if self._tokens_cache is None:
            ref = self.kv.get("tokenizer.ggml.tokens")
            if isinstance(ref, ArrayRef):
                toks = _read_strings(self.path, ref)
            elif isinstance(ref, list):
                toks = list(ref)
            else:
                toks = []
            # llama.cpp replaces empty texts the same way
            self._tokens_cache = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(toks)]
        return self._tokens_cache

    @property
    def family(self) -> str | None:
        """Normalised base family, e.g. 'qwen2.5-coder', 'llama3.1', 'gemma3'.

        From general.basename, else general.name, else the architecture (not for
        eagle3/dflash heads, whose architecture says nothing about their base)."""
        for text in (self.basename, self.name):
            fam = family_from_name(text)
            if fam:
                return fam
        if self.arch and self.arch not in ("eagle3", "dflash"):
            return self.arch.lower()
        return None

    @property
    def scale(self) -> str | None:
        """Normalised size ('1.5b', '0.5b', '8b', '270m'; see size_from_params).

        Plain models: a tier named instead of a size ('DeepSeek V4 Flash' -> 'flash'),
        else general.size_label, else the parameter count, else the name.
        Speculative drafts (eagle3/dflash/dspark): the size of the base they were
        made for, from the name, else the size label -- never the head's own
        parameter count."""
        from_name = size_from_name(self.name) or size_from_name(self.basename)
        if self.spec_method:
            return from_name or size_from_label(self.size_label)
        if from_name in _TIERS:
            return from_name
        return size_from_label(self.size_label) or size_from_params(self.n_params) or from_name

    @property
    def n_layer_trunk(self) -> int:
        """Layers an ordinary context runs: block_count less the nextn (MTP) blocks."""
        return max(0, (self.n_layer or 0) - self.n_nextn)

    @property
    def has_mtp(self) -> bool:
        """The file carries multi-token-prediction layers: the target can draft for itself."""
        return bool(self.spec_info.get("mtp")) and self.n_nextn > 0

    @property
    def rollback(self) -> Rollback:
        """How specdec takes a rejected draft back out of this model's memory as a target."""
        return target_rollback(self.arch, self.memory)

    def memory_summary(self) -> str:
        """One line for ``inspect``: the memory kind, its layers and how drafts roll back."""
        kind = self.memory
        if kind is MemoryKind.ATTENTION:
            return "attention"
        if kind is MemoryKind.SLIDING_WINDOW:
            where = f" on {len(self.swa_layers)} of {self.n_layer_trunk} layers" if self.swa_layers else ""
            return f"sliding window ({self.n_swa} tokens{where})"
        if kind is MemoryKind.NONE:
            return ("none: an encoder-only, embedding or diffusion model keeps nothing between tokens, "
                    "so it can be neither a target nor a draft")
        phrase = ROLLBACK_PHRASES[self.rollback]
        if kind is MemoryKind.RECURRENT:
            return f"recurrent: {phrase}"
        layers = f"{len(self.recurrent_layers)} recurrent + {len(self.kv_layers)} attention layers"
        return f"hybrid ({layers}): {phrase}"

    def to_dict(self) -> dict:
        """JSON-friendly summary (no token list, no raw metadata)."""
        return {
            "path": str(self.path),
            "file_size": self.file_size,
            "arch": self.arch,
            "name": self.name,
            "basename": self.basename,
            "size_label": self.size_label,
            "finetune": self.finetune,
            "family": self.family,
            "scale": self.scale,
            "n_params": self.n_params,
            "n_layer": self.n_layer,
            "n_embd": self.n_embd,
            "n_head": self.n_head,
            "n_head_kv": self.n_head_kv,
            "n_ctx_train": self.n_ctx_train,
            "n_ff": self.n_ff,
            "file_type": self.file_type,
            "vocab_model": self.vocab_model,
            "vocab_type": self.vocab_type,
            "n_vocab": self.n_vocab,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "eot_id": self.eot_id,
            "add_bos": self.add_bos,
            "add_eos": self.add_eos,
            "chat_template": self.chat_template,
            "spec_method": self.spec_method,
            "spec_info": dict(self.spec_info),
            "memory": self.memory.value,
            "rollback": self.rollback.value,
            "recurrent_layers": len(self.recurrent_layers),
            "attention_layers": len(self.kv_layers),
            "sliding_window": self.n_swa or None,
            "sliding_window_layers": len(self.swa_layers),
            "nextn_layers": self.n_nextn,
        }


# --- assembling GGUFInfo ----------------------------------------------------------


def _file_type(kv: dict, tensors: list[TensorInfo]) -> str | None:
    ft = _as_int(kv.get("general.file_type"))
    if ft is not None:
        try:
            name = gguf.LlamaFileType(ft & ~int(gguf.LlamaFileType.GUESSED)).name
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    weight: dict[str, int] = {}
    for t in tensors:
        weight[t.type] = weight.get(t.type, 0) + (t.n_bytes or t.n_elements)
    return max(weight, key=weight.get) if weight else None


def _eot_id(kv: dict, n_vocab: int, buf) -> int | None:
    """tokenizer.ggml.eot_token_id, else the first of llama.cpp's end-of-turn texts present."""
    v = _as_int(kv.get("tokenizer.ggml.eot_token_id"))
    if v is not None and 0 <= v < n_vocab:
        return v
    toks = kv.get("tokenizer.ggml.tokens")
    for text in _EOT_TEXTS:
        if isinstance(toks, ArrayRef):
            i = _string_index(buf, toks, text)
        elif isinstance(toks, list):
            i = toks.index(text) if text in toks else None
        else:
            return None
        if i is not None:
            return i
    return None


def _spec(kv: dict, arch: str, tensors: list[TensorInfo]) -> tuple[str | None, dict]:
    """Speculative-draft kind, as common_speculative_types_from_gguf (plus eagle3 by arch)."""
    names = {t.name for t in tensors}

    def get(suffix):
        return kv.get(f"{arch}.{suffix}")

    if arch == "eagle3":
        info = {"target_layers": get("target_layers"), "target_hidden_size": get("target_hidden_size")}
        for k in ("norm_before_residual", "norm_before_fc"):
            if get(k) is not None:
                info[k] = get(k)
        return "eagle3", {k: v for k, v in info.items() if v is not None}
    if arch == "dflash":
        method = "dspark" if "markov_w1.weight" in names else "dflash"
        info = {
            "target_layers": get("target_layers"),
            "target_hidden_size": get("target_hidden_size"),
            "block_size": get("block_size"),
            "has_markov_head": "markov_w1.weight" in names,
            "has_confidence_head": get("has_confidence_head")
            if isinstance(get("has_confidence_head"), bool) else "conf_proj.weight" in names,
            "sample_from_anchor": get("sample_from_anchor"),
            "selector_top_k": get("selector_top_k"),
            "mask_token_id": kv.get("tokenizer.ggml.mask_token_id"),
        }
        return method, {k: v for k, v in info.items() if v is not None}
    n_layer = _as_int(get("block_count"))
    if n_layer and f"blk.{n_layer - 1}.nextn.eh_proj.weight" in names:
        # built-in multi-token-prediction layers: the model drafts for itself
        info = {"mtp": True}
        if get("nextn_predict_layers") is not None:
            info["nextn_predict_layers"] = get("nextn_predict_layers")
        return None, info
    return None, {}


# --- which layers keep what (llama.cpp's is_recr / is_swa per architecture) ---------------------

# Sliding-window layer patterns llama.cpp hard-codes per architecture (every Nth layer is full).
SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gemma3n": 5}
# hybrids whose recurrent layers are every layer but each full_attention_interval-th (default)
_INTERVAL_HYBRIDS = {"qwen3next": 4, "qwen35": 4, "qwen35moe": 4, "qwen4exp": 4, "minimax-01": 8}


def _per_layer_ints(value, n: int, default: int | None) -> list[int | None]:
    """A per-layer key (a scalar or an array) as n values; short arrays repeat their last value."""
    if isinstance(value, list):
        vals = [_as_int(x) for x in value[:n]]
        last = vals[-1] if vals else default
        return vals + [last] * (n - len(vals))
    v = _as_int(value)
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
    period = _as_int(pattern)
    period = period if period is not None and period > 0 else SWA_PATTERN.get(arch, 0)
    if period <= 1:
        return set(range(n_layer)) if period == 1 else set()
    return {i for i in range(n_layer) if (i + 1) % period != 0}


def _layer_memory(kv: dict, arch: str, kind: MemoryKind, n_trunk: int, n_swa: int):
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
                interval = _as_int(kv.get(f"{arch}.full_attention_interval"))
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


def _n_nextn(kv: dict, arch: str, n_layer: int | None, spec_info: dict) -> int:
    """llama.cpp's n_layer_nextn: ``nextn_predict_layers`` (the nextn tensors say 1 without it)."""
    n = _as_int(kv.get(f"{arch}.nextn_predict_layers"))
    if n is None or n < 0:
        n = 1 if spec_info.get("mtp") else 0
    return min(n, n_layer or 0)


def _str_or_none(v) -> str | None:
    return v if isinstance(v, str) and v else None


def _first_int(v) -> int | None:
    """Per-layer arrays (head counts, ff lengths) collapse to their first value."""
    if isinstance(v, list):
        v = next((x for x in v if _as_int(x)), v[0] if v else None)
    return _as_int(v)


def read_gguf(path: str | Path) -> GGUFInfo:
    """Read metadata and tensor infos of a GGUF file (no weights are loaded).

    Raises UsageError for a missing path, a directory, a file that is not a GGUF,
    and a truncated or corrupt one.
    """
    path = Path(path)
    if not path.is_file():
        raise _open_error(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}", hint="check the file's permissions") from None
    with f:
        size = path.stat().st_size
        magic = f.read(4)
        if magic != b"GGUF":
            detail = "empty file" if size == 0 else f"starts with {magic!r}"
            raise UsageError(f"not a GGUF file: {path} ({detail})",
                             hint="pass a .gguf model file (Hugging Face checkpoints must be converted first)")
        try:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                kv, tensors, version = _parse(buf, size)
                vocab = _vocab_facts(kv)
                eot = _eot_id(kv, vocab["n_vocab"], buf) if vocab["vocab_type"] else None
            _check_tensor_data(tensors, size)
        except _Truncated as e:
            raise UsageError(f"truncated GGUF: {path} ({e})",
                             hint="the download or conversion did not finish: fetch or convert it again") from None
        except (_Corrupt, struct.error, ValueError, OverflowError, MemoryError) as e:
            raise UsageError(f"corrupt GGUF: {path} ({e})",
                             hint="fetch or convert the model again") from None

    arch = _str_or_none(kv.get("general.architecture")) or ""

    def akey(suffix):
        return kv.get(f"{arch}.{suffix}")

    method, spec_info = _spec(kv, arch, tensors)
    n_layer = _as_int(akey("block_count"))
    n_swa = _as_int(akey("attention.sliding_window")) or 0
    n_swa = max(0, n_swa)
    memory = memory_kind(arch, n_swa)
    n_nextn = _n_nextn(kv, arch, n_layer, spec_info)
    recurrent, kv_layers, swa_layers = _layer_memory(kv, arch, memory, max(0, (n_layer or 0) - n_nextn), n_swa)
    info = GGUFInfo(
        path=path,
        file_size=size,
        arch=arch,
        name=_str_or_none(kv.get("general.name")),
        basename=_str_or_none(kv.get("general.basename")),
        size_label=_str_or_none(kv.get("general.size_label")),
        finetune=_str_or_none(kv.get("general.finetune")),
        n_params=sum(t.n_elements for t in tensors),
        n_layer=n_layer,
        n_embd=_as_int(akey("embedding_length")),
        n_head=_first_int(akey("attention.head_count")),
        n_head_kv=_first_int(akey("attention.head_count_kv")),
        n_ctx_train=_as_int(akey("context_length")),
        n_ff=_first_int(akey("feed_forward_length")),
        file_type=_file_type(kv, tensors),
        vocab_model=_str_or_none(kv.get("tokenizer.ggml.model")),
        vocab_type=vocab["vocab_type"],
        n_vocab=vocab["n_vocab"],
        bos_id=vocab["bos_id"],
        eos_id=vocab["eos_id"],
        eot_id=eot,
        add_bos=vocab["add_bos"],
        add_eos=vocab["add_eos"],
        chat_template=_str_or_none(kv.get("tokenizer.chat_template")),
        spec_method=method,
        spec_info=spec_info,
        version=version,
        memory=memory,
        n_swa=n_swa,
        n_nextn=n_nextn,
        recurrent_layers=recurrent,
        kv_layers=kv_layers,
        swa_layers=swa_layers,
        kv=kv,
        tensors=tensors,
    )
    return info

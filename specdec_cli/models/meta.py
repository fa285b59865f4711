"""Read what specdec needs to know about a GGUF model without loading its weights.

:func:`read_gguf` walks the file with :mod:`specdec_cli.models.reader` (header and
tensor infos only, checked for integrity; a header parsed on an earlier run comes from
:mod:`.header_cache` while the file is unchanged) and turns the raw metadata into a
:class:`GGUFInfo`: architecture, shapes, vocabulary facts, chat template and the
kind of speculative draft the file is, if any. Names and sizes are guessed by
:mod:`specdec_cli.models.names`.

The vocabulary facts come from :mod:`.vocab` (as llama.cpp's ``llama_vocab::impl::load``
derives them, so the pairing check sees what llama.cpp will see), which layers keep
what from :mod:`.layers`.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from . import header_cache
from .gguf_import import gguf
from .layers import layer_memory
from .layers import n_nextn as count_nextn
from .memory_kinds import (
    ROLLBACK_PHRASES,
    MemoryKind,
    Rollback,
    memory_kind,
    target_rollback,
)
from .names import _TIERS, family_from_name, size_from_label, size_from_name, size_from_params
from .reader import (
    ArrayRef,
    TensorInfo,
    _check_tensor_data,
    _Corrupt,
    _open_error,
    _parse,
    _read_strings,
    _Truncated,
    as_int,
)
from .vocab import eot_id, vocab_facts

__all__ = ["GGUFInfo", "TensorInfo", "read_gguf"]


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
    _raw_cache: bytes | None = field(default=None, init=False, repr=False, compare=False)
    _eot_cache: tuple[int | None] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def eot_id(self) -> int | None:
        """The end-of-turn token: ``tokenizer.ggml.eot_token_id``, else the first of llama.cpp's
        end-of-turn texts in the vocabulary. Found when first asked for: the text search walks the
        token array (20-40 ms for 150k tokens), and finding a draft reads every GGUF beside the
        target, none of which needs it."""
        if self._eot_cache is None:
            eot = None
            if self.vocab_type:
                try:
                    with open(self.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                        eot = eot_id(self.kv, self.n_vocab, buf)
                except (OSError, ValueError):  # gone or emptied since it was read: not known
                    eot = None
            self._eot_cache = (eot,)
        return self._eot_cache[0]

    def tokens_raw(self) -> bytes | None:
        """The token texts' array as stored in the file, undecoded (None when it was read inline):
        two vocabularies whose arrays are the same bytes are the same, which takes a read and a
        compare where decoding 151,000 texts of each takes a tenth of a second."""
        ref = self.kv.get("tokenizer.ggml.tokens")
        if not isinstance(ref, ArrayRef):
            return None
        if self._raw_cache is None:  # the target's is compared with every neighbour's
            with open(self.path, "rb") as f:
                f.seek(ref.offset)
                self._raw_cache = f.read(ref.end - ref.offset)
        return self._raw_cache

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
    ft = as_int(kv.get("general.file_type"))
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
    n_layer = as_int(get("block_count"))
    if n_layer and f"blk.{n_layer - 1}.nextn.eh_proj.weight" in names:
        # built-in multi-token-prediction layers: the model drafts for itself
        info = {"mtp": True}
        if get("nextn_predict_layers") is not None:
            info["nextn_predict_layers"] = get("nextn_predict_layers")
        return None, info
    return None, {}


def _str_or_none(v) -> str | None:
    return v if isinstance(v, str) and v else None


def _first_int(v) -> int | None:
    """Per-layer arrays (head counts, ff lengths) collapse to their first value."""
    if isinstance(v, list):
        v = next((x for x in v if as_int(x)), v[0] if v else None)
    return as_int(v)


def read_gguf(path: str | Path) -> GGUFInfo:
    """Read metadata and tensor infos of a GGUF file (no weights are loaded).

    Raises UsageError for a missing path, a directory, a file that is not a GGUF,
    and a truncated or corrupt one.
    """
    path = Path(path)
    if not path.is_file():
        raise _open_error(path)
    try:
        f = open(path, "rb")  # noqa: SIM115 - opened apart so that an OSError is one line; closed by the with below
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
                cached = header_cache.load(path, buf, size)
                if cached is None:
                    kv, tensors, version = _parse(buf, size)
                    header_cache.store(path, buf, size, kv, tensors, version)
                else:
                    kv, tensors, version = cached
                vocab = vocab_facts(kv)
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
    n_layer = as_int(akey("block_count"))
    n_swa = as_int(akey("attention.sliding_window")) or 0
    n_swa = max(0, n_swa)
    memory = memory_kind(arch, n_swa)
    n_nextn = count_nextn(kv, arch, n_layer, spec_info)
    recurrent, kv_layers, swa_layers = layer_memory(kv, arch, memory, max(0, (n_layer or 0) - n_nextn), n_swa)
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
        n_embd=as_int(akey("embedding_length")),
        n_head=_first_int(akey("attention.head_count")),
        n_head_kv=_first_int(akey("attention.head_count_kv")),
        n_ctx_train=as_int(akey("context_length")),
        n_ff=_first_int(akey("feed_forward_length")),
        file_type=_file_type(kv, tensors),
        vocab_model=_str_or_none(kv.get("tokenizer.ggml.model")),
        vocab_type=vocab["vocab_type"],
        n_vocab=vocab["n_vocab"],
        bos_id=vocab["bos_id"],
        eos_id=vocab["eos_id"],
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

"""Read what specdec needs to know about a GGUF model without loading its weights.

Why a parser of our own: ``gguf.GGUFReader`` decodes every field eagerly, and a
real vocabulary (151,936 tokens plus as many BPE merges) takes it seconds. The
format is simple -- magic, version, counts, key/value pairs, tensor infos -- so
we walk it over an mmap, keep scalars and small arrays, remember only where the
big arrays live, and decode the token texts on demand (they are needed only to
compare two vocabularies). ``gguf`` is still used for its enums and type sizes.

The vocabulary facts (vocab type, BOS/EOS ids, add_bos/add_eos with their
per-type defaults) follow llama.cpp's ``llama_vocab::impl::load`` so that the
pairing check in :mod:`specdec_cli.compat` sees what llama.cpp will see.
"""

from __future__ import annotations

import errno
import mmap
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf

from .errors import UsageError

__all__ = [
    "GGUFInfo",
    "TensorInfo",
    "ArrayRef",
    "read_gguf",
    "family_from_name",
    "size_from_name",
    "size_from_label",
    "size_from_params",
]

# Arrays longer than this are not decoded while reading metadata; an ArrayRef
# records where they are instead.
_SMALL_ARRAY = 256

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

_VT = gguf.GGUFValueType
_SCALAR_FMT = {
    _VT.UINT8: "B", _VT.INT8: "b", _VT.UINT16: "H", _VT.INT16: "h",
    _VT.UINT32: "I", _VT.INT32: "i", _VT.FLOAT32: "f", _VT.BOOL: "?",
    _VT.UINT64: "Q", _VT.INT64: "q", _VT.FLOAT64: "d",
}
_SCALAR_STRUCT = {vt: struct.Struct("<" + f) for vt, f in _SCALAR_FMT.items()}


# --- low-level parser ---------------------------------------------------------------


class _Truncated(Exception):
    """The file ends before the structure it announces."""


class _Corrupt(Exception):
    """The bytes are there but make no sense (unknown type, absurd count)."""


@dataclass(frozen=True)
class ArrayRef:
    """A large metadata array left undecoded: element type, length, byte range."""

    type: str  # GGUFValueType name of the elements
    count: int
    offset: int
    end: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order (ne0 first)
    type: str  # GGMLQuantizationType name, or "TYPE_<n>" if unknown to gguf
    n_elements: int
    n_bytes: int | None  # None when the type is unknown to the installed gguf
    offset: int  # absolute offset in the file


class _Cursor:
    """Sequential little-endian reads over a buffer, raising _Truncated at its end."""

    def __init__(self, buf, size: int):
        self.buf = buf
        self.size = size
        self.off = 0

    def need(self, n: int) -> None:
        if self.off + n > self.size:
            raise _Truncated(f"the header needs {self.off + n} bytes, the file has {self.size}")

    def u32(self) -> int:
        self.need(4)
        (v,) = _U32.unpack_from(self.buf, self.off)
        self.off += 4
        return v

    def u64(self) -> int:
        self.need(8)
        (v,) = _U64.unpack_from(self.buf, self.off)
        self.off += 8
        return v

    def raw_str(self) -> bytes:
        n = self.u64()
        self.need(n)
        s = self.buf[self.off:self.off + n]
        self.off += n
        return s

    def text(self) -> str:
        return self.raw_str().decode("utf-8", errors="replace")

    def scalar(self, vt: int):
        st = _SCALAR_STRUCT[vt]
        self.need(st.size)
        (v,) = st.unpack_from(self.buf, self.off)
        self.off += st.size
        return v

    def skip_strings(self, n: int) -> None:
        """Step over n length-prefixed strings (the cost of a big string array)."""
        buf, off, size, unpack = self.buf, self.off, self.size, _U64.unpack_from
        for _ in range(n):
            if off + 8 > size:
                raise _Truncated(f"the header needs {off + 8} bytes, the file has {size}")
            off += 8 + unpack(buf, off)[0]
        if off > size:
            raise _Truncated(f"the header needs {off} bytes, the file has {size}")
        self.off = off

    def value(self, vt: int, key: str):
        if vt == _VT.STRING:
            return self.text()
        if vt in _SCALAR_STRUCT:
            return self.scalar(vt)
        if vt == _VT.ARRAY:
            return self.array(key)
        raise _Corrupt(f"unknown value type {vt} for key {key!r}")

    def array(self, key: str):
        et = self.u32()
        n = self.u64()
        start = self.off
        if et == _VT.STRING:
            if n <= _SMALL_ARRAY:
                return [self.text() for _ in range(n)]
            self.skip_strings(n)
            return ArrayRef("STRING", n, start, self.off)
        if et in _SCALAR_STRUCT:
            width = _SCALAR_STRUCT[et].size
            self.need(n * width)
            self.off += n * width
            if n <= _SMALL_ARRAY:
                return list(struct.unpack_from(f"<{n}{_SCALAR_FMT[et]}", self.buf, start))
            return ArrayRef(_VT(et).name, n, start, self.off)
        if et == _VT.ARRAY:  # nested arrays are rare and small
            if n * 12 > self.size:
                raise _Truncated(f"array {key!r} announces {n} elements")
            return [self.array(key) for _ in range(n)]
        raise _Corrupt(f"unknown array element type {et} for key {key!r}")


def _tensor_nbytes(ttype: int, shape: tuple[int, ...]) -> int | None:
    try:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
    except (ValueError, KeyError):
        return None
    n = 1
    for d in shape[1:]:
        n *= d
    return (shape[0] // block) * size * n if shape else size


def _type_name(ttype: int) -> str:
    try:
        return gguf.GGMLQuantizationType(ttype).name
    except ValueError:
        return f"TYPE_{ttype}"


def _parse(buf, size: int) -> tuple[dict[str, Any], list[TensorInfo], int]:
    """Parse header, KV pairs and tensor infos. Returns (kv, tensors, version)."""
    c = _Cursor(buf, size)
    c.off = 4  # magic checked by the caller
    version = c.u32()
    if version not in (2, 3):
        if version & 0xFFFF == 0 and version >> 16:
            raise _Corrupt("big-endian GGUF files are not supported")
        raise _Corrupt(f"unsupported GGUF version {version}")
    n_tensors = c.u64()
    n_kv = c.u64()
    # Every KV pair and tensor info takes well over 8 bytes: catch absurd counts early.
    if (n_tensors + n_kv) * 8 > size:
        raise _Truncated(f"the header announces {n_kv} metadata keys and {n_tensors} tensors, "
                         f"the file has {size} bytes")

    kv: dict[str, Any] = {}
    for _ in range(n_kv):
        key = c.text()
        vt = c.u32()
        kv[key] = c.value(vt, key)

    infos = []
    for _ in range(n_tensors):
        name = c.text()
        n_dims = c.u32()
        if n_dims > 8:
            raise _Corrupt(f"tensor {name!r} has {n_dims} dimensions")
        shape = tuple(c.u64() for _ in range(n_dims))
        ttype = c.u32()
        offset = c.u64()
        infos.append((name, shape, ttype, offset))

    align = kv.get("general.alignment", gguf.GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(align, int) or align <= 0:
        align = gguf.GGUF_DEFAULT_ALIGNMENT
    data_start = -(-c.off // align) * align

    tensors = []
    seen: set[str] = set()
    for name, shape, ttype, offset in infos:
        _check_tensor(name, shape, ttype, offset, align, seen)
        n_el = 1
        for d in shape:
            n_el *= d
        nbytes = _tensor_nbytes(ttype, shape)
        tensors.append(TensorInfo(name, shape, _type_name(ttype), n_el, nbytes, data_start + offset))
    _check_vocab_arrays(kv)
    _check_layers(kv, tensors)
    return kv, tensors, version


def _check_tensor(name: str, shape: tuple[int, ...], ttype: int, offset: int, align: int, seen: set[str]) -> None:
    """What llama.cpp's loader checks of a tensor info, checked here so that the budget (which
    sizes every tensor) never meets a tensor it cannot size; each message names the tensor."""
    if name in seen:
        raise _Corrupt(f"tensor {name!r} appears twice")
    seen.add(name)
    try:
        block, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
    except (ValueError, KeyError):
        raise _Corrupt(f"tensor {name!r} has unknown type {ttype} (a newer llama.cpp's, or a corrupt file)") from None
    if shape and shape[0] % block:
        raise _Corrupt(f"tensor {name!r} of type {_type_name(ttype)} has a first dimension {shape[0]} "
                       f"that is not a multiple of its block size {block}")
    if offset % align:
        raise _Corrupt(f"tensor {name!r} starts at offset {offset}, not a multiple of the alignment {align}")
    if name.startswith("blk.") and not name.split(".")[1].isdecimal():
        raise _Corrupt(f"tensor {name!r} has no layer number after 'blk.'")


MAX_LAYERS = 512  # llama.cpp's LLAMA_MAX_LAYERS (src/llama-hparams.h)


def _check_layers(kv: dict, tensors: list[TensorInfo]) -> None:
    """Layer tensors beyond the block count would be placed on no device by the budget."""
    arch = kv.get("general.architecture")
    n_layer = kv.get(f"{arch}.block_count") if isinstance(arch, str) else None
    if not isinstance(n_layer, int) or isinstance(n_layer, bool):
        return
    if not 0 <= n_layer <= MAX_LAYERS:
        raise _Corrupt(f"{arch}.block_count is {n_layer}; llama.cpp loads at most {MAX_LAYERS} layers")
    for t in tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= n_layer:
            raise _Corrupt(f"tensor {t.name!r} is in layer {t.name.split('.')[1]}, "
                           f"but the model has {n_layer} ({arch}.block_count)")


# metadata arrays the loader reads element by element, and the element types they must have
_VOCAB_ARRAYS = {
    "tokenizer.ggml.tokens": ("STRING",),
    "tokenizer.ggml.merges": ("STRING",),
    "tokenizer.ggml.scores": ("FLOAT32",),
    "tokenizer.ggml.token_type": ("INT32", "UINT32"),
}


def _check_vocab_arrays(kv: dict) -> None:
    for key, kinds in _VOCAB_ARRAYS.items():
        v = kv.get(key)
        if v is None:
            continue
        if isinstance(v, ArrayRef):
            kind = v.type
        elif isinstance(v, list):
            want = str if kinds == ("STRING",) else (float if kinds == ("FLOAT32",) else int)
            bad = next((x for x in v if not isinstance(x, want) or isinstance(x, bool)), None)
            if bad is None:
                continue
            kind = type(bad).__name__
        else:
            kind = f"a single {type(v).__name__}"
        if kind not in kinds:
            raise _Corrupt(f"{key!r} holds {kind} values where llama.cpp expects {' or '.join(kinds)}")


def _check_tensor_data(tensors: list[TensorInfo], size: int) -> None:
    worst = None
    for t in tensors:
        if t.n_bytes is not None and t.offset + t.n_bytes > size:
            if worst is None or t.offset + t.n_bytes > worst.offset + worst.n_bytes:
                worst = t
    if worst is not None:
        raise _Truncated(
            f"tensor data ends at byte {worst.offset + worst.n_bytes} "
            f"({worst.name}), the file has {size}"
        )


def _read_strings(path: Path, ref: ArrayRef) -> list[str]:
    """Decode a string array recorded by an ArrayRef (token texts, exact bytes kept)."""
    with open(path, "rb") as f:
        f.seek(ref.offset)
        data = f.read(ref.end - ref.offset)
    out: list[str] = []
    append, unpack, off = out.append, _U64.unpack_from, 0
    try:
        for _ in range(ref.count):
            (n,) = unpack(data, off)
            off += 8
            append(data[off:off + n].decode("utf-8", errors="surrogateescape"))
            off += n
    except struct.error:
        off = -1
    if off != len(data):
        raise UsageError(f"corrupt GGUF: {path} (the file changed since it was read)",
                         hint="read it again, or download or convert the model again")
    return out


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


# --- names, families and sizes --------------------------------------------------------

_SIZE_TOKEN = re.compile(r"^(\d+(?:\.\d+)?)([kmbt])$")
_VERSION_TOKEN = re.compile(r"^\d+(?:\.\d+)*$")
_SPEC_WORDS = {"eagle", "eagle3", "dflash", "dspark", "mtp", "draft",
               "speculator", "nextn", "medusa"}
_SPEC_SUFFIX = re.compile(r"^(?:block|b|bs|ttt)\d+$")
_VARIANT_WORDS = {"instruct", "it", "chat", "base", "pt", "gguf", "hf", "meta"}
_QUANT_WORD = re.compile(r"^(?:i?q\d\w*|f16|f32|bf16|fp16|fp8|fp32|mxfp4)$")
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
# Named tiers some families use instead of a size (DeepSeek-V4-Flash / -Pro, V2-Lite).
_TIERS = {"flash", "pro", "lite"}

# Sizes models are marketed under, in billions; see size_from_params for the rule.
_CANONICAL_B = [
    0.135, 0.27, 0.36, 0.5, 0.6, 1, 1.5, 1.7, 2, 3, 4, 7, 8, 9, 12, 13, 14, 20, 22,
    24, 27, 30, 32, 70, 72, 110, 120, 235, 405, 671,
]


def _words(text: str) -> list[str]:
    text = text.strip().lower().rsplit("/", 1)[-1]
    if text.endswith(".gguf"):
        text = text[:-5]
    return [w for w in re.split(r"[\s_\-]+", text) if w]


def _name_parts(text: str) -> tuple[list[str], str | None]:
    """(family words, size word) of a name: speculative-method words dropped, the
    family being what precedes the first size word, or -- with no size word -- a
    trailing tier word ('flash', 'pro', 'lite') taken as the size."""
    words = [w for w in _words(text) if w not in _SPEC_WORDS and not _SPEC_SUFFIX.match(w)]
    size = None
    for i, w in enumerate(words):
        if _SIZE_TOKEN.match(w):
            words, size = words[:i], w
            break
    words = [w for w in words if w not in _VARIANT_WORDS and not _QUANT_WORD.match(w)]
    if size is None and len(words) > 1 and words[-1] in _TIERS:
        words, size = words[:-1], words[-1]
    return words, size


def family_from_name(text: str | None) -> str | None:
    """Normalised base family of a model name, lowercase.

    'Qwen2.5-Coder-1.5B-Instruct' -> 'qwen2.5-coder', 'Meta-Llama-3.1-8B-Instruct'
    -> 'llama3.1', 'gemma-3-270m-it' -> 'gemma3', 'dspark_qwen3_8b_block7' -> 'qwen3',
    'DeepSeek-V4-Flash' -> 'deepseek-v4'. The family is what precedes the size;
    speculative-method words ('eagle3', 'dflash', 'dspark', 'block7', ...) and
    variant words ('instruct', 'it', ...) are dropped; a word followed by a bare
    version number is joined ('llama 3.1' -> 'llama3.1').
    """
    if not text:
        return None
    words, _ = _name_parts(text)
    joined: list[str] = []
    for w in words:
        if joined and _VERSION_TOKEN.match(w) and joined[-1].isalpha():
            joined[-1] += w
        else:
            joined.append(w)
    return "-".join(joined) or None


def _fmt_count(n: float) -> str:
    """Plain rounded notation, lowercase: 7.6b, 15b, 494m, 682k."""
    if n >= 1e9:
        b = n / 1e9
        return (f"{b:.1f}".rstrip("0").rstrip(".") if b < 10 else str(round(b))) + "b"
    if n >= 1e6:
        return f"{round(n / 1e6)}m"
    if n >= 1e3:
        return f"{round(n / 1e3)}k"
    return str(int(n))


def size_from_params(n: float | None) -> str | None:
    """Canonical size label for a parameter count.

    Rule: for 100M and up, take the largest marketed size (135m, 270m, 360m,
    0.5b, 0.6b, 1b, 1.5b, 1.7b, 2b, 3b, 4b, 7b, 8b, ... 70b, 72b, ...) that is at
    most 4% above the count -- real counts sit at most a few percent below the
    marketed size and often well above it (Qwen2.5-7B has 7.6B, Qwen2.5-0.5B
    494M, gemma-3-4b 3.9B) -- provided
    the count is within 30% of it; otherwise (and below 100M) the rounded count
    itself ('6.7b', '682k').
    """
    if not n or n <= 0:
        return None
    b = n / 1e9
    if b >= 0.1:
        below = [c for c in _CANONICAL_B if c <= b * 1.04]
        if below and b / below[-1] <= 1.3:
            c = below[-1]
            return f"{round(c * 1000)}m" if c < 0.5 else f"{c:g}b"
    return _fmt_count(n)


def size_from_label(label: str | None) -> str | None:
    """Normalise a size label ('1.5B' -> '1.5b', '494M' -> '0.5b'); odd labels
    such as '8x7B' or '30B-A3B' are only lowercased."""
    if not label or not label.strip():
        return None
    m = _SIZE_TOKEN.match(label.strip().lower())
    if not m:
        return label.strip().lower()
    return size_from_params(float(m.group(1)) * _SCALE[m.group(2)])


def size_from_name(text: str | None) -> str | None:
    """The size word of a name, normalised: 'dspark_qwen3_8b_block7' -> '8b',
    'DeepSeek-V4-Flash' -> 'flash'."""
    if not text:
        return None
    _, size = _name_parts(text)
    return size if size in _TIERS else size_from_label(size)


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


def _string_index(buf, ref: ArrayRef, text: str) -> int | None:
    """Index of ``text`` in an undecoded string array, found by byte search (no decoding)."""
    raw = text.encode("utf-8")
    pattern = _U64.pack(len(raw)) + raw
    pos = buf.find(pattern, ref.offset, ref.end)
    off, i, unpack = ref.offset, 0, _U64.unpack_from
    while pos >= 0 and off < ref.end:
        if off == pos:
            return i
        if off > pos:  # the match was inside another string: look further on
            pos = buf.find(pattern, off, ref.end)
            continue
        off += 8 + unpack(buf, off)[0]
        i += 1
    return None


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


def _str_or_none(v) -> str | None:
    return v if isinstance(v, str) and v else None


def _first_int(v) -> int | None:
    """Per-layer arrays (head counts, ff lengths) collapse to their first value."""
    if isinstance(v, list):
        v = next((x for x in v if _as_int(x)), v[0] if v else None)
    return _as_int(v)


def _open_error(path: Path) -> UsageError:
    try:
        path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return UsageError(f"{path} is a symbolic link loop", hint="point the link at the real .gguf file")
    if path.is_dir():
        if any(path.glob("*.safetensors")):
            from .convert import conversion_hint

            return UsageError(
                f"{path} is a Hugging Face checkpoint (safetensors), not a GGUF file",
                hint=conversion_hint(path),
            )
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        hint = (f"pass one of the .gguf files in it: {', '.join(ggufs[:3])}"
                if ggufs else "pass the path of a .gguf file")
        return UsageError(f"{path} is a directory, not a GGUF file", hint=hint)
    if path.exists():
        return UsageError(f"not a regular file: {path}", hint="pass the path of a .gguf file")
    return UsageError(f"no such file: {path}", hint="check the path, or download the model first")


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
    info = GGUFInfo(
        path=path,
        file_size=size,
        arch=arch,
        name=_str_or_none(kv.get("general.name")),
        basename=_str_or_none(kv.get("general.basename")),
        size_label=_str_or_none(kv.get("general.size_label")),
        finetune=_str_or_none(kv.get("general.finetune")),
        n_params=sum(t.n_elements for t in tensors),
        n_layer=_as_int(akey("block_count")),
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
        kv=kv,
        tensors=tensors,
    )
    return info

"""The low-level GGUF reader: header, key/value pairs and tensor infos, walked over an mmap.

Why a parser of our own: ``gguf.GGUFReader`` decodes every field eagerly, and a
real vocabulary (151,936 tokens plus as many BPE merges) takes it seconds. The
format is simple -- magic, version, counts, key/value pairs, tensor infos -- so
we walk it, keep scalars and small arrays, remember only where the big arrays
live (:class:`ArrayRef`), and decode the token texts on demand (they are needed
only to compare two vocabularies). ``gguf`` is still used for its enums and type
sizes.

Why the integrity checks live here: a truncated or corrupt file must fail while
it is read, with a message that names what is wrong, and never later in the
budget (which sizes every tensor) or in llama.cpp's loader. Interpreting the
metadata is :mod:`specdec_cli.models.meta`'s job.
"""

from __future__ import annotations

import errno
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .gguf_import import gguf

__all__ = ["ArrayRef", "TensorInfo", "MAX_LAYERS", "as_int"]

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


# --- the parser ----------------------------------------------------------------------


def as_int(v) -> int | None:
    """A metadata value as an int; None for anything else (bools, strings, arrays)."""
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


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
        # no bounds test per string (the 1.5B target's header: 45 ms, not 52): unpack_from refuses
        # to read past the end
        try:
            for _ in range(n):
                off += 8 + unpack(buf, off)[0]
        except struct.error:
            raise _Truncated(f"the header needs more than {off + 8} bytes, the file has {size}") from None
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


# --- integrity checks: what llama.cpp's loader would refuse, refused here with a reason ---


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
        if t.n_bytes is not None and t.offset + t.n_bytes > size and \
                (worst is None or t.offset + t.n_bytes > worst.offset + worst.n_bytes):
            worst = t
    if worst is not None:
        raise _Truncated(
            f"tensor data ends at byte {worst.offset + worst.n_bytes} "
            f"({worst.name}), the file has {size}"
        )


# --- big string arrays, read on demand ---------------------------------------------


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


# --- why a path cannot be read at all ------------------------------------------------


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

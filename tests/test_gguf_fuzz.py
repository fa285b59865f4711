"""The GGUF metadata reader against damaged files: every field the budget and the loader rely
on is checked when the metadata is read, so a bad file is one clean error naming what is wrong.

The fuzz cases flip, zero and saturate bytes of a real header and cut it at random lengths,
with a fixed seed: each must end in a ``SpecdecError`` or a result that the views and the
budget can use, never another exception.
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import numpy as np
import pytest

from specdec_cli.errors import SpecdecError, UsageError
from specdec_cli.memory.budget import plan
from specdec_cli.models.meta import read_gguf
from tiny_models import write_meta_gguf

REAL_DRAFT = Path(os.environ.get("SPECDEC_CACHE_DIR", Path.home() / ".cache" / "specdec" / "models")) / \
    "qwen2.5-coder-0.5b-instruct-awq.gguf"


def _header_file(tmp_path: Path) -> Path:
    """A small GGUF with a 300-token vocabulary (read lazily, as big ones are), metadata of
    several kinds and a few tensors."""
    return write_meta_gguf(
        tmp_path / "base.gguf",
        meta={"llama.block_count": 2, "llama.embedding_length": 16, "llama.context_length": 2048,
              "llama.attention.head_count": 2, "llama.attention.head_count_kv": 1,
              "llama.feed_forward_length": 32, "general.name": "fuzz target", "general.size_label": "1B",
              "tokenizer.chat_template": "{{ messages }}", "llama.rope.freq_base": 10000.0},
        tensors={"token_embd.weight": np.zeros((300, 16), np.float32),
                 "blk.0.attn_q.weight": np.zeros((16, 16), np.float32),
                 "output_norm.weight": np.ones(16, np.float32)},
    )


def _exercise(path: Path) -> None:
    """What commands do with a file that reads: show it, budget it, list its tokens."""
    try:
        info = read_gguf(path)
        info.to_dict()
        plan(info, None, n_ctx=512)
        info.tokens()
    except SpecdecError:
        pass


def _mutants(data: bytes, rng: random.Random, n: int, header_end: int):
    for _ in range(n):
        buf = bytearray(data)
        kind = rng.random()
        if kind < 0.25:
            yield "truncate", bytes(buf[: rng.randrange(len(buf))])
            continue
        for _ in range(rng.choice((1, 1, 2, 4))):
            i = rng.randrange(header_end)
            if kind < 0.55:
                buf[i] ^= 1 << rng.randrange(8)
            elif kind < 0.8:
                buf[i] = rng.choice((0x00, 0xFF))
            else:
                buf[i] = rng.randrange(256)
        yield "mutate", bytes(buf)


def _header_end(path: Path) -> int:
    info = read_gguf(path)
    return min(t.offset for t in info.tensors) if info.tensors else info.file_size


def _fuzz(base: Path, tmp_path: Path, n: int, seed: int, header_end: int | None = None) -> int:
    data = base.read_bytes()
    header_end = header_end or _header_end(base)
    rng = random.Random(seed)
    target = tmp_path / "case.gguf"
    readable = 0
    for i, (kind, blob) in enumerate(_mutants(data, rng, n, header_end)):
        target.write_bytes(blob)
        try:
            _exercise(target)
        except Exception as exc:  # noqa: BLE001 - the point of the test
            raise AssertionError(f"case {i} ({kind}, seed {seed}): {type(exc).__name__}: {exc}") from exc
        readable += 1
    return readable


def test_fuzzed_headers_end_in_a_clean_error_or_a_usable_result(tmp_path):
    assert _fuzz(_header_file(tmp_path), tmp_path, 3000, seed=1) == 3000


@pytest.mark.skipif(not REAL_DRAFT.exists(), reason="the pinned real models are not fetched")
def test_fuzzed_real_header(tmp_path):
    """The header of a real GGUF (a 151k-token vocabulary and its merges) and a little of its
    tensor data: every case is at least a truncated file, parsed up to the tensor check."""
    end = _header_end(REAL_DRAFT)
    head = tmp_path / "real-head.gguf"
    with open(REAL_DRAFT, "rb") as f:
        head.write_bytes(f.read(end + 4096))
    _fuzz(head, tmp_path, 150, seed=7, header_end=end)


# --- the classes the fuzzer stands for, one by one -------------------------------------------


def _patch_tensor_type(path: Path, name: bytes, new_type: int) -> None:
    data = bytearray(path.read_bytes())
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    (n_dims,) = struct.unpack_from("<I", data, at)
    struct.pack_into("<I", data, at + 4 + 8 * n_dims, new_type)
    path.write_bytes(bytes(data))


def test_an_unknown_tensor_type_is_named_when_the_metadata_is_read(tmp_path):
    path = _header_file(tmp_path)
    _patch_tensor_type(path, b"blk.0.attn_q.weight", 200)
    with pytest.raises(UsageError) as exc:
        read_gguf(path)
    assert "'blk.0.attn_q.weight' has unknown type 200" in exc.value.one_line()


@pytest.mark.parametrize("command", [["budget", "-t"], ["inspect"], ["check", "-d", "DRAFT", "-t"]])
def test_commands_report_an_unknown_tensor_type_in_one_line(tmp_path, capsys, command):
    from specdec_cli.cli import main

    path = _header_file(tmp_path)
    _patch_tensor_type(path, b"blk.0.attn_q.weight", 200)
    args = [str(path) if a == "DRAFT" else a for a in command] + [str(path)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("error:") == 1 and "blk.0.attn_q.weight" in err


@pytest.mark.parametrize("key, values, fragment", [
    ("tokenizer.ggml.tokens", list(range(300)), "'tokenizer.ggml.tokens' holds"),
    ("tokenizer.ggml.tokens", [1, 2, 3], "'tokenizer.ggml.tokens' holds"),
    ("tokenizer.ggml.scores", ["a", "b", "c"], "'tokenizer.ggml.scores' holds"),
])
def test_a_vocabulary_array_of_the_wrong_type_is_named_not_called_truncated(tmp_path, key, values, fragment):
    path = write_meta_gguf(tmp_path / "v.gguf", meta={key: values})
    with pytest.raises(UsageError) as exc:
        read_gguf(path)
    msg = exc.value.one_line()
    assert fragment in msg and "truncated" not in msg


def test_a_symlink_loop_is_called_one(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(UsageError) as exc:
        read_gguf(a)
    assert "symbolic link loop" in exc.value.one_line()

"""Tiny synthetic llama-architecture GGUFs, written on the fly for the test suite.

Why: the real models are hundreds of MB and slow; these are a few MB, load in
milliseconds on a CPU, and still exercise everything specdec relies on -- a
real SentencePiece-style vocabulary (so llama.cpp tokenizes English), a chatml
chat template, and random f32 weights whose output projection is scaled up so
the logits have clear margins (greedy decoding is reproducible and batched vs
single-token evaluation agree).

``write_llama_gguf`` writes one model; the session-scoped fixtures at the bottom
build the standard cast: a target, a smaller draft with the same vocabulary, a
draft-sized model with a different vocabulary, a draft larger than the target,
and a directory holding target + draft side by side.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

__all__ = [
    "CHATML_TEMPLATE",
    "write_llama_gguf",
    "write_meta_gguf",
    "vocab_tokens",
    "tiny_target",
    "tiny_draft",
    "tiny_tool_target",
    "tiny_tool_draft",
    "tiny_other_vocab",
    "tiny_big_draft",
    "tiny_pair_dir",
    "write_eagle3_gguf",
    "write_dflash_gguf",
    "HEAD_PROMPTS",
    "head_llama_target",
    "head_qwen3_target",
    "tiny_eagle3",
    "tiny_dflash",
    "tiny_dspark",
    "tiny_dspark_bonus",
    "tiny_dspark_no_confidence",
]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Ids 0..4 are special (llama.cpp's vocab comparison starts at id 5).
_SPECIALS = [
    ("<unk>", gguf.TokenType.UNKNOWN),
    ("<s>", gguf.TokenType.CONTROL),
    ("</s>", gguf.TokenType.CONTROL),
    ("<|im_start|>", gguf.TokenType.CONTROL),
    ("<|im_end|>", gguf.TokenType.CONTROL),
]
_WORDS = [
    "the", "and", "of", "to", "in", "is", "it", "that", "for", "on",
    "with", "as", "was", "hello", "world", "this", "are", "be", "at", "or",
    "you", "not", "have", "from", "by", "one", "all", "we", "can", "her",
]


def _normal_pieces() -> list[str]:
    """Word pieces SentencePiece-style: '▁', letters, and '▁'-prefixed words with all
    their prefixes (the SPM tokenizer only merges into pieces that exist)."""
    pieces: list[str] = ["▁"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + list(".,!?'")
    seen = set(pieces)
    for word in _WORDS:
        for end in range(1, len(word) + 1):
            piece = "▁" + word[:end]
            if piece not in seen:
                seen.add(piece)
                pieces.append(piece)
    return pieces


def vocab_tokens(vocab: str = "base") -> tuple[list[str], list[float], list[int]]:
    """(texts, scores, types) of the synthetic vocabulary.

    ``vocab="other"`` has the same type and size but the normal pieces in reverse
    order, so token texts differ from the first normal piece (id 261) on.
    """
    if vocab not in ("base", "other"):
        raise ValueError(f"vocab must be 'base' or 'other', not {vocab!r}")
    texts = [t for t, _ in _SPECIALS]
    types = [int(k) for _, k in _SPECIALS]
    scores = [0.0] * len(_SPECIALS)
    for b in range(256):
        texts.append(f"<0x{b:02X}>")
        types.append(int(gguf.TokenType.BYTE))
        scores.append(0.0)
    pieces = _normal_pieces()
    # Longer pieces score higher so merges prefer whole words.
    piece_scores = {p: len(p) - i * 1e-3 for i, p in enumerate(pieces)}
    if vocab == "other":
        pieces = pieces[::-1]
    texts += pieces
    types += [int(gguf.TokenType.NORMAL)] * len(pieces)
    scores += [piece_scores[p] for p in pieces]
    return texts, scores, types


FOCUS_FIRST = 261  # the first normal (word-piece) token of the fixture vocabulary
FOCUS_GAIN = 4.0


def _llama_tensors(rng, *, n_vocab, n_layer, n_embd, n_head, n_head_kv, n_ff, output_scale, qk_norm=False,
                   focus=0):
    """Random f32 weights under llama.cpp's tensor names (numpy shape = ggml ne reversed).
    ``qk_norm`` adds the per-head query/key norms of the qwen3 architecture. ``focus`` scales
    up the output rows of that many word pieces, so the model mostly picks among them: a
    random draft head that shares this output projection then guesses right often enough
    for acceptance counts to mean something."""
    head_dim = n_embd // n_head

    def mat(rows: int, cols: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(scale))

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    yield "token_embd.weight", mat(n_vocab, n_embd)
    for i in range(n_layer):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", ones(n_embd)
        yield p + "attn_q.weight", mat(n_head * head_dim, n_embd)
        yield p + "attn_k.weight", mat(n_head_kv * head_dim, n_embd)
        yield p + "attn_v.weight", mat(n_head_kv * head_dim, n_embd)
        yield p + "attn_output.weight", mat(n_embd, n_head * head_dim)
        if qk_norm:
            yield p + "attn_q_norm.weight", ones(head_dim)
            yield p + "attn_k_norm.weight", ones(head_dim)
        yield p + "ffn_norm.weight", ones(n_embd)
        yield p + "ffn_gate.weight", mat(n_ff, n_embd)
        yield p + "ffn_up.weight", mat(n_ff, n_embd)
        yield p + "ffn_down.weight", mat(n_embd, n_ff)
    yield "output_norm.weight", ones(n_embd)
    out = mat(n_vocab, n_embd, 0.02 * output_scale)
    if focus:
        out[FOCUS_FIRST:FOCUS_FIRST + focus] *= np.float32(FOCUS_GAIN)
    yield "output.weight", out


def write_llama_gguf(
    path: str | Path,
    *,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    n_ctx_train: int = 2048,
    vocab: str = "base",
    seed: int = 0,
    output_scale: float = 8.0,
    name: str = "tiny",
    basename: str = "Tiny-Llama",
    size_label: str | None = None,
    arch: str = "llama",
    focus: int = 0,
    chat_template: str = CHATML_TEMPLATE,
) -> Path:
    """Write a llama- (or qwen3-) architecture GGUF with random f32 weights and a small SPM vocab.

    ``size_label`` defaults to the honest rounded parameter count (e.g. "672K").
    Returns the path written.
    """
    if arch not in ("llama", "qwen3"):
        raise ValueError(f"arch must be llama or qwen3, not {arch!r}")
    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must be a multiple of n_head, and n_head of n_head_kv")
    path = Path(path)
    texts, scores, types = vocab_tokens(vocab)
    rng = np.random.default_rng(seed)
    tensors = list(_llama_tensors(
        rng, n_vocab=len(texts), n_layer=n_layer, n_embd=n_embd, n_head=n_head,
        n_head_kv=n_head_kv, n_ff=n_ff, output_scale=output_scale, qk_norm=arch == "qwen3",
        focus=focus,
    ))
    n_params = sum(int(a.size) for _, a in tensors)

    w = gguf.GGUFWriter(path, arch)
    try:
        w.add_name(name)
        w.add_basename(basename)
        w.add_size_label(size_label or gguf.size_label(n_params, 0, 0, 0))
        w.add_file_type(gguf.LlamaFileType.ALL_F32)
        _add_shape(w, n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer, n_ff=n_ff,
                   n_head=n_head, n_head_kv=n_head_kv)
        _add_vocab(w, texts, scores, types)
        w.add_chat_template(chat_template)

        for tname, arr in tensors:
            w.add_tensor(tname, arr)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
    finally:
        w.close()
    return path


def _add_shape(w, *, n_ctx_train, n_embd, n_layer, n_ff, n_head, n_head_kv) -> None:
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)


def _add_vocab(w, texts, scores, types, *, mask_token: int | None = None) -> None:
    w.add_vocab_size(len(texts))
    w.add_tokenizer_model("llama")
    w.add_token_list(texts)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    if mask_token is not None:
        w.add_uint32("tokenizer.ggml.mask_token_id", mask_token)


def _write(path: Path, arch: str, tensors, fill) -> Path:
    """Write a GGUF: ``fill(writer)`` adds the metadata, then the tensors follow."""
    w = gguf.GGUFWriter(path, arch)
    try:
        fill(w)
        for tname, arr in tensors:
            w.add_tensor(tname, arr)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
    finally:
        w.close()
    return path


# --- speculative draft heads --------------------------------------------------------------
#
# Laid out exactly as llama.cpp 0.3.36 loads them (src/models/eagle3.cpp and dflash.cpp,
# load_arch_hparams / load_arch_tensors): every tensor the loader creates, no other. Neither
# head carries token embeddings or an output projection of its own here: they borrow the
# target's through ``ctx_other``, as the converted Qwen3 heads do, so their width must be the
# target's.

HEAD_MASK_TOKEN = 0  # DFlash fills its draft block with this token id (<unk> in the fixture vocab)
HEAD_PROMPTS = [  # prompts in the fixture vocabulary, for the head tests and the conformance script
    "hello world this is the",
    "the cat and the dog",
    "we can see that one of",
    "it was not all at the",
    "you are the one for her",
    "on this world we have",
    "this is it",
    "at the world of one and all",
]


def _weights(seed: int):
    """(mat(rows, cols, scale), ones(n)): random f32 matrices (numpy shape = ggml ne reversed)."""
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int, scale: float = 0.02) -> np.ndarray:
        return rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(scale)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    return mat, ones


def write_eagle3_gguf(
    path: str | Path,
    *,
    target_layers: tuple[int, ...] = (0, 2, 3),
    n_embd: int = 128,
    n_embd_target: int | None = None,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 256,
    seed: int = 10,
    basename: str = "Tiny-Llama",
    name: str = "tiny-eagle3",
) -> Path:
    """An EAGLE-3 head: fc fuses 3 target layers, one decoder layer over [embedding; g]."""
    path = Path(path)
    n_embd_target = n_embd_target or n_embd
    mat, ones = _weights(seed)
    head_dim = n_embd // n_head
    # fc mostly copies the last extracted target layer, so the head's state starts near the
    # target's own (a trained head learns far more; this one only gets repetition right)
    fc = mat(n_embd, len(target_layers) * n_embd_target)
    if n_embd == n_embd_target:
        fc[:, (len(target_layers) - 1) * n_embd_target:] += np.eye(n_embd, dtype=np.float32)
    tensors = [
        ("fc.weight", fc),
        ("output_norm.weight", ones(n_embd)),
        ("blk.0.attn_norm.weight", ones(n_embd)),
        ("blk.0.attn_norm_2.weight", ones(n_embd)),
        ("blk.0.attn_q.weight", mat(n_head * head_dim, 2 * n_embd)),
        ("blk.0.attn_k.weight", mat(n_head_kv * head_dim, 2 * n_embd)),
        ("blk.0.attn_v.weight", mat(n_head_kv * head_dim, 2 * n_embd)),
        ("blk.0.attn_output.weight", mat(n_embd, n_head * head_dim)),
        ("blk.0.ffn_norm.weight", ones(n_embd)),
        ("blk.0.ffn_gate.weight", mat(n_ff, n_embd)),
        ("blk.0.ffn_up.weight", mat(n_ff, n_embd)),
        ("blk.0.ffn_down.weight", mat(n_embd, n_ff)),
    ]
    texts, scores, types = vocab_tokens("base")

    def fill(w):
        w.add_name(name)
        w.add_basename(basename)
        w.add_file_type(gguf.LlamaFileType.ALL_F32)
        _add_shape(w, n_ctx_train=2048, n_embd=n_embd, n_layer=1, n_ff=n_ff, n_head=n_head, n_head_kv=n_head_kv)
        w.add_array("eagle3.target_layers", [int(i) for i in target_layers])
        w.add_uint32("eagle3.target_hidden_size", n_embd_target)
        _add_vocab(w, texts, scores, types)

    return _write(path, "eagle3", tensors, fill)


def write_dflash_gguf(
    path: str | Path,
    *,
    target_layers: tuple[int, ...] = (0, 1, 3),
    n_embd: int = 128,
    n_layer: int = 1,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 256,
    block_size: int = 7,
    markov_rank: int | None = None,
    confidence_head: bool = True,
    sample_from_anchor: bool | None = None,
    seed: int = 20,
    basename: str = "Tiny-Qwen3",
    name: str = "tiny-dflash",
) -> Path:
    """A DFlash head (block diffusion over [last token, mask, ...]); ``markov_rank`` adds
    DSpark's Markov head (and, with ``confidence_head``, its confidence head)."""
    path = Path(path)
    mat, ones = _weights(seed)
    head_dim = n_embd // n_head
    texts, scores, types = vocab_tokens("base")
    n_vocab = len(texts)
    tensors = [
        ("fc.weight", mat(n_embd, len(target_layers) * n_embd, 0.05)),
        ("enc.output_norm.weight", ones(n_embd)),
        ("output_norm.weight", ones(n_embd)),
    ]
    if markov_rank:
        tensors += [
            ("markov_w1.weight", mat(n_vocab, markov_rank, 0.05)),
            ("markov_w2.weight", mat(n_vocab, markov_rank, 0.05)),
        ]
        if confidence_head:
            tensors += [
                ("conf_proj.weight", mat(1, n_embd + markov_rank, 0.5)),
                ("conf_proj.bias", np.full(1, 1.0, dtype=np.float32)),
            ]
    for i in range(n_layer):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", ones(n_embd)),
            (p + "attn_q.weight", mat(n_head * head_dim, n_embd)),
            (p + "attn_k.weight", mat(n_head_kv * head_dim, n_embd)),
            (p + "attn_v.weight", mat(n_head_kv * head_dim, n_embd)),
            (p + "attn_output.weight", mat(n_embd, n_head * head_dim)),
            (p + "attn_q_norm.weight", ones(head_dim)),
            (p + "attn_k_norm.weight", ones(head_dim)),
            (p + "ffn_norm.weight", ones(n_embd)),
            (p + "ffn_gate.weight", mat(n_ff, n_embd)),
            (p + "ffn_up.weight", mat(n_ff, n_embd)),
            (p + "ffn_down.weight", mat(n_embd, n_ff)),
        ]

    def fill(w):
        w.add_name(name)
        w.add_basename(basename)
        w.add_file_type(gguf.LlamaFileType.ALL_F32)
        _add_shape(w, n_ctx_train=2048, n_embd=n_embd, n_layer=n_layer, n_ff=n_ff, n_head=n_head,
                   n_head_kv=n_head_kv)
        w.add_uint32("dflash.block_size", block_size)
        w.add_array("dflash.target_layers", [int(i) for i in target_layers])
        if markov_rank:
            w.add_bool("dflash.has_confidence_head", confidence_head)
        if sample_from_anchor is not None:
            w.add_bool("dflash.sample_from_anchor", sample_from_anchor)
        _add_vocab(w, texts, scores, types, mask_token=HEAD_MASK_TOKEN)

    return _write(path, "dflash", tensors, fill)


def write_meta_gguf(
    path: str | Path,
    *,
    arch: str = "llama",
    meta: dict[str, Any] | None = None,
    vocab: str | list[str] | None = "base",
    tensors: dict[str, np.ndarray] | None = None,
) -> Path:
    """A GGUF that is mostly metadata, for reader and pairing tests (not for llama.cpp).

    ``vocab``: "base"/"other" writes the synthetic SPM vocabulary (bos 1, eos 2,
    add_bos true), a list writes those token texts, None writes no tokenizer.
    ``meta`` holds full key names and overrides anything else (bool, int -> uint32
    or int32, float -> float32, str, list -> array; None drops the key).
    ``tensors`` defaults to one small f32 tensor.
    """
    path = Path(path)
    kv: dict[str, Any] = {}
    if vocab is not None:
        if isinstance(vocab, str):
            texts, scores, types = vocab_tokens(vocab)
        else:
            texts, scores, types = list(vocab), [0.0] * len(vocab), [1] * len(vocab)
        kv.update({
            "tokenizer.ggml.model": "llama",
            "tokenizer.ggml.tokens": texts,
            "tokenizer.ggml.scores": scores,
            "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.bos_token_id": 1,
            "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.add_bos_token": True,
            "tokenizer.ggml.add_eos_token": False,
        })
    kv.update(meta or {})
    if tensors is None:
        tensors = {"output_norm.weight": np.ones(8, dtype=np.float32)}

    w = gguf.GGUFWriter(path, arch)
    try:
        for key, val in kv.items():
            if key == "general.architecture":
                continue
            if val is None:
                continue
            if isinstance(val, bool):
                w.add_bool(key, val)
            elif isinstance(val, int):
                (w.add_uint32 if val >= 0 else w.add_int32)(key, val)
            elif isinstance(val, float):
                w.add_float32(key, val)
            elif isinstance(val, str):
                w.add_string(key, val)
            else:
                w.add_array(key, list(val))
        for tname, arr in tensors.items():
            w.add_tensor(tname, arr)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
    finally:
        w.close()
    return path


# --- session fixtures ---------------------------------------------------------------

TARGET_SHAPE = dict(n_layer=4, n_embd=128, n_head=4, n_head_kv=2, n_ff=256)
DRAFT_SHAPE = dict(n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128)
BIG_DRAFT_SHAPE = dict(n_layer=6, n_embd=192, n_head=4, n_head_kv=2, n_ff=384)


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory) -> Path:
    """The target: 4 layers x 128 wide, base vocab."""
    d = tmp_path_factory.mktemp("tiny_target")
    return write_llama_gguf(d / "tiny-target-f32.gguf", **TARGET_SHAPE, seed=1, name="tiny-target")


TEMPLATES = Path(__file__).parent / "chat_templates"


@pytest.fixture(scope="session")
def tiny_tool_target(tmp_path_factory) -> Path:
    """The tiny target with Qwen2.5's chat template: tools rendered, calls in ``<tool_call>`` tags."""
    path = tmp_path_factory.mktemp("tools") / "tiny-tool-target-f32.gguf"
    return write_llama_gguf(path, **TARGET_SHAPE, seed=1, name="tiny-target",
                            chat_template=(TEMPLATES / "qwen2.5.jinja").read_text())


@pytest.fixture(scope="session")
def tiny_tool_draft(tmp_path_factory) -> Path:
    """The tiny draft, with the same template as ``tiny_tool_target``."""
    path = tmp_path_factory.mktemp("tools") / "tiny-tool-draft-f32.gguf"
    return write_llama_gguf(path, **DRAFT_SHAPE, seed=2, name="tiny-draft",
                            chat_template=(TEMPLATES / "qwen2.5.jinja").read_text())


@pytest.fixture(scope="session")
def tiny_draft(tmp_path_factory) -> Path:
    """A draft for tiny_target: 2 layers x 64 wide, same vocab and basename."""
    d = tmp_path_factory.mktemp("tiny_draft")
    return write_llama_gguf(d / "tiny-draft-f32.gguf", **DRAFT_SHAPE, seed=2, name="tiny-draft")


@pytest.fixture(scope="session")
def tiny_other_vocab(tmp_path_factory) -> Path:
    """Draft-sized, but a different vocabulary (same type and size, other texts from id 261)."""
    d = tmp_path_factory.mktemp("tiny_other_vocab")
    return write_llama_gguf(d / "tiny-other-vocab-f32.gguf", **DRAFT_SHAPE, seed=3, vocab="other",
                            name="tiny-other-vocab")


@pytest.fixture(scope="session")
def tiny_big_draft(tmp_path_factory) -> Path:
    """Same vocab, but larger than tiny_target: a 'draft' that should be the target."""
    d = tmp_path_factory.mktemp("tiny_big_draft")
    return write_llama_gguf(d / "tiny-big-f32.gguf", **BIG_DRAFT_SHAPE, seed=4, name="tiny-big")


@pytest.fixture(scope="session")
def tiny_pair_dir(tmp_path_factory, tiny_target, tiny_draft) -> Path:
    """A directory holding copies of tiny_target and tiny_draft side by side."""
    d = tmp_path_factory.mktemp("tiny_pair")
    shutil.copy2(tiny_target, d / tiny_target.name)
    shutil.copy2(tiny_draft, d / tiny_draft.name)
    return d


# --- draft heads and their targets ---------------------------------------------------------
# The targets favour four word pieces (``focus``), so heads that borrow their output
# projection guess right now and then: acceptance is neither 0 nor 100%.


@pytest.fixture(scope="session")
def head_llama_target(tmp_path_factory) -> Path:
    """A llama target for the EAGLE-3 head (same shape as tiny_target)."""
    d = tmp_path_factory.mktemp("head_llama")
    return write_llama_gguf(d / "tiny-llama-target-f32.gguf", **TARGET_SHAPE, seed=1, focus=4, name="tiny-target")


@pytest.fixture(scope="session")
def head_qwen3_target(tmp_path_factory) -> Path:
    """A qwen3 target (per-head q/k norms) for the DFlash and DSpark heads."""
    d = tmp_path_factory.mktemp("head_qwen3")
    return write_llama_gguf(d / "tiny-qwen3-target-f32.gguf", **TARGET_SHAPE, seed=5, focus=4, arch="qwen3",
                            name="tiny-qwen3", basename="Tiny-Qwen3")


@pytest.fixture(scope="session")
def tiny_eagle3(tmp_path_factory) -> Path:
    return write_eagle3_gguf(tmp_path_factory.mktemp("eagle3") / "tiny-eagle3.gguf")


@pytest.fixture(scope="session")
def tiny_dflash(tmp_path_factory) -> Path:
    return write_dflash_gguf(tmp_path_factory.mktemp("dflash") / "tiny-dflash.gguf")


@pytest.fixture(scope="session")
def tiny_dspark(tmp_path_factory) -> Path:
    """DFlash + Markov head + confidence head, drafting from the anchor slot (block_size drafts)."""
    return write_dflash_gguf(tmp_path_factory.mktemp("dspark") / "tiny-dspark.gguf", markov_rank=16, name="tiny-dspark")


@pytest.fixture(scope="session")
def tiny_dspark_bonus(tmp_path_factory) -> Path:
    """DSpark whose anchor slot is a bonus token (sample_from_anchor = false): block_size - 1 drafts."""
    return write_dflash_gguf(tmp_path_factory.mktemp("dspark_bonus") / "tiny-dspark-bonus.gguf", markov_rank=16,
                             sample_from_anchor=False, name="tiny-dspark-bonus")


@pytest.fixture(scope="session")
def tiny_dspark_no_confidence(tmp_path_factory) -> Path:
    return write_dflash_gguf(tmp_path_factory.mktemp("dspark_noconf") / "tiny-dspark-noconf.gguf", markov_rank=16,
                             confidence_head=False, name="tiny-dspark-noconf")

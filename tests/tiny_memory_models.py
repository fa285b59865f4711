"""Tiny GGUFs whose memory is not a plain KV cache: recurrent, hybrid, sliding-window, with MTP.

Why: speculative decoding must roll a rejected draft back, and these models keep state that a
plain ``seq_rm`` cannot always drop. Each writer lays its model out in exactly the tensor set
llama.cpp 0.3.36's loader creates for the architecture (``src/models/mamba2.cpp``,
``qwen35.cpp``, ``gemma3.cpp``: ``load_arch_hparams`` / ``load_arch_tensors``), with random
f32 weights and the test suite's small SPM vocabulary, so they load in milliseconds:

- ``write_mamba2_gguf``: pure recurrent (Mamba 2). llama.cpp offers no bounded rollback for it,
  so speculation checkpoints and restores its state.
- ``write_qwen35_gguf``: hybrid (Qwen3.5: gated delta-net layers with a full-attention layer
  every ``full_attention_interval``), optionally with trailing ``nextn`` (MTP) blocks, counted in
  ``block_count`` and named by ``nextn_predict_layers`` as the converted Qwen3.5 GGUFs are.
  llama.cpp offers bounded recurrent-state rollback (``n_rs_seq``) for this architecture.
- ``write_gemma3_gguf``: sliding-window attention (Gemma 3, a window of ``sliding_window``
  tokens on five layers of six).
- ``write_step35_gguf``: Step 3.5 (dense here) with several MTP blocks, which llama.cpp drafts
  with as chained heads, one per draft step.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from tiny_models import CHATML_TEMPLATE, FOCUS_FIRST, FOCUS_GAIN, _add_vocab, _write, vocab_tokens

__all__ = [
    "write_mamba2_gguf",
    "write_qwen35_gguf",
    "write_gemma3_gguf",
    "write_step35_gguf",
    "MEMORY_PROMPTS",
    "MAMBA2_EMBD",
    "QWEN35_EMBD",
    "GEMMA3_EMBD",
    "tiny_mamba2",
    "tiny_mamba2_draft",
    "tiny_qwen35",
    "tiny_qwen35_mtp",
    "tiny_qwen35_draft",
    "tiny_gemma3",
    "tiny_gemma3_draft",
    "tiny_step35_mtp",
]

# Prompts that repeat themselves, so n-gram lookup has something to copy and acceptance is
# neither 0 nor 100%.
MEMORY_PROMPTS = [
    "hello world this is the",
    "the cat and the dog and the cat and the",
    "we can see that one of",
    "it was not all at the",
    "you are the one for her and you are the one",
    "on this world we have",
    "this is it this is it this is",
    "at the world of one and all",
]


class _Weights:
    """Random f32 tensors (numpy shape = ggml ne reversed).

    The token embedding and the output projection come from ``shared_seed``, the layers from
    ``seed``: models of one width that share ``shared_seed`` share those two matrices, and
    with a large ``embd_scale`` the embedding outweighs what the layers add, so such models
    mostly agree on the next token (a draft then has a real, partial acceptance)."""

    def __init__(self, seed: int, shared_seed: int = 7, embd_scale: float = 0.02):
        self.rng = np.random.default_rng(seed)
        self.shared = np.random.default_rng(shared_seed)
        self.embd_scale = embd_scale

    def embedding(self, n_vocab: int, n_embd: int) -> np.ndarray:
        return self.shared.standard_normal((n_vocab, n_embd), dtype=np.float32) * np.float32(self.embd_scale)

    def mat(self, rows: int, cols: int, scale: float = 0.02) -> np.ndarray:
        return self.rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(scale)

    def vec(self, n: int, scale: float = 0.02) -> np.ndarray:
        return self.rng.standard_normal(n, dtype=np.float32) * np.float32(scale)

    @staticmethod
    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    def output(self, n_vocab: int, n_embd: int, scale: float, focus: int) -> np.ndarray:
        """The output projection, scaled so greedy margins are clear; ``focus`` word pieces favoured."""
        out = self.shared.standard_normal((n_vocab, n_embd), dtype=np.float32) * np.float32(0.02 * scale)
        if focus:
            out[FOCUS_FIRST:FOCUS_FIRST + focus] *= np.float32(FOCUS_GAIN)
        return out


def _common(w, *, name: str, basename: str, n_ctx_train: int, n_embd: int, n_layer: int) -> None:
    w.add_name(name)
    w.add_basename(basename)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_layer_norm_rms_eps(1e-5)
    texts, scores, types = vocab_tokens("base")
    _add_vocab(w, texts, scores, types)
    w.add_chat_template(CHATML_TEMPLATE)


def _ffn(W: _Weights, p: str, n_embd: int, n_ff: int):
    yield p + "ffn_gate.weight", W.mat(n_ff, n_embd)
    yield p + "ffn_up.weight", W.mat(n_ff, n_embd)
    yield p + "ffn_down.weight", W.mat(n_embd, n_ff)


def write_mamba2_gguf(
    path: str | Path,
    *,
    n_layer: int = 2,
    n_embd: int = 64,
    d_state: int = 16,
    head_dim: int = 16,
    n_group: int = 1,
    d_conv: int = 4,
    seed: int = 30,
    shared_seed: int = 7,
    embd_scale: float = 0.02,
    output_scale: float = 8.0,
    focus: int = 0,
    name: str = "tiny-mamba2",
    basename: str = "Tiny-Mamba2",
) -> Path:
    """A Mamba 2 model (d_inner = 2 n_embd, one SSM head per ``head_dim`` channels)."""
    path = Path(path)
    d_inner = 2 * n_embd
    n_head = d_inner // head_dim  # ssm.time_step_rank
    conv_dim = d_inner + 2 * n_group * d_state
    n_vocab = len(vocab_tokens("base")[0])
    W = _Weights(seed, shared_seed, embd_scale)

    def tensors():
        yield "token_embd.weight", W.embedding(n_vocab, n_embd)
        for i in range(n_layer):
            p = f"blk.{i}."
            yield p + "attn_norm.weight", W.ones(n_embd)
            yield p + "ssm_in.weight", W.mat(d_inner + conv_dim + n_head, n_embd, 0.1)
            yield p + "ssm_conv1d.weight", W.mat(conv_dim, d_conv, 0.3)
            yield p + "ssm_conv1d.bias", W.vec(conv_dim)
            yield p + "ssm_dt.bias", W.vec(n_head, 0.5)
            # A = -exp(A_log): a decay per head, so the state forgets at different rates
            yield p + "ssm_a", -np.linspace(0.5, 4.0, n_head, dtype=np.float32).reshape(n_head, 1)
            yield p + "ssm_d", W.ones(n_head).reshape(n_head, 1)
            yield p + "ssm_norm.weight", W.ones(d_inner).reshape(n_group, d_inner // n_group)
            yield p + "ssm_out.weight", W.mat(n_embd, d_inner, 0.1)
        yield "output_norm.weight", W.ones(n_embd)
        yield "output.weight", W.output(n_vocab, n_embd, output_scale, focus)

    def fill(w):
        _common(w, name=name, basename=basename, n_ctx_train=2048, n_embd=n_embd, n_layer=n_layer)
        w.add_feed_forward_length(0)
        w.add_head_count(0)
        w.add_ssm_conv_kernel(d_conv)
        w.add_ssm_inner_size(d_inner)
        w.add_ssm_state_size(d_state)
        w.add_ssm_time_step_rank(n_head)
        w.add_ssm_group_count(n_group)

    return _write(path, "mamba2", tensors(), fill)


def write_qwen35_gguf(
    path: str | Path,
    *,
    n_layer: int = 4,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int = 16,
    n_ff: int = 128,
    full_attention_interval: int = 2,
    d_state: int = 16,
    n_k_heads: int = 2,
    n_v_heads: int = 4,
    d_conv: int = 4,
    nextn: int = 0,
    mtp_gain: float = 1.0,
    seed: int = 40,
    shared_seed: int = 7,
    embd_scale: float = 0.02,
    output_scale: float = 8.0,
    focus: int = 0,
    name: str = "tiny-qwen35",
    basename: str = "Tiny-Qwen3.5",
) -> Path:
    """A Qwen3.5 model: ``n_layer`` trunk layers (every ``full_attention_interval``-th one full
    attention with a gated query, the others gated delta-net), plus ``nextn`` MTP blocks after
    them. ``mtp_gain`` scales the MTP block's path from the target's hidden state, so a random
    head predicts the target's next token more (or less) often."""
    path = Path(path)
    n_vocab = len(vocab_tokens("base")[0])
    key_dim, value_dim = d_state * n_k_heads, d_state * n_v_heads
    conv_dim = 2 * key_dim + value_dim
    W = _Weights(seed, shared_seed, embd_scale)

    def attention(p: str, scale: float = 0.02):
        yield p + "attn_q.weight", W.mat(2 * n_head * head_dim, n_embd, scale)  # query and its gate
        yield p + "attn_k.weight", W.mat(n_head_kv * head_dim, n_embd, scale)
        yield p + "attn_v.weight", W.mat(n_head_kv * head_dim, n_embd, scale)
        yield p + "attn_output.weight", W.mat(n_embd, n_head * head_dim, scale)
        yield p + "attn_q_norm.weight", W.ones(head_dim)
        yield p + "attn_k_norm.weight", W.ones(head_dim)

    def tensors():
        yield "token_embd.weight", W.embedding(n_vocab, n_embd)
        for i in range(n_layer):
            p = f"blk.{i}."
            yield p + "attn_norm.weight", W.ones(n_embd)
            yield p + "post_attention_norm.weight", W.ones(n_embd)
            if (i + 1) % full_attention_interval == 0:
                yield from attention(p)
            else:
                yield p + "attn_qkv.weight", W.mat(conv_dim, n_embd, 0.1)
                yield p + "attn_gate.weight", W.mat(value_dim, n_embd, 0.1)
                yield p + "ssm_conv1d.weight", W.mat(conv_dim, d_conv, 0.3)
                yield p + "ssm_dt.bias", W.vec(n_v_heads, 0.5)
                yield p + "ssm_a", -np.linspace(0.5, 4.0, n_v_heads, dtype=np.float32)
                yield p + "ssm_beta.weight", W.mat(n_v_heads, n_embd, 0.1)
                yield p + "ssm_alpha.weight", W.mat(n_v_heads, n_embd, 0.1)
                yield p + "ssm_norm.weight", W.ones(d_state)
                yield p + "ssm_out.weight", W.mat(n_embd, value_dim, 0.1)
            yield from _ffn(W, p, n_embd, n_ff)
        for i in range(n_layer, n_layer + nextn):
            p = f"blk.{i}."
            yield p + "attn_norm.weight", W.ones(n_embd)
            yield p + "post_attention_norm.weight", W.ones(n_embd)
            yield from attention(p)
            yield from _ffn(W, p, n_embd, n_ff)
            # eh_proj maps [embedding; hidden] to the block's input: mostly the embedding of the
            # next token, so where the trunk is near a bigram model the head guesses the token
            # after it as the trunk would
            eh = W.mat(n_embd, 2 * n_embd)
            eh[:, :n_embd] += np.float32(mtp_gain) * np.eye(n_embd, dtype=np.float32)
            yield p + "nextn.eh_proj.weight", eh
            yield p + "nextn.enorm.weight", W.ones(n_embd)
            yield p + "nextn.hnorm.weight", W.ones(n_embd)
            yield p + "nextn.shared_head_norm.weight", W.ones(n_embd)
        yield "output_norm.weight", W.ones(n_embd)
        yield "output.weight", W.output(n_vocab, n_embd, output_scale, focus)

    def fill(w):
        _common(w, name=name, basename=basename, n_ctx_train=2048, n_embd=n_embd, n_layer=n_layer + nextn)
        w.add_feed_forward_length(n_ff)
        w.add_head_count(n_head)
        w.add_head_count_kv(n_head_kv)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_rope_dimension_count(head_dim // 2)
        w.add_rope_dimension_sections([2, 2, 0, 0])
        w.add_rope_freq_base(10000.0)
        w.add_ssm_conv_kernel(d_conv)
        w.add_ssm_inner_size(value_dim)
        w.add_ssm_state_size(d_state)
        w.add_ssm_time_step_rank(n_v_heads)
        w.add_ssm_group_count(n_k_heads)
        w.add_uint32("qwen35.full_attention_interval", full_attention_interval)
        if nextn:
            w.add_uint32("qwen35.nextn_predict_layers", nextn)

    return _write(path, "qwen35", tensors(), fill)


def write_gemma3_gguf(
    path: str | Path,
    *,
    n_layer: int = 6,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    sliding_window: int = 8,
    seed: int = 50,
    shared_seed: int = 7,
    embd_scale: float = 0.02,
    output_scale: float = 8.0,
    focus: int = 0,
    name: str = "tiny-gemma3",
    basename: str = "Tiny-Gemma3",
) -> Path:
    """A Gemma 3 model whose first five layers of every six see only the last ``sliding_window`` tokens."""
    path = Path(path)
    n_vocab = len(vocab_tokens("base")[0])
    head_dim = n_embd // n_head
    W = _Weights(seed, shared_seed, embd_scale)

    def tensors():
        yield "token_embd.weight", W.embedding(n_vocab, n_embd)
        for i in range(n_layer):
            p = f"blk.{i}."
            yield p + "attn_norm.weight", W.ones(n_embd)
            yield p + "attn_q.weight", W.mat(n_head * head_dim, n_embd)
            yield p + "attn_k.weight", W.mat(n_head_kv * head_dim, n_embd)
            yield p + "attn_v.weight", W.mat(n_head_kv * head_dim, n_embd)
            yield p + "attn_output.weight", W.mat(n_embd, n_head * head_dim)
            yield p + "post_attention_norm.weight", W.ones(n_embd)
            yield p + "attn_k_norm.weight", W.ones(head_dim)
            yield p + "attn_q_norm.weight", W.ones(head_dim)
            yield p + "ffn_norm.weight", W.ones(n_embd)
            yield from _ffn(W, p, n_embd, n_ff)
            yield p + "post_ffw_norm.weight", W.ones(n_embd)
        yield "output_norm.weight", W.ones(n_embd)
        yield "output.weight", W.output(n_vocab, n_embd, output_scale, focus)

    def fill(w):
        _common(w, name=name, basename=basename, n_ctx_train=2048, n_embd=n_embd, n_layer=n_layer)
        w.add_feed_forward_length(n_ff)
        w.add_head_count(n_head)
        w.add_head_count_kv(n_head_kv)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_rope_freq_base(10000.0)
        w.add_sliding_window(sliding_window)

    return _write(path, "gemma3", tensors(), fill)


# --- session fixtures -----------------------------------------------------------------------
# Each target has a same-vocabulary draft of the same width with fewer layers, sharing its
# embedding and output projection (``_Weights``); the embedding scales are chosen so that on
# MEMORY_PROMPTS some drafts are kept whole, some in part and some not at all (so every
# rollback path runs), and the text is not one token repeated.

MAMBA2_EMBD, QWEN35_EMBD, GEMMA3_EMBD = 5.0, 2.0, 2.0


@pytest.fixture(scope="session")
def tiny_mamba2(tmp_path_factory) -> Path:
    return write_mamba2_gguf(tmp_path_factory.mktemp("mamba2") / "tiny-mamba2-f32.gguf", n_layer=3,
                             embd_scale=MAMBA2_EMBD)


@pytest.fixture(scope="session")
def tiny_mamba2_draft(tmp_path_factory) -> Path:
    return write_mamba2_gguf(tmp_path_factory.mktemp("mamba2_draft") / "tiny-mamba2-draft-f32.gguf", n_layer=1,
                             seed=31, embd_scale=MAMBA2_EMBD, name="tiny-mamba2-draft")


@pytest.fixture(scope="session")
def tiny_qwen35(tmp_path_factory) -> Path:
    return write_qwen35_gguf(tmp_path_factory.mktemp("qwen35") / "tiny-qwen35-f32.gguf", embd_scale=QWEN35_EMBD)


@pytest.fixture(scope="session")
def tiny_qwen35_mtp(tmp_path_factory) -> Path:
    """The hybrid target with one MTP (nextn) block, as Qwen3.5 ships it."""
    return write_qwen35_gguf(tmp_path_factory.mktemp("qwen35_mtp") / "tiny-qwen35-mtp-f32.gguf", nextn=1,
                             embd_scale=QWEN35_EMBD, name="tiny-qwen35-mtp")


@pytest.fixture(scope="session")
def tiny_qwen35_draft(tmp_path_factory) -> Path:
    return write_qwen35_gguf(tmp_path_factory.mktemp("qwen35_draft") / "tiny-qwen35-draft-f32.gguf", n_layer=2,
                             seed=41, embd_scale=QWEN35_EMBD, name="tiny-qwen35-draft")


@pytest.fixture(scope="session")
def tiny_gemma3(tmp_path_factory) -> Path:
    return write_gemma3_gguf(tmp_path_factory.mktemp("gemma3") / "tiny-gemma3-f32.gguf", embd_scale=GEMMA3_EMBD)


@pytest.fixture(scope="session")
def tiny_gemma3_draft(tmp_path_factory) -> Path:
    return write_gemma3_gguf(tmp_path_factory.mktemp("gemma3_draft") / "tiny-gemma3-draft-f32.gguf", n_layer=2,
                             seed=51, embd_scale=GEMMA3_EMBD, name="tiny-gemma3-draft")


def write_step35_gguf(
    path: str | Path,
    *,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    sliding_window: int = 8,
    nextn: int = 2,
    mtp_gain: float = 1.0,
    seed: int = 60,
    shared_seed: int = 7,
    embd_scale: float = 0.02,
    output_scale: float = 8.0,
    name: str = "tiny-step35",
    basename: str = "Tiny-Step3.5",
) -> Path:
    """A dense Step 3.5 model (sliding window on even layers) with ``nextn`` MTP blocks, which
    llama.cpp drafts with as chained heads: one block per draft step."""
    path = Path(path)
    n_vocab = len(vocab_tokens("base")[0])
    head_dim = n_embd // n_head
    W = _Weights(seed, shared_seed, embd_scale)

    def block(p: str):
        yield p + "attn_norm.weight", W.ones(n_embd)
        yield p + "attn_q.weight", W.mat(n_head * head_dim, n_embd)
        yield p + "attn_k.weight", W.mat(n_head_kv * head_dim, n_embd)
        yield p + "attn_v.weight", W.mat(n_head_kv * head_dim, n_embd)
        yield p + "attn_output.weight", W.mat(n_embd, n_head * head_dim)
        yield p + "ffn_norm.weight", W.ones(n_embd)
        yield from _ffn(W, p, n_embd, n_ff)

    def tensors():
        yield "token_embd.weight", W.embedding(n_vocab, n_embd)
        for i in range(n_layer):
            yield from block(f"blk.{i}.")
        for i in range(n_layer, n_layer + nextn):
            p = f"blk.{i}."
            yield from block(p)
            eh = W.mat(n_embd, 2 * n_embd)
            eh[:, :n_embd] += np.float32(mtp_gain) * np.eye(n_embd, dtype=np.float32)
            yield p + "nextn.eh_proj.weight", eh
            yield p + "nextn.enorm.weight", W.ones(n_embd)
            yield p + "nextn.hnorm.weight", W.ones(n_embd)
        yield "output_norm.weight", W.ones(n_embd)
        yield "output.weight", W.output(n_vocab, n_embd, output_scale, 0)

    def fill(w):
        n_all = n_layer + nextn
        _common(w, name=name, basename=basename, n_ctx_train=2048, n_embd=n_embd, n_layer=n_all)
        w.add_feed_forward_length(n_ff)
        w.add_uint32("step35.expert_feed_forward_length", n_ff)
        w.add_head_count(n_head)
        w.add_head_count_kv(n_head_kv)
        w.add_rope_dimension_count(head_dim)
        w.add_rope_freq_base(10000.0)
        w.add_sliding_window(sliding_window)
        w.add_array("step35.attention.sliding_window_pattern", [i % 2 == 0 for i in range(n_all)])
        w.add_uint32("step35.nextn_predict_layers", nextn)

    return _write(path, "step35", tensors(), fill)


@pytest.fixture(scope="session")
def tiny_step35_mtp(tmp_path_factory) -> Path:
    """Two MTP blocks: chained heads."""
    return write_step35_gguf(tmp_path_factory.mktemp("step35") / "tiny-step35-mtp-f32.gguf", embd_scale=QWEN35_EMBD)

"""Vocabulary facts as llama.cpp derives them from a GGUF's metadata (``llama_vocab::impl::load``):
the vocab type, BOS/EOS/EOT ids and add_bos/add_eos with their per-type defaults, so that the
pairing check sees what llama.cpp will see.
"""

from __future__ import annotations

from .reader import ArrayRef, _string_index, as_int

__all__ = ["vocab_facts", "eot_id"]


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


def _special_id(kv: dict, key: str, default: int | None, n_vocab: int) -> int | None:
    """llama.cpp: an out-of-range default is disabled; an out-of-range key value is ignored."""
    if default is not None and default >= n_vocab:
        default = None
    v = as_int(kv.get(key))
    if v is None or v < 0 or v >= n_vocab:
        return default
    return v


def vocab_facts(kv: dict) -> dict:
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
        n_vocab = as_int(kv.get(f"{arch}.vocab_size")) or 0
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


def eot_id(kv: dict, n_vocab: int, buf) -> int | None:
    """tokenizer.ggml.eot_token_id, else the first of llama.cpp's end-of-turn texts present."""
    v = as_int(kv.get("tokenizer.ggml.eot_token_id"))
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

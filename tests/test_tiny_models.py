"""The synthetic models really work in llama.cpp, and look to it as read_gguf says."""

import ctypes
import time

import numpy as np
import pytest

from specdec_cli.models.meta import read_gguf
from tiny_models import write_llama_gguf

llama_cpp = pytest.importorskip("llama_cpp")

MODELS = ["tiny_target", "tiny_draft", "tiny_other_vocab", "tiny_big_draft"]


def test_generation_is_fast(tmp_path):
    t0 = time.perf_counter()
    write_llama_gguf(tmp_path / "t.gguf", n_layer=4, n_embd=128, n_ff=256, seed=1)
    assert time.perf_counter() - t0 < 1.0


def test_same_seed_same_bytes(tmp_path):
    a = write_llama_gguf(tmp_path / "a.gguf", seed=7)
    b = write_llama_gguf(tmp_path / "b.gguf", seed=7)
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize("fixture", MODELS)
def test_loads_tokenizes_and_predicts(request, fixture):
    path = request.getfixturevalue(fixture)
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, verbose=False, logits_all=True)
    toks = llm.tokenize(b"hello world, this is the world", add_bos=True)
    assert toks[0] == 1 and len(toks) > 3
    assert llm.detokenize(toks[1:]).decode().strip() == "hello world, this is the world"
    llm.eval(toks)
    argmax = np.asarray(llm.scores[: len(toks)]).argmax(-1)
    assert len(set(argmax.tolist())) > 1, "greedy prediction is the same token everywhere"


@pytest.mark.parametrize("fixture", MODELS)
def test_llama_cpp_agrees_with_read_gguf(request, fixture):
    path = request.getfixturevalue(fixture)
    info = read_gguf(path)
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, verbose=False, vocab_only=True)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    assert llama_cpp.llama_vocab_type(vocab) == llama_cpp.LLAMA_VOCAB_TYPE_SPM and info.vocab_type == "spm"
    assert llama_cpp.llama_vocab_n_tokens(vocab) == info.n_vocab
    assert llama_cpp.llama_vocab_bos(vocab) == info.bos_id
    assert llama_cpp.llama_vocab_eos(vocab) == info.eos_id
    assert llama_cpp.llama_vocab_eot(vocab) == info.eot_id
    assert llama_cpp.llama_vocab_get_add_bos(vocab) == info.add_bos
    assert llama_cpp.llama_vocab_get_add_eos(vocab) == info.add_eos
    texts = [llama_cpp.llama_vocab_get_text(vocab, i).decode() for i in range(info.n_vocab)]
    assert texts == info.tokens()


def test_chat_template_is_chatml(tiny_target):
    llm = llama_cpp.Llama(model_path=str(tiny_target), n_ctx=64, verbose=False, vocab_only=True)
    tmpl = llama_cpp.llama_model_chat_template(llm.model, None)
    msgs = (llama_cpp.llama_chat_message * 1)()
    msgs[0].role, msgs[0].content = b"user", b"hi"
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_chat_apply_template(tmpl, msgs, 1, True, buf, len(buf))
    assert buf.raw[:n].decode() == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

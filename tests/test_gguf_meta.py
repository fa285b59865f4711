"""read_gguf: metadata of the tiny models, bad files, vocab defaults, drafts, names, speed."""

import json
import shutil
import time

import numpy as np
import pytest

from specdec_cli.errors import EXIT_USAGE, UsageError
from specdec_cli.models.meta import GGUFInfo, read_gguf
from specdec_cli.models.names import family_from_name, size_from_label, size_from_name, size_from_params
from tiny_models import CHATML_TEMPLATE, vocab_tokens, write_meta_gguf

N_VOCAB = len(vocab_tokens()[0])


def expected_params(n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab=N_VOCAB):
    kv_width = n_head_kv * (n_embd // n_head)
    per_layer = 2 * n_embd + 2 * n_embd * n_embd + 2 * kv_width * n_embd + 3 * n_ff * n_embd
    return 2 * n_vocab * n_embd + n_embd + n_layer * per_layer


# --- the tiny models ----------------------------------------------------------------


def test_tiny_target_metadata(tiny_target):
    info = read_gguf(tiny_target)
    assert isinstance(info, GGUFInfo)
    assert info.path == tiny_target
    assert info.file_size == tiny_target.stat().st_size
    assert info.arch == "llama"
    assert (info.name, info.basename) == ("tiny-target", "Tiny-Llama")
    assert (info.n_layer, info.n_embd, info.n_head, info.n_head_kv, info.n_ff) == (4, 128, 4, 2, 256)
    assert info.n_ctx_train == 2048
    assert info.file_type == "F32"
    assert info.n_params == expected_params(4, 128, 4, 2, 256)
    assert info.size_label == "682K"
    assert info.scale == "682k"
    assert info.family == "tiny-llama"
    assert info.vocab_model == "llama" and info.vocab_type == "spm"
    assert info.n_vocab == N_VOCAB
    assert (info.bos_id, info.eos_id, info.eot_id) == (1, 2, 4)  # eot: <|im_end|> found by text
    assert info.add_bos is True and info.add_eos is False
    assert info.chat_template == CHATML_TEMPLATE
    assert info.spec_method is None and info.spec_info == {}


def test_tiny_draft_and_big_draft(tiny_draft, tiny_big_draft, tiny_target):
    d, big, t = read_gguf(tiny_draft), read_gguf(tiny_big_draft), read_gguf(tiny_target)
    assert (d.n_layer, d.n_embd) == (2, 64)
    assert d.n_params == expected_params(2, 64, 4, 2, 128)
    assert (big.n_layer, big.n_embd) == (6, 192)
    assert d.n_params < t.n_params < big.n_params
    assert d.family == t.family == big.family


def test_tokens_lazy_and_cached(tiny_target, tiny_other_vocab):
    info = read_gguf(tiny_target)
    assert info._tokens_cache is None  # not decoded by read_gguf
    toks = info.tokens()
    assert toks is info.tokens()
    assert toks == vocab_tokens("base")[0]
    assert toks[:5] == ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    assert toks[5] == "<0x00>" and toks[260] == "<0xFF>"
    other = read_gguf(tiny_other_vocab).tokens()
    assert len(other) == len(toks) and other[:261] == toks[:261] and other[261] != toks[261]


def test_to_dict_is_json(tiny_target):
    d = read_gguf(tiny_target).to_dict()
    json.dumps(d)
    assert d["path"] == str(tiny_target)
    assert "tokens" not in d and "kv" not in d
    assert d["family"] == "tiny-llama" and d["vocab_type"] == "spm"


# --- bad files ----------------------------------------------------------------------


def assert_usage(exc_info, *fragments):
    err = exc_info.value
    assert isinstance(err, UsageError) and err.exit_code == EXIT_USAGE
    msg = str(err)
    assert "\n" not in msg and err.hint
    for frag in fragments:
        assert frag in msg, msg
    return msg


def test_missing_file(tmp_path):
    p = tmp_path / "nope.gguf"
    with pytest.raises(UsageError) as e:
        read_gguf(p)
    assert_usage(e, "no such file", str(p))


def test_directory(tmp_path):
    with pytest.raises(UsageError) as e:
        read_gguf(tmp_path)
    assert_usage(e, "is a directory", str(tmp_path))


def test_directory_of_safetensors(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(UsageError) as e:
        read_gguf(tmp_path)
    msg = assert_usage(e, "Hugging Face", str(tmp_path))
    assert "GGUF" in msg and "convert" in e.value.hint


def test_directory_with_ggufs_names_them(tiny_pair_dir):
    with pytest.raises(UsageError) as e:
        read_gguf(tiny_pair_dir)
    assert "tiny-target-f32.gguf" in e.value.hint


@pytest.mark.parametrize("content", [b"", b"\x00" * 3, b"PK\x03\x04" + bytes(range(256)) * 4])
def test_not_gguf(tmp_path, content):
    p = tmp_path / "x.gguf"
    p.write_bytes(content)
    with pytest.raises(UsageError) as e:
        read_gguf(p)
    assert_usage(e, "not a GGUF file", str(p))


def test_random_bytes(tmp_path):
    p = tmp_path / "random.gguf"
    p.write_bytes(np.random.default_rng(0).integers(0, 256, 10_000, dtype=np.uint8).tobytes())
    with pytest.raises(UsageError) as e:
        read_gguf(p)
    assert_usage(e, "not a GGUF file", str(p))


def _cut(src, dst, n):
    dst.write_bytes(src.read_bytes()[:n])
    return dst


@pytest.mark.parametrize("n", [4, 10, 30, 200, 3000], ids=["magic", "counts", "first-key", "kv", "vocab"])
def test_truncated_header(tiny_draft, tmp_path, n):
    p = _cut(tiny_draft, tmp_path / "cut.gguf", n)
    with pytest.raises(UsageError) as e:
        read_gguf(p)
    assert_usage(e, "truncated GGUF", str(p))


@pytest.mark.parametrize("missing", [1, 4096, 100_000])
def test_truncated_tensor_data(tiny_draft, tmp_path, missing):
    size = tiny_draft.stat().st_size
    p = _cut(tiny_draft, tmp_path / "cut.gguf", size - missing)
    with pytest.raises(UsageError) as e:
        read_gguf(p)
    msg = assert_usage(e, "truncated GGUF", str(p), "tensor data")
    assert str(size - missing) in msg


def test_absurd_counts(tmp_path):
    p = tmp_path / "absurd.gguf"
    p.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (2**40).to_bytes(8, "little") * 2 + b"\0" * 64)
    with pytest.raises(UsageError) as e:
        read_gguf(p)
    assert_usage(e, "truncated GGUF")


def test_corrupt_value_type(tmp_path):
    key = b"general.architecture"
    body = len(key).to_bytes(8, "little") + key + (99).to_bytes(4, "little") + b"\0" * 32
    p = tmp_path / "corrupt.gguf"
    p.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (1).to_bytes(8, "little") + body)
    with pytest.raises(UsageError) as e:
        read_gguf(p)
    assert_usage(e, "corrupt GGUF", "unknown value type 99")


def test_unsupported_version(tmp_path):
    p = tmp_path / "v1.gguf"
    p.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + b"\0" * 64)
    with pytest.raises(UsageError) as e:
        read_gguf(p)
    assert_usage(e, "version 1")


def test_intact_copy_reads(tiny_draft, tmp_path):
    p = tmp_path / "copy.gguf"
    shutil.copy(tiny_draft, p)
    assert read_gguf(p).n_params == read_gguf(tiny_draft).n_params


# --- vocabulary facts, llama.cpp's defaults -------------------------------------------

BPE_TOKENS = [f"t{i}" for i in range(200)]


def bpe(tmp_path, name="bpe.gguf", **meta):
    kv = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": BPE_TOKENS,
          "tokenizer.ggml.merges": ["t 1"], "tokenizer.ggml.bos_token_id": None,
          "tokenizer.ggml.eos_token_id": None, "tokenizer.ggml.add_bos_token": None,
          "tokenizer.ggml.add_eos_token": None}
    kv.update(meta)
    return read_gguf(write_meta_gguf(tmp_path / name, arch="qwen2", vocab=BPE_TOKENS, meta=kv))


def test_bpe_defaults(tmp_path):
    info = bpe(tmp_path, **{"tokenizer.ggml.pre": "qwen2"})
    assert info.vocab_type == "bpe"
    assert (info.bos_id, info.eos_id) == (11, 11)  # llama.cpp's BPE defaults
    assert (info.add_bos, info.add_eos) == (False, False)


def test_bpe_llama3_pre_adds_bos(tmp_path):
    assert bpe(tmp_path, **{"tokenizer.ggml.pre": "llama-bpe"}).add_bos is True


def test_bpe_keys_override(tmp_path):
    info = bpe(tmp_path, **{"tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.add_bos_token": False,
                            "tokenizer.ggml.bos_token_id": 7, "tokenizer.ggml.eos_token_id": 9})
    assert (info.add_bos, info.bos_id, info.eos_id) == (False, 7, 9)


def test_out_of_range_special_id_keeps_default(tmp_path):
    info = bpe(tmp_path, **{"tokenizer.ggml.bos_token_id": 5000})
    assert info.bos_id == 11


def test_chatglm_has_no_bos(tmp_path):
    assert bpe(tmp_path, **{"tokenizer.ggml.pre": "chatglm-bpe"}).bos_id is None


def test_gemma4_forces_add_bos(tmp_path):
    info = bpe(tmp_path, **{"tokenizer.ggml.model": "gemma4", "tokenizer.ggml.add_bos_token": False})
    assert info.vocab_type == "bpe" and info.add_bos is True


def test_t5_defaults(tmp_path):
    info = bpe(tmp_path, **{"tokenizer.ggml.model": "t5", "tokenizer.ggml.merges": None})
    assert info.vocab_type == "ugm"
    assert (info.bos_id, info.eos_id, info.add_bos, info.add_eos) == (None, 1, False, True)


def test_eot_by_key_and_by_text(tmp_path):
    toks = BPE_TOKENS[:150] + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    p = write_meta_gguf(tmp_path / "e.gguf", vocab=toks, meta={"tokenizer.ggml.model": "gpt2"})
    assert read_gguf(p).eot_id == 152  # <|im_end|> outranks <|endoftext|>, as in llama.cpp's list
    p = write_meta_gguf(tmp_path / "k.gguf", vocab=toks,
                        meta={"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.eot_token_id": 150})
    assert read_gguf(p).eot_id == 150


def test_eot_is_looked_up_when_asked_for(tmp_path):
    """Finding a draft reads every GGUF beside the target and needs none of their end-of-turn
    tokens: the text search over the token array waits until someone asks."""
    toks = BPE_TOKENS[:150] + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    p = write_meta_gguf(tmp_path / "e.gguf", vocab=toks, meta={"tokenizer.ggml.model": "gpt2"})
    info = read_gguf(p)
    assert info._eot_cache is None
    assert info.eot_id == 152 and info.to_dict()["eot_id"] == 152
    gone = read_gguf(p)
    p.unlink()
    assert gone.eot_id is None  # the file went away after its header was read: not known, no traceback


def test_no_vocab(tmp_path):
    info = read_gguf(write_meta_gguf(tmp_path / "nv.gguf", vocab=None))
    assert info.vocab_type is None and info.vocab_model is None and info.n_vocab == 0
    assert info.tokens() == [] and info.bos_id is None and info.add_bos is False


def test_file_type_guessed_from_tensors(tmp_path):
    p = write_meta_gguf(tmp_path / "f16.gguf", tensors={
        "a.weight": np.zeros((64, 64), dtype=np.float16), "n.weight": np.ones(64, dtype=np.float32)})
    info = read_gguf(p)
    assert info.file_type == "F16" and info.n_params == 64 * 64 + 64


def test_file_type_from_key(tmp_path):
    p = write_meta_gguf(tmp_path / "q.gguf", meta={"general.file_type": 15})
    assert read_gguf(p).file_type == "Q4_K_M"


# --- speculative drafts ----------------------------------------------------------------


def test_eagle3_draft(tmp_path):
    p = write_meta_gguf(tmp_path / "e3.gguf", arch="eagle3", vocab=None, meta={
        "general.name": "eagle3_gemma4_12b_ttt7", "eagle3.block_count": 1,
        "eagle3.embedding_length": 3840, "eagle3.target_layers": [2, 24, 45],
        "eagle3.target_hidden_size": 3840, "eagle3.norm_before_residual": True})
    info = read_gguf(p)
    assert info.spec_method == "eagle3"
    assert info.spec_info == {"target_layers": [2, 24, 45], "target_hidden_size": 3840,
                              "norm_before_residual": True}
    assert (info.family, info.scale) == ("gemma4", "12b")


@pytest.mark.parametrize("markov", [False, True])
def test_dflash_and_dspark(tmp_path, markov):
    tensors = {"output_norm.weight": np.ones(8, dtype=np.float32)}
    if markov:
        tensors["markov_w1.weight"] = np.zeros((4, 8), dtype=np.float32)
    p = write_meta_gguf(tmp_path / "df.gguf", arch="dflash", vocab="base", tensors=tensors, meta={
        "general.name": "dspark_qwen3_8b_block7", "dflash.block_count": 1,
        "dflash.embedding_length": 4096, "dflash.target_layers": [2, 18, 34],
        "dflash.block_size": 7})
    info = read_gguf(p)
    assert info.spec_method == ("dspark" if markov else "dflash")
    assert info.spec_info["target_layers"] == [2, 18, 34]
    assert info.spec_info["block_size"] == 7
    assert info.spec_info["has_markov_head"] is markov
    assert (info.family, info.scale) == ("qwen3", "8b")


def test_mtp_model_is_not_a_draft(tmp_path):
    p = write_meta_gguf(tmp_path / "mtp.gguf", arch="qwen3", meta={"qwen3.block_count": 3}, tensors={
        "blk.2.nextn.eh_proj.weight": np.zeros((4, 4), dtype=np.float32)})
    info = read_gguf(p)
    assert info.spec_method is None and info.spec_info == {"mtp": True}


# --- family and size normalisation -------------------------------------------------------


@pytest.mark.parametrize("name, family, size", [
    ("Qwen2.5-Coder-1.5B-Instruct", "qwen2.5-coder", "1.5b"),
    ("Qwen2.5 Coder 7B Instruct", "qwen2.5-coder", "7b"),
    ("Qwen2.5-0.5B-Instruct", "qwen2.5", "0.5b"),
    ("Qwen3-8B", "qwen3", "8b"),
    ("Qwen3-30B-A3B-Instruct-2507", "qwen3", "30b"),
    ("Meta-Llama-3.1-8B-Instruct", "llama3.1", "8b"),
    ("Llama-3.2-1B-Instruct", "llama3.2", "1b"),
    ("gemma-3-270m-it", "gemma3", "270m"),
    ("SmolLM2-360M-Instruct", "smollm2", "360m"),
    ("dspark_qwen3_8b_block7", "qwen3", "8b"),
    ("eagle3_gemma4_12b_ttt7", "gemma4", "12b"),
    ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "llama3.1", "8b"),
    ("Qwen3-8B-DFlash-b16", "qwen3", "8b"),
    ("DeepSeek-V4-Flash", "deepseek-v4", "flash"),
    ("DeepSeek-V4-Pro-DSpark", "deepseek-v4", "pro"),
    ("Kimi-K2-Instruct", "kimi-k2", None),
    ("Tiny-Llama", "tiny-llama", None),
])
def test_family_and_size_from_name(name, family, size):
    assert family_from_name(name) == family
    assert size_from_name(name) == size


@pytest.mark.parametrize("label, size", [
    ("1.5B", "1.5b"), ("494M", "0.5b"), ("596M", "0.6b"), ("268M", "270m"), ("135M", "135m"),
    ("7.6B", "7b"),  # Qwen2.5-7B counted by convert_hf_to_gguf
    ("8.2B", "8b"), ("3.9B", "4b"), ("15B", "14b"),  # Qwen2.5-14B has 14.8B
    ("6.7B", "6.7b"),  # no marketed size close below: kept as counted
    ("682K", "682k"), ("8x7B", "8x7b"), ("", None), (None, None),
])
def test_size_from_label(label, size):
    assert size_from_label(label) == size


@pytest.mark.parametrize("n, size", [
    (494_032_768, "0.5b"), (1_543_714_304, "1.5b"), (7_615_616_512, "7b"),
    (8_190_735_360, "8b"), (3_880_000_000, "4b"), (1_235_814_400, "1b"), (50_000_000, "50m"),
    (0, None),
])
def test_size_from_params(n, size):
    assert size_from_params(n) == size


def test_named_tier_beats_size_label(tmp_path):
    p = write_meta_gguf(tmp_path / "ds.gguf", arch="deepseek4", meta={
        "general.name": "DeepSeek V4 Flash", "general.size_label": "284B-A13B"})
    info = read_gguf(p)
    assert (info.family, info.scale) == ("deepseek-v4", "flash")


def test_scale_of_a_plain_model_prefers_size_label(tmp_path):
    p = write_meta_gguf(tmp_path / "q.gguf", arch="qwen2", meta={
        "general.name": "Qwen2.5 Coder 1.5B Instruct", "general.basename": "Qwen2.5-Coder",
        "general.size_label": "1.5B"})
    info = read_gguf(p)
    assert (info.family, info.scale) == ("qwen2.5-coder", "1.5b")


# --- speed on a real-sized vocabulary ---------------------------------------------------


@pytest.fixture(scope="session")
def big_vocab_gguf(tmp_path_factory):
    n = 151_936
    toks = [f"\u0120w{i}" for i in range(n)]
    toks[151_643], toks[151_645] = "<|endoftext|>", "<|im_end|>"
    p = tmp_path_factory.mktemp("bigvocab") / "big.gguf"
    return write_meta_gguf(p, arch="qwen2", vocab=toks, meta={
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.merges": [f"\u0120 w{i}" for i in range(151_387)],
        "tokenizer.ggml.bos_token_id": 151_643, "tokenizer.ggml.eos_token_id": 151_645,
        "tokenizer.ggml.add_bos_token": False})


def test_big_vocab_is_fast(big_vocab_gguf):
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        info = read_gguf(big_vocab_gguf)
        best = min(best, time.perf_counter() - t0)
    assert info.n_vocab == 151_936 and info.eot_id == 151_645 and info.bos_id == 151_643
    assert best < 0.5, f"read_gguf took {best:.3f}s on a 151,936-token vocabulary"
    toks = info.tokens()
    assert len(toks) == 151_936 and toks[151_645] == "<|im_end|>"


# --- the header cache ------------------------------------------------------------------------

from specdec_cli.models import header_cache  # noqa: E402


@pytest.fixture
def header_cache_dir(tmp_path, monkeypatch):
    """A private header cache that takes files of any size (the default skips small ones)."""
    d = tmp_path / "headers"
    monkeypatch.setenv("SPECDEC_HEADER_CACHE", str(d))
    monkeypatch.setattr(header_cache, "MIN_CACHED_BYTES", 0)
    return d


def test_a_cached_header_reads_as_the_file(big_vocab_gguf, header_cache_dir, monkeypatch):
    first = read_gguf(big_vocab_gguf)
    assert len(list(header_cache_dir.glob("*.json"))) == 1

    def no_parse(*a):
        raise AssertionError("parsed again")

    monkeypatch.setattr("specdec_cli.models.meta._parse", no_parse)
    again = read_gguf(big_vocab_gguf)
    assert again == first and again.kv == first.kv and again.tensors == first.tensors
    assert again.tokens()[151_645] == "<|im_end|>" and again.eot_id == 151_645


def test_a_rewritten_file_is_parsed_again(tmp_path, header_cache_dir):
    path = tmp_path / "m.gguf"
    write_meta_gguf(path, meta={"general.name": "model-a"})
    size = path.stat().st_size
    assert read_gguf(path).name == "model-a"
    write_meta_gguf(path, meta={"general.name": "model-b"})  # the same size, maybe the same clock tick
    assert path.stat().st_size == size
    assert read_gguf(path).name == "model-b"


def test_a_corrupt_entry_is_parsed_again(tiny_target, header_cache_dir):
    want = read_gguf(tiny_target)
    (entry,) = header_cache_dir.glob("*.json")
    good = json.loads(entry.read_text())
    for junk in ("{not json", '{"format": 1}', json.dumps({**good, "identity": []}), json.dumps({**good, "kv": 3}),
                 json.dumps({**good, "tensors": [[1]]})):
        entry.write_text(junk)
        assert read_gguf(tiny_target) == want
    assert json.loads(entry.read_text())["format"] == header_cache.FORMAT  # written again


def test_the_cache_can_be_turned_off_and_skips_small_files(tiny_target, tmp_path, monkeypatch):
    d = tmp_path / "headers"
    monkeypatch.setenv("SPECDEC_HEADER_CACHE", str(d))
    read_gguf(tiny_target)  # under MIN_CACHED_BYTES: parsed each time, nothing kept
    assert not d.exists()
    monkeypatch.setattr(header_cache, "MIN_CACHED_BYTES", 0)
    monkeypatch.setenv("SPECDEC_HEADER_CACHE", "off")
    read_gguf(tiny_target)
    assert not d.exists()


# --- memory kinds and MTP layers --------------------------------------------------------------

from specdec_cli.models.memory_kinds import MemoryKind, Rollback  # noqa: E402
from tiny_memory_models import (  # noqa: E402,F401  (session fixtures, used by name)
    tiny_gemma3,
    tiny_mamba2,
    tiny_qwen35,
    tiny_qwen35_mtp,
)


def qwen35_layers(info):
    """(recurrent, attention) trunk layers as llama.cpp's qwen35 loader marks them: every
    full_attention_interval-th layer is attention, the nextn blocks are neither."""
    trunk = info.n_layer - (info.kv.get("qwen35.nextn_predict_layers") or 0)
    interval = info.kv["qwen35.full_attention_interval"]
    rec = tuple(i for i in range(trunk) if (i + 1) % interval != 0)
    return rec, tuple(i for i in range(trunk) if i not in rec)


def test_memory_kinds_of_the_fixtures(tiny_mamba2, tiny_qwen35, tiny_gemma3, tiny_target):
    mamba, qwen, gemma, llama = (read_gguf(p) for p in (tiny_mamba2, tiny_qwen35, tiny_gemma3, tiny_target))
    assert mamba.memory is MemoryKind.RECURRENT and mamba.rollback is Rollback.CHECKPOINT
    assert (mamba.recurrent_layers, mamba.kv_layers) == (tuple(range(mamba.n_layer)), ())
    assert qwen.memory is MemoryKind.HYBRID and qwen.rollback is Rollback.SNAPSHOTS
    assert (qwen.recurrent_layers, qwen.kv_layers) == qwen35_layers(qwen)
    assert qwen.recurrent_layers and qwen.kv_layers
    # gemma3: five layers of every six see the window (llama.cpp's set_swa_pattern(6))
    assert gemma.memory is MemoryKind.SLIDING_WINDOW and gemma.rollback is Rollback.PARTIAL
    assert gemma.n_swa == gemma.kv["gemma3.attention.sliding_window"] > 0
    assert gemma.swa_layers == tuple(i for i in range(gemma.n_layer) if i % 6 < 5)
    assert gemma.kv_layers == tuple(range(gemma.n_layer))
    assert llama.memory is MemoryKind.ATTENTION and llama.rollback is Rollback.PARTIAL
    assert (llama.recurrent_layers, llama.swa_layers, llama.n_nextn) == ((), (), 0)


def test_inspect_json_carries_memory_and_rollback(tiny_mamba2, tiny_qwen35, tiny_gemma3, tiny_target):
    keys = ("memory", "rollback", "recurrent_layers", "attention_layers", "sliding_window",
            "sliding_window_layers", "nextn_layers")
    mamba, qwen, gemma, llama = (read_gguf(p) for p in (tiny_mamba2, tiny_qwen35, tiny_gemma3, tiny_target))
    rec, att = qwen35_layers(qwen)
    got = {i.path.name: {k: i.to_dict()[k] for k in keys} for i in (mamba, qwen, gemma, llama)}
    assert got == {
        mamba.path.name: dict(memory="recurrent", rollback="checkpoint", recurrent_layers=mamba.n_layer,
                              attention_layers=0, sliding_window=None, sliding_window_layers=0, nextn_layers=0),
        qwen.path.name: dict(memory="hybrid", rollback="snapshots", recurrent_layers=len(rec),
                             attention_layers=len(att), sliding_window=None, sliding_window_layers=0, nextn_layers=0),
        gemma.path.name: dict(memory="sliding window", rollback="partial", recurrent_layers=0,
                              attention_layers=gemma.n_layer, sliding_window=gemma.n_swa,
                              sliding_window_layers=len(gemma.swa_layers), nextn_layers=0),
        llama.path.name: dict(memory="attention", rollback="partial", recurrent_layers=0, attention_layers=4,
                              sliding_window=None, sliding_window_layers=0, nextn_layers=0),
    }
    json.dumps(qwen.to_dict())


def test_mtp_target_counts_its_nextn_layers(tiny_qwen35_mtp):
    info = read_gguf(tiny_qwen35_mtp)
    d = info.to_dict()
    assert info.spec_method is None and d["spec_method"] is None  # a target, not a draft
    assert info.spec_info == {"mtp": True, "nextn_predict_layers": 1}
    assert info.has_mtp and info.n_nextn == 1 and d["nextn_layers"] == 1
    assert info.n_layer_trunk == info.n_layer - 1
    # the nextn block is full attention, but not part of the trunk's memory
    assert (info.recurrent_layers, info.kv_layers) == qwen35_layers(info)
    assert info.n_layer - 1 not in info.kv_layers
    assert d["memory"] == "hybrid" and d["rollback"] == "snapshots"


def test_memory_summary_lines(tiny_mamba2, tiny_qwen35, tiny_gemma3, tiny_target):
    qwen, gemma = read_gguf(tiny_qwen35), read_gguf(tiny_gemma3)
    rec, att = qwen35_layers(qwen)
    assert read_gguf(tiny_mamba2).memory_summary() == "recurrent: drafts roll back by checkpoint and restore"
    assert qwen.memory_summary() == (
        f"hybrid ({len(rec)} recurrent + {len(att)} attention layers): drafts roll back with recurrent-state snapshots")
    assert gemma.memory_summary() == (
        f"sliding window ({gemma.n_swa} tokens on {len(gemma.swa_layers)} of {gemma.n_layer} layers)")
    assert read_gguf(tiny_target).memory_summary() == "attention"


def test_memory_summary_of_the_brief_examples(tmp_path):
    hybrid = read_gguf(write_meta_gguf(tmp_path / "h.gguf", arch="qwen35", meta={"qwen35.block_count": 4}))
    assert hybrid.memory_summary() == (
        "hybrid (3 recurrent + 1 attention layers): drafts roll back with recurrent-state snapshots")
    gemma = read_gguf(write_meta_gguf(tmp_path / "g.gguf", arch="gemma3", meta={
        "gemma3.block_count": 6, "gemma3.attention.sliding_window": 8}))
    assert gemma.memory_summary() == "sliding window (8 tokens on 5 of 6 layers)"


def _inspect_text(info, monkeypatch) -> str:
    import io

    from rich.console import Console

    from specdec_cli.commands import views

    buf = io.StringIO()
    monkeypatch.setattr(views, "out", Console(file=buf, width=200, highlight=False, no_color=True))
    views.info_table(info)
    return buf.getvalue()


def test_inspect_shows_memory_and_mtp_lines(tiny_qwen35_mtp, tiny_mamba2, monkeypatch):
    info = read_gguf(tiny_qwen35_mtp)
    text = _inspect_text(info, monkeypatch)
    lines = {ln.split(None, 1)[0]: ln.split(None, 1)[1].strip() for ln in text.splitlines() if ln.strip()}
    assert lines["memory"] == info.memory_summary()
    assert lines["memory"].startswith("hybrid (") and lines["memory"].endswith("recurrent-state snapshots")
    assert lines["MTP"] == "1 nextn layer (specdec run --method mtp)"
    text = _inspect_text(read_gguf(tiny_mamba2), monkeypatch)
    assert "recurrent: drafts roll back by checkpoint and restore" in text and "MTP" not in text


def test_recurrent_layers_from_metadata_as_llama_cpp_marks_them(tmp_path):
    # an explicit attention.recurrent_layers array wins over full_attention_interval
    qwen = read_gguf(write_meta_gguf(tmp_path / "q.gguf", arch="qwen35", meta={
        "qwen35.block_count": 4, "qwen35.full_attention_interval": 2,
        "qwen35.attention.recurrent_layers": [True, True, True, False]}))
    assert (qwen.recurrent_layers, qwen.kv_layers) == ((0, 1, 2), (3,))
    # without either, llama.cpp's default interval is 4
    qwen = read_gguf(write_meta_gguf(tmp_path / "q4.gguf", arch="qwen35", meta={"qwen35.block_count": 8}))
    assert qwen.kv_layers == (3, 7)
    # Jamba-like hybrids: no KV heads marks a recurrent layer
    jamba = read_gguf(write_meta_gguf(tmp_path / "j.gguf", arch="jamba", meta={
        "jamba.block_count": 4, "jamba.attention.head_count": 8,
        "jamba.attention.head_count_kv": [0, 0, 0, 2]}))
    assert jamba.memory is MemoryKind.HYBRID and jamba.rollback is Rollback.CHECKPOINT
    assert (jamba.recurrent_layers, jamba.kv_layers) == ((0, 1, 2), (3,))
    # Nemotron-H: Mamba, attention and MLP-only layers
    nemo = read_gguf(write_meta_gguf(tmp_path / "n.gguf", arch="nemotron_h", meta={
        "nemotron_h.block_count": 3, "nemotron_h.attention.head_count": 8,
        "nemotron_h.attention.head_count_kv": [0, 2, 0], "nemotron_h.feed_forward_length": [0, 0, 64]}))
    assert (nemo.recurrent_layers, nemo.kv_layers) == ((0,), (1,))


def test_an_encoder_only_model_has_no_memory(tmp_path):
    bert = read_gguf(write_meta_gguf(tmp_path / "bert.gguf", arch="bert", meta={"bert.block_count": 2}))
    assert bert.memory is MemoryKind.NONE and bert.rollback is Rollback.NONE
    d = bert.to_dict()
    assert (d["memory"], d["rollback"], d["attention_layers"]) == ("none", "none", 0)
    assert bert.memory_summary().startswith("none: ")


def test_nextn_key_without_tensors_still_shortens_the_trunk(tmp_path):
    # llama.cpp reads nextn_predict_layers whatever the tensors: the trunk is block_count - nextn
    info = read_gguf(write_meta_gguf(tmp_path / "glm.gguf", arch="glm4moe", meta={
        "glm4moe.block_count": 4, "glm4moe.nextn_predict_layers": 1}))
    assert info.n_nextn == 1 and info.n_layer_trunk == 3 and info.kv_layers == (0, 1, 2)
    assert not info.has_mtp  # no nextn tensors in the file: nothing to draft with

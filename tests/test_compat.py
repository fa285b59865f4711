"""Pairing verdicts: llama.cpp's vocabulary rules, and specdec's base/size rules."""

import json

import numpy as np
import pytest

from specdec_cli.models.meta import GGUFInfo, read_gguf
from specdec_cli.pairing.compat import Check, Verdict, check_base, check_pair, check_vocab, vocab_matches
from test_cli import specdec
from tiny_models import vocab_tokens, write_meta_gguf

BASE_TOKENS = vocab_tokens("base")[0]


@pytest.fixture(scope="module")
def target(tiny_target):
    return read_gguf(tiny_target)


@pytest.fixture(scope="module")
def draft(tiny_draft):
    return read_gguf(tiny_draft)


def variant(tmp_path, name="variant.gguf", vocab=None, **meta):
    """A draft-like GGUF with the tiny vocabulary, some keys changed."""
    return read_gguf(write_meta_gguf(tmp_path / name, vocab=vocab or "base", meta={
        "general.basename": "Tiny-Llama", **meta}))


def by_name(checks):
    return {c.name: c for c in checks}


# --- classic draft ------------------------------------------------------------------


def test_target_and_draft_are_compatible(target, draft):
    v = check_pair(target, draft)
    assert isinstance(v, Verdict)
    assert v.ok and not v.errors and not v.warnings, v.to_dict()
    checks = by_name(v.checks)
    for name in ("vocab type", "bos", "eos", "vocab size", "token texts", "base"):
        assert checks[name].ok, checks[name]
    assert checks["vocab type"].detail == "both spm"
    json.dumps(v.to_dict())


def test_other_vocab_names_first_differing_token(target, tiny_other_vocab):
    other = read_gguf(tiny_other_vocab)
    v = check_pair(target, other)
    assert not v.ok
    texts = by_name(v.checks)["token texts"]
    assert not texts.ok
    t, o = BASE_TOKENS[261], other.tokens()[261]
    assert texts.detail == f"token 261 differs: target {t!r}, draft {o!r}"
    assert any("token 261 differs" in e for e in v.errors)
    # type, specials and size agree: only the texts fail
    assert [c.name for c in check_vocab(target, other) if not c.ok] == ["token texts"]


def test_finding_a_draft_reads_token_texts_only_when_the_cheap_rules_agree(tmp_path, target, draft,
                                                                          tiny_other_vocab, monkeypatch):
    assert target.tokens_raw() is not None and target.tokens_raw() == draft.tokens_raw()  # same bytes: same vocab
    assert vocab_matches(target, draft)
    assert not vocab_matches(target, read_gguf(tiny_other_vocab))  # same size, one text differs
    bpe = variant(tmp_path, **{"tokenizer.ggml.model": "gpt2"})

    def unread(_self):
        raise AssertionError("token texts read")
    monkeypatch.setattr(GGUFInfo, "tokens", unread)
    monkeypatch.setattr(GGUFInfo, "tokens_raw", unread)
    assert not vocab_matches(target, bpe)


def test_big_draft_is_an_error(target, tiny_big_draft):
    big = read_gguf(tiny_big_draft)
    v = check_pair(target, big)
    assert not v.ok
    [err] = v.errors
    assert "larger than the target" in err and "swap them?" in err
    assert "682K params" in err  # the target's count


def test_same_model_as_draft_warns(target):
    v = check_pair(target, target)
    assert v.ok and any("as large as the target" in w for w in v.warnings)


def test_registry_entry_size_mismatch_warns(target, draft):
    errors, warnings = check_base(target, draft, entry_family="tiny-llama", entry_size="7b")
    assert not errors
    assert warnings == ["this draft is registered for tiny-llama 7b but the target is tiny-llama 682k"]
    v = check_pair(target, draft, entry_family="tiny-llama", entry_size="7b")
    assert v.ok and v.warnings == warnings


def test_registry_entry_matching_is_quiet(target, draft):
    assert check_base(target, draft, entry_family="tiny-llama", entry_size="682k") == ([], [])


def test_registry_any_matches_everything(target, draft):
    assert check_base(target, draft, entry_family="any", entry_size="any") == ([], [])
    assert check_base(target, draft, entry_family="tiny-llama", entry_size="any") == ([], [])


def test_different_family_only_warns(tmp_path, target):
    other_family = variant(tmp_path, **{"general.basename": "Other-Model"})
    v = check_pair(target, other_family)
    assert v.ok
    assert any("other-model" in w and "tiny-llama" in w for w in v.warnings)


# --- each vocabulary rule ------------------------------------------------------------


def test_vocab_size_difference_over_128(tmp_path, target):
    big = variant(tmp_path, vocab=BASE_TOKENS + [f"x{i}" for i in range(200)])
    c = by_name(check_vocab(target, big))
    n = len(BASE_TOKENS)
    assert not c["vocab size"].ok
    assert c["vocab size"].detail == f"vocab sizes {n} vs {n + 200} differ by 200 (max 128)"
    assert c["token texts"].ok  # the common prefix is identical


def test_vocab_size_difference_within_128(tmp_path, target):
    near = variant(tmp_path, vocab=BASE_TOKENS + [f"x{i}" for i in range(100)])
    assert all(c.ok for c in check_vocab(target, near))


def test_add_bos_differs(tmp_path, target):
    c = by_name(check_vocab(target, variant(tmp_path, **{"tokenizer.ggml.add_bos_token": False})))
    assert not c["bos"].ok and c["bos"].detail == "add_bos differs: target true, draft false"


def test_bos_id_differs(tmp_path, target):
    c = by_name(check_vocab(target, variant(tmp_path, **{"tokenizer.ggml.bos_token_id": 3})))
    assert not c["bos"].ok and c["bos"].detail == "BOS ids differ: target 1, draft 3"


def test_eos_ignored_unless_added(tmp_path, target):
    # llama.cpp compares EOS ids only when add_eos is set
    c = by_name(check_vocab(target, variant(tmp_path, **{"tokenizer.ggml.eos_token_id": 4})))
    assert c["eos"].ok


def test_eos_id_differs_when_added(tmp_path):
    a = variant(tmp_path, "a.gguf", **{"tokenizer.ggml.add_eos_token": True})
    b = variant(tmp_path, "b.gguf", **{"tokenizer.ggml.add_eos_token": True, "tokenizer.ggml.eos_token_id": 4})
    c = by_name(check_vocab(a, b))
    assert not c["eos"].ok and c["eos"].detail == "EOS ids differ: target 2, draft 4"


def test_vocab_type_differs(tmp_path, target):
    bpe = variant(tmp_path, **{"tokenizer.ggml.model": "gpt2"})
    c = by_name(check_vocab(target, bpe))
    assert not c["vocab type"].ok and c["vocab type"].detail == "vocab types differ: target spm, draft bpe"


def test_special_tokens_below_5_are_not_compared(tmp_path, target):
    toks = list(BASE_TOKENS)
    toks[3], toks[4] = "<|user|>", "<|end|>"
    assert by_name(check_vocab(target, variant(tmp_path, vocab=toks)))["token texts"].ok


# --- eagle3 / dflash / dspark heads --------------------------------------------------


@pytest.fixture()
def qwen3_8b(tmp_path):
    return read_gguf(write_meta_gguf(tmp_path / "qwen3-8b.gguf", arch="qwen3", meta={
        "general.name": "Qwen3 8B", "general.basename": "Qwen3", "general.size_label": "8.2B",
        "qwen3.block_count": 36, "qwen3.embedding_length": 4096}))


def head(tmp_path, arch="eagle3", name="eagle3_qwen3_8b", layers=(2, 18, 33), width=4096,
         vocab=None, markov=False):
    meta = {"general.name": name, f"{arch}.block_count": 1, f"{arch}.embedding_length": width,
            f"{arch}.target_layers": list(layers)}
    if arch == "eagle3":
        meta["eagle3.target_hidden_size"] = width
    tensors = {"output_norm.weight": np.ones(8, dtype=np.float32)}
    if markov:
        tensors["markov_w1.weight"] = np.zeros((4, 8), dtype=np.float32)
    return read_gguf(write_meta_gguf(tmp_path / f"{name}.gguf", arch=arch, vocab=vocab,
                                     meta=meta, tensors=tensors))


def test_eagle3_for_the_right_base(tmp_path, qwen3_8b):
    v = check_pair(qwen3_8b, head(tmp_path))
    assert v.ok, v.to_dict()
    assert by_name(v.checks)["vocab"].detail.startswith("the draft has no vocabulary")


def test_head_for_another_family_is_an_error(tmp_path, qwen3_8b):
    v = check_pair(qwen3_8b, head(tmp_path, name="eagle3_gemma4_12b_ttt7", width=4096))
    assert not v.ok
    assert any("eagle3 draft made for gemma4 12b, target is qwen3 8b" in e for e in v.errors)


def test_head_for_another_size_warns(tmp_path, qwen3_8b):
    v = check_pair(qwen3_8b, head(tmp_path, arch="dflash", name="dspark_qwen3_14b_block7", markov=True))
    assert v.ok, v.errors
    assert v.warnings == ["draft made for qwen3 14b, target is qwen3 8b: acceptance will collapse"]


def test_entry_family_overrides_name(tmp_path, qwen3_8b):
    nameless = head(tmp_path, name="draft-head")
    errors, warnings = check_base(qwen3_8b, nameless, method="eagle3", entry_family="qwen3", entry_size="14b")
    assert not errors and warnings == ["draft made for qwen3 14b, target is qwen3 8b: acceptance will collapse"]
    errors, _ = check_base(qwen3_8b, nameless, method="eagle3", entry_family="llama3.1", entry_size="8b")
    assert errors == ["eagle3 draft made for llama3.1 8b, target is qwen3 8b"]


def test_head_width_mismatch(tmp_path, qwen3_8b):
    v = check_pair(qwen3_8b, head(tmp_path, width=5120))
    assert any("expects target hidden size 5120, the target has 4096" in e for e in v.errors)


def test_head_layers_beyond_target(tmp_path, qwen3_8b):
    v = check_pair(qwen3_8b, head(tmp_path, arch="dflash", name="qwen3_8b_dflash", layers=(1, 20, 40)))
    assert any("reads target layers [1, 20, 40], but the target has only 36 layers" in e for e in v.errors)


@pytest.mark.parametrize("arch", ["eagle3", "dflash"])
def test_a_head_on_a_target_llama_cpp_cannot_feed_is_one_clear_error(tmp_path, arch):
    """llama.cpp 0.3.36 records no layer inputs for qwen2 (Qwen2.5): a head there would abort the
    process at its first decode, so the pair is refused before anything loads."""
    qwen2 = read_gguf(write_meta_gguf(tmp_path / "qwen2.5-7b.gguf", arch="qwen2", meta={
        "general.name": "Qwen2.5 7B", "general.basename": "Qwen2.5", "general.size_label": "7.6B",
        "qwen2.block_count": 28, "qwen2.embedding_length": 3584}))
    v = check_pair(qwen2, head(tmp_path, arch=arch, name=f"{arch}_qwen2.5_7b", layers=(2, 13, 24), width=3584))
    assert not v.ok
    assert [e for e in v.errors if "llama.cpp records no hidden states for qwen2 targets" in e]
    proc = specdec("check", "-t", qwen2.path, "-d", tmp_path / f"{arch}_qwen2.5_7b.gguf")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "llama.cpp records no hidden states for qwen2 targets" in proc.stdout + proc.stderr


def test_eagle3_needs_three_layers(tmp_path, qwen3_8b):
    v = check_pair(qwen3_8b, head(tmp_path, layers=(2, 18)))
    assert any("exactly 3 target layers" in e for e in v.errors)


def test_head_with_vocab_is_vocab_checked(tmp_path, target):
    toks = vocab_tokens("other")[0]
    h = head(tmp_path, arch="dflash", name="tiny_llama_dflash", layers=(1, 2), width=128, vocab=toks)
    v = check_pair(target, h)
    assert not by_name(v.checks)["token texts"].ok and not v.ok


def test_method_must_match_the_file(tmp_path, target, draft, qwen3_8b):
    v = check_pair(target, draft, method="eagle3")
    assert not v.ok and any("needs an eagle3 draft" in e and "plain model" in e for e in v.errors)
    h = head(tmp_path)
    v = check_pair(qwen3_8b, h, method="draft")
    assert not v.ok and any("use method eagle3" in e for e in v.errors)
    v = check_pair(h, qwen3_8b)
    assert not v.ok and any("the target is an eagle3 draft head" in e for e in v.errors)


def test_unknown_method(target, draft):
    with pytest.raises(ValueError):
        check_pair(target, draft, method="medusa")


def test_check_dataclass_and_verdict_dict():
    c = Check("x", True, "fine")
    v = Verdict(ok=True, checks=[c], errors=[], warnings=["w"])
    assert v.to_dict() == {"ok": True, "checks": [{"name": "x", "ok": True, "detail": "fine"}],
                           "errors": [], "warnings": ["w"]}


# --- memory: how rejected drafts are rolled back; MTP targets -------------------------------------

from specdec_cli.errors import UsageError  # noqa: E402
from specdec_cli.pairing.compat import check_memory, check_self  # noqa: E402
from tiny_memory_models import (  # noqa: E402,F401  (session fixtures, used by name)
    tiny_gemma3,
    tiny_gemma3_draft,
    tiny_mamba2,
    tiny_mamba2_draft,
    tiny_qwen35,
    tiny_qwen35_draft,
    tiny_qwen35_mtp,
)


def test_hybrid_pair_says_how_each_side_rolls_back(tiny_qwen35, tiny_qwen35_draft):
    v = check_pair(read_gguf(tiny_qwen35), read_gguf(tiny_qwen35_draft))
    assert v.ok and not v.errors, v.to_dict()
    memory = by_name(v.checks)["memory"]
    assert memory.ok
    assert memory.detail == ("target hybrid, rolled back with recurrent-state snapshots (drafts capped at 16 tokens); "
                             "draft hybrid, rolled back by checkpoint and restore")


def test_recurrent_pair_checkpoints_both(tiny_mamba2, tiny_mamba2_draft):
    v = check_pair(read_gguf(tiny_mamba2), read_gguf(tiny_mamba2_draft))
    assert v.ok and not v.errors, v.to_dict()
    memory = by_name(v.checks)["memory"]
    assert memory.ok and memory.detail == "target and draft recurrent, both rolled back by checkpoint and restore"


def test_mixed_and_plain_memories(tiny_qwen35, tiny_mamba2_draft, tiny_gemma3, tiny_gemma3_draft, target, draft):
    mixed = check_memory(read_gguf(tiny_qwen35), read_gguf(tiny_mamba2_draft))
    assert mixed.ok and mixed.detail == (
        "target hybrid, rolled back with recurrent-state snapshots (drafts capped at 16 tokens); "
        "draft recurrent, rolled back by checkpoint and restore")
    swa = check_memory(read_gguf(tiny_gemma3), read_gguf(tiny_gemma3_draft))
    assert swa.ok and swa.detail == "target and draft sliding window, both rolled back by dropping cache positions"
    plain = by_name(check_pair(target, draft).checks)["memory"]
    assert plain.ok and plain.detail == "target and draft attention, both rolled back by dropping cache positions"


def test_a_model_without_memory_is_an_error_in_one_line(tmp_path, draft, target):
    bert = read_gguf(write_meta_gguf(tmp_path / "bert.gguf", arch="bert", meta={
        "general.basename": "Tiny-Llama", "bert.block_count": 2}))
    assert bert.arch == "bert"
    v = check_pair(bert, draft)
    assert not v.ok
    assert not by_name(v.checks)["memory"].ok
    msg = next(e for e in v.errors if "no memory" in e)
    assert "\n" not in msg
    assert msg == ("the target (bert) keeps no memory between tokens (an encoder-only, embedding or diffusion "
                   "architecture): it cannot verify drafts")
    v = check_pair(target, bert)
    assert not v.ok and any(e.startswith("the draft (bert) keeps no memory") for e in v.errors)


def test_an_mtp_target_drafts_for_itself(tiny_qwen35_mtp):
    v = check_self(read_gguf(tiny_qwen35_mtp))
    assert v.ok and not v.errors and not v.warnings
    checks = by_name(v.checks)
    assert checks["method"].detail == "mtp: the target's own 1 nextn layer draft (specdec run --method mtp)"
    assert checks["memory"].detail == "target hybrid, rolled back with recurrent-state snapshots (drafts capped at 16 tokens)"
    json.dumps(v.to_dict())


def test_a_target_without_mtp_needs_a_draft(tiny_qwen35, target):
    for info in (read_gguf(tiny_qwen35), target):
        with pytest.raises(UsageError, match="no MTP \\(nextn\\) layers to draft with: pass --draft") as exc:
            check_self(info)
        assert exc.value.exit_code == 2 and exc.value.hint


def test_verdict_table_for_a_target_alone(tiny_qwen35_mtp, monkeypatch):
    import io

    from rich.console import Console

    from specdec_cli.commands import views

    buf = io.StringIO()
    monkeypatch.setattr(views, "out", Console(file=buf, width=200, highlight=False, no_color=True))
    info = read_gguf(tiny_qwen35_mtp)
    views.verdict_table(check_self(info), info)
    text = buf.getvalue()
    assert f"{info.path.name}: can draft for itself (specdec run --method mtp)" in text
    assert "recurrent-state snapshots" in text


def test_a_head_on_a_checkpointed_target_is_an_error(tmp_path, tiny_mamba2):
    mamba = read_gguf(tiny_mamba2)
    v = check_pair(mamba, head(tmp_path, name="eagle3_tiny_mamba2", width=mamba.n_embd, layers=(0, 1, 2)))
    assert not v.ok and not by_name(v.checks)["memory"].ok
    assert ("an eagle3 draft head reads the target's hidden states, which specdec does not keep in step across "
            "a checkpoint restore of its recurrent memory: use a draft model, ngram or mtp with this target") in v.errors

"""EAGLE-3, DFlash and DSpark drafting on synthetic heads laid out as llama.cpp loads them.

What these check: each method loads and drafts; greedy output equals the target alone (many
prompts, draft lengths, thresholds, and a prefill split across batches); the stats are
reported; mismatched heads are refused with one line. Step-for-step agreement with llama.cpp's
own implementation is scripts/checks/spec_conformance.py (it needs a native build, so not here).
"""

from __future__ import annotations

import json

import pytest

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
from specdec_cli.errors import UsageError
from specdec_cli.models.meta import read_gguf
from test_cli import EXACT, assert_one_line_error, specdec
from tiny_models import HEAD_PROMPTS as PROMPTS
from tiny_models import write_dflash_gguf, write_eagle3_gguf

EXACT_OPTS = EngineOptions(n_ctx=512, flash_attn="off", cache_type_k="f32", cache_type_v="f32")


@pytest.fixture(scope="module")
def heads(head_llama_target, head_qwen3_target, tiny_eagle3, tiny_dflash, tiny_dspark, tiny_dspark_bonus):
    """method name -> (target, head, method)."""
    return {
        "eagle3": (head_llama_target, tiny_eagle3, "eagle3"),
        "dflash": (head_qwen3_target, tiny_dflash, "dflash"),
        "dspark": (head_qwen3_target, tiny_dspark, "dspark"),
        "dspark-bonus": (head_qwen3_target, tiny_dspark_bonus, "dspark"),
    }


def test_method_detected_from_the_gguf(tiny_eagle3, tiny_dflash, tiny_dspark, head_qwen3_target):
    assert read_gguf(tiny_eagle3).spec_method == "eagle3"
    assert read_gguf(tiny_dflash).spec_method == "dflash"
    assert read_gguf(tiny_dspark).spec_method == "dspark"  # the Markov head decides
    assert read_gguf(head_qwen3_target).spec_method is None


@pytest.mark.parametrize("name", ["eagle3", "dflash", "dspark", "dspark-bonus"])
def test_greedy_output_is_the_targets(heads, name):
    target, head, method = heads[name]
    lengths = {"eagle3": (1, 3, 6), "dflash": (2, 4, 6), "dspark": (2, 4, 7), "dspark-bonus": (2, 6)}[name]
    engine = Engine(target, head, options=EXACT_OPTS, draft=DraftOptions(draft_max=max(lengths), p_min=0.0),
                    method=method)
    try:
        drafted = accepted = 0
        for prompt in PROMPTS:
            tokens = engine.tokenize_prompt(prompt)
            alone = engine.generate(tokens, GenOptions(max_tokens=48), use_draft=False).tokens
            for n in lengths:
                for p_min in (0.0, 0.3):
                    engine.set_draft(draft_max=n, p_min=p_min)
                    res = engine.generate(tokens, GenOptions(max_tokens=48))
                    assert res.tokens == alone, (prompt, n, p_min)
                    assert all(d <= n for d, _ in res.stats.steps)
                    drafted += res.stats.n_drafted
                    accepted += res.stats.n_accepted
        assert drafted > 0  # each method proposes something
        if name != "dspark-bonus":
            assert accepted > 0  # and the fixtures make some of it right, so acceptance is exercised
    finally:
        engine.close()


@pytest.mark.parametrize("name", ["eagle3", "dflash", "dspark"])
def test_prefill_split_across_batches(heads, name):
    """A prompt longer than n_batch reaches the head chunk by chunk (EAGLE-3 bridges the chunks)."""
    target, head, method = heads[name]
    long_prompt = " ".join(PROMPTS * 3)
    small = EngineOptions(n_ctx=512, n_batch=16, flash_attn="off", cache_type_k="f32", cache_type_v="f32")
    outs = []
    for opts in (small, EXACT_OPTS):
        engine = Engine(target, head, options=opts, draft=DraftOptions(draft_max=4, p_min=0.0), method=method)
        try:
            tokens = engine.tokenize_prompt(long_prompt)
            assert len(tokens) > 3 * 16
            res = engine.generate(tokens, GenOptions(max_tokens=40))
            assert res.tokens == engine.generate(tokens, GenOptions(max_tokens=40), use_draft=False).tokens
            outs.append(res.stats.steps)
        finally:
            engine.close()
    assert outs[0] == outs[1]  # the same drafts whether the prompt came in one batch or many


def test_block_heads_clamp_draft_length(heads):
    notes = []
    target, head, _ = heads["dflash"]
    engine = Engine(target, head, options=EXACT_OPTS, draft=DraftOptions(draft_max=9, p_min=0.0), method="dflash",
                    warn=notes.append)
    try:
        assert engine.drafters["dflash"].n_max == 6  # block_size 7: the anchor slot is not a draft
        assert any("using 6" in n for n in notes)
        res = engine.generate(engine.tokenize_prompt("hello world"), GenOptions(max_tokens=16))
        assert max(d for d, _ in res.stats.steps) <= 6
    finally:
        engine.close()
    target, head, _ = heads["dspark"]
    engine = Engine(target, head, options=EXACT_OPTS, draft=DraftOptions(draft_max=9, p_min=0.0), method="dspark")
    try:
        assert engine.drafters["dspark"].n_max == 7  # anchor-first: every slot of the block drafts
    finally:
        engine.close()


def test_dspark_confidence_threshold(heads, tiny_dspark_no_confidence, head_qwen3_target):
    """p-min cuts DSpark drafts by its confidence head, and needs one."""
    target, head, _ = heads["dspark"]
    engine = Engine(target, head, options=EXACT_OPTS, draft=DraftOptions(draft_max=7, p_min=0.0), method="dspark")
    try:
        tokens = engine.tokenize_prompt("the cat and the dog")
        full = engine.generate(tokens, GenOptions(max_tokens=32)).stats.n_drafted
        engine.set_draft(draft_max=7, p_min=0.99)
        cut = engine.generate(tokens, GenOptions(max_tokens=32)).stats.n_drafted
        assert cut < full
    finally:
        engine.close()
    with pytest.raises(UsageError, match="no confidence head"):
        Engine(head_qwen3_target, tiny_dspark_no_confidence, options=EXACT_OPTS,
               draft=DraftOptions(draft_max=4, p_min=0.5), method="dspark")


@pytest.mark.parametrize("name", ["eagle3", "dflash", "dspark"])
def test_run_reports_head_stats(heads, name):
    target, head, method = heads[name]
    proc = specdec("run", "-t", target, "-d", head, "-n", "24", "--json", *EXACT, "hello world this is the")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["method"] == method
    assert out["n_drafted"] > 0 and out["acceptance_rate"] is not None
    assert out["tokens_per_pass"] >= 1.0
    plain = json.loads(specdec("run", "-t", target, "--no-draft", "-n", "24", "--json", *EXACT,
                               "hello world this is the").stdout)
    assert out["tokens"] == plain["tokens"]
    text = specdec("run", "-t", target, "-d", head, "-n", "8", *EXACT, "hello")
    assert text.returncode == 0 and "drafted" in text.stderr  # the stderr summary line


def test_bench_with_a_head(heads, tmp_path):
    target, head, _ = heads["dflash"]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello world"}\n{"prompt": "the cat and the dog"}\n')
    out = tmp_path / "bench.json"
    proc = specdec("bench", "-t", target, "-d", head, "--prompts", prompts, "--no-chat", "-n", "24",
                   "--draft-max", "2,4", "--p-min", "0", *EXACT[:6], "--json", out,
                   env={"XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert {s["config"]["method"] for s in data["samples"]} == {None, "ngram", "dflash"}
    assert "dflash, draft-max 4" in proc.stdout
    for s in data["samples"]:
        if s["config"]["use_draft"]:
            assert s["divergence"] is None


def test_mismatched_heads_are_refused(tmp_path, head_llama_target, head_qwen3_target, tiny_dflash, tiny_dspark):
    narrow = write_eagle3_gguf(tmp_path / "eagle3-64.gguf", n_embd=64, n_embd_target=64)
    proc = specdec("run", "-t", head_llama_target, "-d", narrow, "hi")
    assert_one_line_error(proc, 1, "target hidden size 64", "128")
    deep = write_dflash_gguf(tmp_path / "dflash-deep.gguf", target_layers=(0, 2, 4))
    assert_one_line_error(specdec("run", "-t", head_qwen3_target, "-d", deep, "hi"), 1, "[0, 2, 4]", "4 layers")
    # a head made for another base model
    assert_one_line_error(specdec("run", "-t", head_llama_target, "-d", tiny_dflash, "hi"), 1, "made for")
    # a forced method the head is not
    assert_one_line_error(specdec("run", "-t", head_qwen3_target, "-d", tiny_dspark, "--method", "eagle3", "hi"),
                          1, "needs an eagle3 draft")
    assert_one_line_error(specdec("run", "-t", head_qwen3_target, "--method", "dflash", "hi"), 2,
                          "--method dflash", "--draft")
    # a head is not a target, nor a classic draft
    assert_one_line_error(specdec("run", "-t", tiny_dflash, "-d", tiny_dflash, "hi"), 1, "not a model")
    assert_one_line_error(specdec("run", "-t", head_qwen3_target, "-d", tiny_dflash, "--method", "draft", "hi"),
                          1, "use method dflash")


def test_registry_pair_resolves_to_the_head(tmp_path, head_qwen3_target, tiny_dspark):
    """`--pair dspark-qwen3-8b` runs the DSpark drafter once the pair's files are local."""
    reg = tmp_path / "pairs.toml"
    reg.write_text(
        '[[pair]]\nname = "dspark-qwen3-8b"\nmethod = "dspark"\ntarget_family = "any"\ntarget_size = "any"\n'
        f'target_path = "{head_qwen3_target}"\ndraft_path = "{tiny_dspark}"\n'
    )
    proc = specdec("run", "--registry", reg, "--pair", "dspark-qwen3-8b", "-n", "16", "--json", *EXACT, "hello world")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["method"] == "dspark" and out["draft"] == str(tiny_dspark) and out["n_drafted"] > 0

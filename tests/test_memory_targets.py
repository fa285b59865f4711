"""Speculation on targets whose memory is not a plain KV cache, and drafting with MTP.

What these check, on the fixtures of ``tiny_memory_models.py`` (random f32 weights laid out as
llama.cpp loads Mamba 2, Qwen3.5 and Gemma 3; flash attention off and an f32 KV cache, where
batched and single-token logits agree to ~5e-4):

- the rollback each memory gets, as llama.cpp's own probe finds it: checkpoints for Mamba 2,
  recurrent-state snapshots for Qwen3.5 (checkpoints when asked), ``seq_rm`` for Gemma 3;
- greedy output with a draft model, with n-gram lookup and with MTP equals the target alone,
  over many prompts and draft lengths, with fully accepted, partly accepted and fully rejected
  passes all occurring, and a checkpoint restored after every partial acceptance and never
  after a full one;
- exact sampling at temperature 1 still follows the target's distribution on a hybrid target
  (chi-square, as tests/test_exact_sampling.py), with snapshots and with checkpoints;
- the refusals: heads on a checkpoint-only target, MTP on a target without nextn layers.
"""

from __future__ import annotations

import pytest

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
from specdec_cli.engine.policy.costmodel import CostModel
from specdec_cli.errors import UsageError
from specdec_cli.models.memory_kinds import SNAPSHOT_CAP, Rollback
from test_cli import assert_one_line_error, specdec
from tiny_memory_models import MEMORY_PROMPTS, write_qwen35_gguf

EXACT = dict(flash_attn="off", cache_type_k="f32", cache_type_v="f32")
N_TOKENS = 40
LENGTHS = (1, 3, 6)
# a GPU-like curve (a pass costs the same for any size up to 64 tokens) and free drafting, so
# auto drafts with MTP whenever it has any chance; and the 2-core CPU curve, where it must not
FLAT = CostModel({1: 0.02, 2: 0.02, 4: 0.02, 16: 0.02, 64: 0.021}, {"mtp": 0.0005}, frozen=True)
CPU = CostModel({1: 0.0385, 2: 0.081, 4: 0.112, 16: 0.323, 33: 0.527}, {"mtp": 0.004}, frozen=True)


def _engine(target, draft=None, *, method=None, draft_max=6, snapshots=True, **kw) -> Engine:
    return Engine(target, draft, options=EngineOptions(n_ctx=256, snapshots=snapshots, **EXACT),
                  draft=DraftOptions(draft_max=draft_max, p_min=0.0), method=method, **kw)


def _check_lossless(engine: Engine, lengths=LENGTHS, method=None) -> dict:
    """Greedy output equals the target alone for every prompt and draft length; returns counts
    of full, partial and zero acceptances, restores and checkpoints over all runs."""
    seen = dict(full=0, partial=0, zero=0, restores=0, checkpoints=0, partial_passes=0, drafted_passes=0)
    for prompt in MEMORY_PROMPTS:
        tokens = engine.tokenize_prompt(prompt)
        alone = engine.generate(tokens, GenOptions(max_tokens=N_TOKENS), use_draft=False)
        assert alone.stats.n_checkpoints == alone.stats.n_restores == 0  # the baseline pays nothing
        for n in lengths:
            engine.set_draft(draft_max=n, p_min=0.0)
            res = engine.generate(tokens, GenOptions(max_tokens=N_TOKENS), method=method)
            assert res.tokens == alone.tokens, (prompt, n)
            st = res.stats
            for i, (d, a) in enumerate(st.steps):
                if d:
                    seen["drafted_passes"] += 1
                    seen["full" if a == d else "zero" if a == 0 else "partial"] += 1
                    seen["partial_passes"] += a < d
                    assert (i in st.restored_steps) == (a < d and st.rollback == "checkpoint"), (i, d, a)
                else:
                    assert i not in st.restored_steps
            seen["restores"] += st.n_restores
            seen["checkpoints"] += st.n_checkpoints
            assert st.n_restores == len(st.restored_steps)
    return seen


def _all_paths(seen: dict) -> None:
    assert seen["full"] and seen["partial"] and seen["zero"], seen


# --- the rollback each memory gets ----------------------------------------------------------------
@pytest.mark.parametrize("fixture,snapshots,expected", [
    ("tiny_mamba2", True, Rollback.CHECKPOINT),  # no bounded rollback for Mamba 2 in llama.cpp
    ("tiny_qwen35", True, Rollback.SNAPSHOTS),
    ("tiny_qwen35", False, Rollback.CHECKPOINT),
    ("tiny_gemma3", True, Rollback.PARTIAL),
    ("tiny_target", True, Rollback.PARTIAL),
])
def test_rollback_probed_like_llama_cpp(request, fixture, snapshots, expected):
    eng = _engine(request.getfixturevalue(fixture), method="ngram", snapshots=snapshots)
    try:
        assert eng.target_rollback.kind is expected
        if expected is Rollback.SNAPSHOTS:
            assert eng.target_ctx.n_rs_seq == 6  # one snapshot per drafted token
    finally:
        eng.close()


def test_target_alone_asks_for_no_snapshots(tiny_qwen35):
    eng = _engine(tiny_qwen35)
    try:
        assert eng.method is None and eng.target_ctx.n_rs_seq == 0
    finally:
        eng.close()


# --- greedy: the target's own output, every rollback path taken --------------------------------------
@pytest.mark.parametrize("target,draft,snapshots,target_kind,draft_kind", [
    ("tiny_mamba2", "tiny_mamba2_draft", True, "checkpoint", "checkpoint"),
    ("tiny_qwen35", "tiny_qwen35_draft", True, "snapshots", "checkpoint"),
    ("tiny_qwen35", "tiny_qwen35_draft", False, "checkpoint", "checkpoint"),
    ("tiny_gemma3", "tiny_gemma3_draft", True, "partial", "partial"),
], ids=["mamba2", "qwen35-snapshots", "qwen35-checkpoints", "gemma3-sliding-window"])
def test_draft_model_output_is_the_targets(request, target, draft, snapshots, target_kind, draft_kind):
    eng = _engine(request.getfixturevalue(target), request.getfixturevalue(draft), method="draft",
                  snapshots=snapshots)
    try:
        assert eng.target_rollback.kind == target_kind
        assert eng.drafters["draft"].rollback.kind == draft_kind
        seen = _check_lossless(eng)
    finally:
        eng.close()
    _all_paths(seen)
    if target_kind == "checkpoint":
        assert seen["restores"] == seen["partial_passes"] > 0  # a restore per partial acceptance
        assert seen["checkpoints"] == seen["drafted_passes"]  # a checkpoint per drafted pass, none otherwise


@pytest.mark.parametrize("target,snapshots", [
    ("tiny_mamba2", True), ("tiny_qwen35", True), ("tiny_qwen35", False), ("tiny_gemma3", True),
], ids=["mamba2", "qwen35-snapshots", "qwen35-checkpoints", "gemma3-sliding-window"])
def test_ngram_output_is_the_targets(request, target, snapshots):
    eng = _engine(request.getfixturevalue(target), method="ngram", snapshots=snapshots, draft_max=8)
    try:
        seen = _check_lossless(eng, lengths=(2, 8))
    finally:
        eng.close()
    assert seen["drafted_passes"] > 20
    assert seen["full"] and (seen["partial"] or seen["zero"])


def test_sliding_window_rolls_back_past_its_window(tiny_gemma3, tiny_gemma3_draft):
    """The window is 8 tokens and, with 32-token batches, the window layers keep 256 cells
    (n_swa + n_ubatch, padded), which llama.cpp reuses once they fall out of the window:
    generations of 300 tokens with 6-token drafts roll back across many reuses."""
    eng = Engine(tiny_gemma3, tiny_gemma3_draft, method="draft",
                 options=EngineOptions(n_ctx=512, n_batch=32, **EXACT), draft=DraftOptions(draft_max=6, p_min=0.0))
    try:
        assert eng.target_model.n_swa == 8
        for prompt in MEMORY_PROMPTS[:3]:
            tokens = eng.tokenize_prompt(prompt)
            alone = eng.generate(tokens, GenOptions(max_tokens=300), use_draft=False).tokens
            res = eng.generate(tokens, GenOptions(max_tokens=300))
            assert res.tokens == alone, prompt
            assert res.stats.n_prompt_reused == 0  # the window let the old prompt's cells go: read again
            assert len(tokens) + len(alone) > 256
            assert any(0 < a < d for d, a in res.stats.steps)
    finally:
        eng.close()


def test_snapshots_bound_the_draft_length(tiny_qwen35):
    eng = Engine(tiny_qwen35, options=EngineOptions(n_ctx=256, **EXACT), method="ngram",
                 draft=DraftOptions(draft_max=SNAPSHOT_CAP + 8, p_min=0.0))
    try:
        assert eng.target_ctx.n_rs_seq == SNAPSHOT_CAP
        tokens = eng.tokenize_prompt(" ".join(MEMORY_PROMPTS[1:3] * 4))
        res = eng.generate(tokens, GenOptions(max_tokens=60))
        assert max(d for d, _ in res.stats.steps) <= SNAPSHOT_CAP
        assert res.tokens == eng.generate(tokens, GenOptions(max_tokens=60), use_draft=False).tokens
    finally:
        eng.close()


def test_policy_weighs_what_a_rejection_costs_a_checkpointed_target():
    """On the 2-core CPU curve, 90%-likely drafts pay on an attention target (k=5) but not on a
    checkpointed one, where a rejection costs a state copy back and a replay pass; near-certain
    ones still do."""
    from specdec_cli.engine.policy.decisions import best_length

    cpu = CostModel({1: 0.0385, 2: 0.081, 4: 0.112, 16: 0.323, 33: 0.527}, frozen=True)
    plain = {a: best_length([a] * 16, cpu).k for a in (0.9, 0.99)}
    cpu.checkpoint = {"save": 0.001, "restore": 0.001}
    checked = {a: best_length([a] * 16, cpu).k for a in (0.9, 0.99)}
    assert plain[0.9] >= 3 and checked[0.9] == 0
    assert checked[0.99] >= 8


# --- MTP ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("snapshots", [True, False], ids=["snapshots", "checkpoints"])
def test_mtp_output_is_the_targets(tiny_qwen35_mtp, snapshots):
    eng = _engine(tiny_qwen35_mtp, method="mtp", snapshots=snapshots)
    try:
        assert eng.target_model.n_nextn == 1 and eng.target_model.mtp_loaded
        seen = _check_lossless(eng)
    finally:
        eng.close()
    _all_paths(seen)
    if not snapshots:
        assert seen["restores"] == seen["partial_passes"] > 0


def test_mtp_chained_heads(tiny_step35_mtp):
    """Two trained heads: drafts are at most two tokens (llama.cpp clamps n_max to the heads)."""
    eng = _engine(tiny_step35_mtp, method="mtp", draft_max=6)
    try:
        mtp = eng.drafters["mtp"]
        assert mtp.heads == 2 and mtp.chain and mtp.n_max == 2
        seen = _check_lossless(eng, lengths=(2, 5))
    finally:
        eng.close()
    _all_paths(seen)


def test_mtp_is_not_loaded_unless_asked(tiny_qwen35_mtp):
    eng = _engine(tiny_qwen35_mtp, method="ngram")
    try:
        assert eng.target_model.n_nextn == 1 and not eng.target_model.mtp_loaded
        assert "mtp" not in eng.drafters
    finally:
        eng.close()


def test_mtp_needs_nextn_layers(tiny_qwen35):
    with pytest.raises(UsageError, match="no MTP"):
        _engine(tiny_qwen35, method="mtp")


def test_auto_drafts_with_mtp_where_it_pays(tiny_qwen35_mtp):
    """Under a flat (GPU-like) curve auto uses the MTP layers, and its output is the target's; under
    the 2-core CPU curve it keeps them idle: no MTP step, no catch-up pass."""
    eng = _engine(tiny_qwen35_mtp, method="auto", mtp=True, draft_max=16)
    try:
        assert isinstance(eng.drafters["auto"].model, type(eng.drafters["mtp"]))
        for costs, uses in ((FLAT, True), (CPU, False)):
            eng.set_costs(costs)
            eng.drafters["auto"].reset()
            used = 0
            for prompt in MEMORY_PROMPTS:
                tokens = eng.tokenize_prompt(prompt)
                alone = eng.generate(tokens, GenOptions(max_tokens=N_TOKENS), use_draft=False).tokens
                res = eng.generate(tokens, GenOptions(max_tokens=N_TOKENS))
                assert res.tokens == alone, prompt
                used += res.stats.steps_by_drafter.get("mtp", 0)
            assert (used > 0) is uses, (costs.source, used)
    finally:
        eng.close()


# --- refusals -----------------------------------------------------------------------------------------
def test_heads_refused_on_a_checkpoint_only_target(tiny_mamba2, tiny_eagle3):
    with pytest.raises(UsageError, match="checkpoint restore"):
        _engine(tiny_mamba2, tiny_eagle3, method="eagle3")


def test_cli_warns_when_a_forced_draft_exceeds_the_snapshots(tiny_qwen35):
    proc = specdec("run", "-t", tiny_qwen35, "--method", "ngram", "--draft-max", "20", "-n", "4", "hello")
    assert proc.returncode == 0, proc.stderr
    assert f"at most {SNAPSHOT_CAP} drafted tokens" in proc.stderr


def test_cli_mtp_on_a_target_without_nextn_is_one_line(tiny_qwen35):
    proc = specdec("run", "-t", tiny_qwen35, "--method", "mtp", "-n", "4", "hello")
    assert_one_line_error(proc, 2, "MTP")


# --- sampling: the exact rule still samples the target on a hybrid target ----------------------------
@pytest.fixture(scope="module")
def qwen35_sharp(tmp_path_factory):
    """A hybrid target with sharper logits than tiny_qwen35 (output x16), so that at temperature 1
    the law of the first two tokens has enough likely outcomes to test, and a draft with its own
    weights and the output projection scaled by 0.75 (q = p at temperature 4/3)."""
    from tiny_memory_models import QWEN35_EMBD

    d = tmp_path_factory.mktemp("q35sharp")
    target = write_qwen35_gguf(d / "tiny-qwen35-sharp-f32.gguf", embd_scale=QWEN35_EMBD, output_scale=16.0)
    draft = write_qwen35_gguf(d / "tiny-qwen35-close-f32.gguf", embd_scale=QWEN35_EMBD, output_scale=12.0,
                              name="tiny-qwen35-close")
    return target, draft


@pytest.mark.parametrize("snapshots", [True, False], ids=["snapshots", "checkpoints"])
def test_exact_sampling_on_a_hybrid_target(qwen35_sharp, snapshots):
    from test_exact_sampling import ALPHA, N_SEEDS, PROMPT, chi_square, exact_sampled, sample_many, target_laws

    eng = Engine(*qwen35_sharp, method="draft",
                 options=EngineOptions(n_ctx=64, threads=1, snapshots=snapshots, **EXACT),
                 draft=DraftOptions(draft_max=3, p_min=0.0))
    try:
        prompt = eng.tokenize_prompt(PROMPT)
        law1, law2 = target_laws(eng, prompt)
        firsts, pairs, rate = sample_many(eng, prompt, exact_sampled)
    finally:
        eng.close()
    t1 = chi_square(firsts, law1, N_SEEDS)
    t2 = chi_square(pairs, law2, N_SEEDS)
    print(f"\nqwen35 {'snapshots' if snapshots else 'checkpoints'}: first chi2={t1[0]:.1f} df={t1[1]} "
          f"p={t1[2]:.4g}; pair chi2={t2[0]:.1f} df={t2[1]} p={t2[2]:.4g}; acceptance {rate:.3f}")
    assert t1[1] >= 20 and t2[1] >= 20
    assert 0.2 < rate < 0.98  # both branches of the rule ran, so rollbacks happened
    assert t1[2] >= ALPHA and t2[2] >= ALPHA

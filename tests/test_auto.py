"""--method auto: the cost model, the draft-length policy, the suffix index, and losslessness."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
from specdec_cli.engine.drafters import suffix
from specdec_cli.engine.drafters.suffix import SuffixIndex
from specdec_cli.engine.policy import cost_cache, costmodel
from specdec_cli.engine.policy.costmodel import CostModel
from specdec_cli.engine.policy.decisions import Calibrator, best_length, extension_pays
from specdec_cli.engine.verify.verifiers import SamplingParams
from test_exact_sampling import EOG, chi_square

EXACT = dict(flash_attn="off", cache_type_k="f32", cache_type_v="f32")
STEP = 0.0385  # one decode step of the 1.5B target on 2 CPU cores, seconds
# measured on 2 CPU cores (shared/notes/cpu-costs.md): a pass over b tokens, in decode steps
CPU_STEPS = {1: 1.0, 2: 2.1, 4: 2.9, 5: 3.6, 8: 6.2, 17: 8.7, 33: 13.7}


def cpu_like(draft_steps: float = 0.63) -> CostModel:
    return CostModel({b: s * STEP for b, s in CPU_STEPS.items()}, {"draft": draft_steps * STEP}, frozen=True)


def gpu_like(draft_steps: float = 0.08) -> CostModel:
    """A verify pass that costs one step up to 33 tokens, as on a GPU."""
    return CostModel({1: STEP, 33: STEP * 1.05, 65: STEP * 2.0}, {"draft": draft_steps * STEP}, frozen=True)


# --- the cost model -----------------------------------------------------------------------------
def test_cost_curve_interpolates_and_extends():
    c = CostModel({1: 1.0, 4: 4.0, 8: 6.0})
    assert c.pass_seconds(2) == pytest.approx(2.0)
    assert c.pass_seconds(6) == pytest.approx(5.0)
    assert c.pass_seconds(16) == pytest.approx(10.0)  # the last segment's slope, 0.5 per token
    c.observe_pass(2, 3.0)
    assert 2.0 < c.pass_seconds(2) <= 3.0  # smoothed, not replaced
    c.observe_pass(4, 1000.0)
    assert c.pass_seconds(4) < 4.0 * 1.3  # a single stall cannot swing the curve


def test_a_pass_runs_at_a_larger_size_where_the_curve_says_it_is_cheaper():
    """On an AVX-512 CPU llama.cpp's matmuls take the batch in tiles of 16 rows: a pass of 16
    tokens cost 8.5 steps here, one of 15 cost 10.3. A pass of 9 to 15 tokens then runs at 16
    (filler tokens) and is priced as that; sizes a larger one does not undercut run as they are."""
    saw = CostModel({1: 1.0, 4: 3.2, 8: 7.0, 12: 10.0, 16: 7.5, 32: 14.0})
    assert saw.pass_size(8) == 8 and saw.pass_size(16) == 16 and saw.pass_size(20) == 20
    assert [saw.pass_size(b) for b in range(9, 16)] == [16] * 7
    assert saw.pass_seconds(12) == pytest.approx(7.5)
    est = [saw.pass_seconds(b) for b in range(1, 40)]
    assert est == sorted(est)  # more tokens never look cheaper than fewer
    for flat in (gpu_like(), cpu_like()):  # a smooth curve: nothing is padded
        assert all(flat.pass_size(b) == b for b in range(1, 70))
    learned = CostModel({1: 1.0, 4: 3.2, 8: 7.0, 16: 7.5})
    assert learned.pass_size(15) == 15  # interpolated, 15 looks cheaper than 16
    learned.observe_pass(15, 10.0)  # run once, it is not
    assert learned.pass_size(15) == learned.pass_size(13) == 16


def test_the_curve_follows_the_decode_step_as_the_context_deepens():
    """Sizes drafted at different depths must not mix: a pass costs a steady multiple of a step."""
    c = CostModel({1: 1.0, 2: 1.7, 4: 3.0, 16: 9.5})
    for _ in range(30):
        c.observe_pass(1, 1.5)  # deeper in the context: steps cost half as much again
    assert c.pass_seconds(1) == pytest.approx(1.5, rel=0.01)
    assert c.pass_seconds(16) / c.pass_seconds(1) == pytest.approx(9.5)
    c.observe_pass(2, 1.7 * 1.5)  # a 2-token pass at that depth agrees: nothing moves
    assert c.pass_seconds(2) / c.pass_seconds(1) == pytest.approx(1.7, rel=1e-3)
    c.observe_pass(1, 100.0)  # a stalled step moves the curve by a tenth at most
    assert c.pass_seconds(1) < 1.5 * 1.11


def test_frozen_model_ignores_measurements():
    c = cpu_like()
    c.observe_pass(1, 10.0)
    c.observe_draft("draft", 1, 10.0)
    assert c.pass_seconds(1) == pytest.approx(STEP)
    assert c.draft_seconds("draft") == pytest.approx(0.63 * STEP)


def test_cost_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_COST_CACHE", str(tmp_path / "c.json"))
    c = CostModel({1: 0.04, 2: 0.08}, {"draft": 0.02})
    cost_cache.save_cached("k", c)
    got = cost_cache.load_cached("k")
    assert got is not None and got.source == "cached" and got.quiet and got.samples == (1, 1)
    assert got.pass_seconds(2) == pytest.approx(0.08) and got.draft_seconds("draft") == pytest.approx(0.02)
    assert cost_cache.load_cached("other") is None


@pytest.mark.parametrize("content", [
    b"{not json", b"\xff\xfe\x00garbage", b'{"version": 99, "entries": {}}',
    b'{"version": 1, "entries": {"k": {"pass_ms": {"1": -5}}}}', b'{"version": 2, "entries": {"k": 3}}',
    b'{"version": 2, "entries": {"k": {"samples": [{"at": 0, "busy": 0, "step_ms": 5, "pass_steps": {"1": -1},'
    b' "draft_steps": {}}]}}}', b'{"version": 2, "entries": {"k": {"samples": []}}}', b'[1, 2]', b"",
])
def test_corrupt_cost_cache_is_a_note_and_a_recalibration(tmp_path, monkeypatch, content):
    path = tmp_path / "c.json"
    path.write_bytes(content)
    monkeypatch.setenv("SPECDEC_COST_CACHE", str(path))
    notes: list[str] = []
    assert cost_cache.load_cached("k", notes.append) is None
    assert notes and "calibrating again" in notes[0]
    cost_cache.save_cached("k", CostModel({1: 0.05}), notes.append)  # rewritten whole
    assert json.loads(path.read_text())["entries"]["k"]["samples"][0]["step_ms"] == 50.0


def test_unwritable_cost_cache_is_only_a_note(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("SPECDEC_COST_CACHE", str(blocker / "sub" / "c.json"))
    notes: list[str] = []
    cost_cache.save_cached("k", CostModel({1: 0.05}), notes.append)
    assert notes and "cannot write" in notes[0]


def test_a_cached_curve_is_kept_only_while_passes_timed_now_agree():
    cached = CostModel({1: 0.10, 4: 0.25, 16: 0.75})
    assert costmodel.still_holds(cached, {1: 0.11, 4: 0.29})  # within the tolerance
    assert not costmodel.still_holds(cached, {1: 0.10, 4: 0.60})  # short passes dearer than the cache says
    assert not costmodel.still_holds(cached, {1: 0.10, 4: 0.15})  # ... or cheaper (busy when it was learned)
    assert costmodel.still_holds(cached, {1: 0.20, 4: 0.50})  # uniformly slower: every decision stands
    assert costmodel.still_holds(cached, {1: 0.10})  # a context too small to check a pass of 4
    assert costmodel.still_holds(cached, {1: 0.10, 4: 0.25, 16: 0.80})
    assert not costmodel.still_holds(cached, {1: 0.10, 4: 0.25, 16: 1.50})  # long passes went stale alone


def test_a_size_that_looks_dear_heals_from_the_few_passes_it_still_gets():
    """Stalls move a size's cost up a little; it is then drafted less, so the measurements that
    bring it back are few: they must weigh more than the stalls did."""
    c = CostModel({1: 1.0, 4: 3.0, 16: 9.0})
    for _ in range(5):
        c.observe_pass(16, 30.0)  # five stalls in a row
    stalled = c.pass_seconds(16)
    assert stalled < 9.0 * 1.3
    for _ in range(3):
        c.observe_pass(16, 9.0)  # three real passes
    assert c.pass_seconds(16) - 9.0 < (stalled - 9.0) / 2
    between = c.pass_seconds(8)
    c.observe_pass(8, 100.0)  # a new size's first pass, stalled: bounded by what its neighbours say
    assert c.pass_seconds(8) <= 1.5 * between + 1e-9


def test_a_stale_cached_curve_is_measured_again(tiny_target, tmp_path, monkeypatch):
    """A curve learned while short passes looked dear would keep auto from drafting for good."""
    monkeypatch.setenv("SPECDEC_COST_CACHE", str(tmp_path / "c.json"))
    notes: list[str] = []

    def engine(**kw):
        return Engine(tiny_target, None, options=EngineOptions(n_ctx=256, **EXACT, **kw),
                      draft=DraftOptions(draft_max=8), method="auto", warn=notes.append)

    eng = engine()
    key = eng._cost_key(eng.target_model.path, 0)
    # a 4-token pass at 10,000 steps; a draft token measured beside it at three steps
    cost_cache.save_cached(key, CostModel({1: 1e-4, 4: 1.0, 16: 2.0}, {"draft": 3e-4}))
    assert eng.ensure_costs().source == "calibrated"  # not "cached"
    assert not notes  # self-healing, so no note (run -q prints nothing but the text)
    assert eng.costs.pass_seconds(4) < 1.0
    # the draft keeps its cost in steps of the curve measured again (the machine moved both)
    assert eng.costs.draft_seconds("draft") == pytest.approx(3 * eng.costs.step_seconds())
    eng.close()
    many = engine(n_seq=4)
    assert many._cost_key(many.target_model.path, 0) != key  # many sequences per pass: a curve of their own
    many.close()


def test_a_curve_checked_within_the_hour_is_used_without_a_check(tiny_target, tmp_path, monkeypatch):
    """The check costs as long as a short answer takes: runs in a shell loop pay for it once."""
    monkeypatch.setenv("SPECDEC_COST_CACHE", str(tmp_path / "c.json"))
    monkeypatch.setattr(cost_cache.BusyMeter, "share", lambda self: 0.0)  # a quiet machine (``test_cost_cache``: a busy one)
    checks: list[int] = []
    real = costmodel.recheck
    monkeypatch.setattr(costmodel, "recheck", lambda *a: checks.append(1) or real(*a))

    def costs_of_a_run():
        eng = Engine(tiny_target, None, options=EngineOptions(n_ctx=256, **EXACT), method="auto")
        try:
            got = eng.ensure_costs()
            eng.save_costs()
            return got.source, got.checked_at
        finally:
            eng.close()

    source, first = costs_of_a_run()  # nothing cached: calibrated, and stamped
    assert source == "calibrated" and first is not None and not checks
    source, at = costs_of_a_run()
    assert source == "cached" and at == pytest.approx(first, abs=1) and not checks  # trusted as it is
    data = json.loads((tmp_path / "c.json").read_text())
    for entry in data["entries"].values():
        entry["samples"][-1]["at"] -= costmodel.RECHECK_AFTER_S + 1  # a day and a second ago
    (tmp_path / "c.json").write_text(json.dumps(data))
    source, at = costs_of_a_run()
    assert checks == [1] and at > first  # checked again, and stamped again
    assert not CostModel({1: 1.0}).checked_recently()  # never checked (an older cache): checked now
    many = Engine(tiny_target, None, options=EngineOptions(n_ctx=256, n_seq=2, **EXACT), method="auto")
    try:
        stamped = CostModel({1: 1e-3, 4: 3e-3, 16: 8e-3})
        stamped.checked_at = at
        cost_cache.save_cached(many._cost_key(many.target_model.path, 0), stamped)
        many.ensure_costs()
        assert checks == [1, 1]  # many sequences: a long run, whose curve is checked at every start
    finally:
        many.close()


def test_auto_leaves_a_draft_that_cannot_pay_unloaded_until_costs_say_it_could(
        tiny_target, tiny_draft, tmp_path, monkeypatch):
    """A draft model auto never asks costs its load and its cost check before the first token."""
    monkeypatch.setenv("SPECDEC_COST_CACHE", str(tmp_path / "c.json"))
    notes: list[str] = []

    def engine():
        return Engine(tiny_target, tiny_draft, options=EngineOptions(n_ctx=256, **EXACT),
                      draft=DraftOptions(draft_max=16, p_min=0.0), method="auto", note=notes.append)

    eng = engine()
    try:
        assert eng.draft_model is None  # nothing known yet: decided when the costs are
        slow = cpu_like(0.63)
        slow.checked_at = __import__("time").time()
        cost_cache.save_cached(eng._cost_key(eng.target_model.path, 0), slow)
    finally:
        eng.close()
    eng = engine()
    try:
        tokens = eng.tokenize_prompt(REPEATING[0])
        plain = eng.generate(tokens, GenOptions(max_tokens=32), use_draft=False)
        spec = eng.generate(tokens, GenOptions(max_tokens=32))
        assert eng.draft_model is None and eng.draft_left_out
        assert len(notes) == 1 and "is not loaded" in notes[0] and "0.63 of a target step" in notes[0]
        assert spec.tokens == plain.tokens and "draft" not in spec.stats.steps_by_drafter
        eng.set_costs(gpu_like(0.02))  # a curve on which it pays: loaded now, and drafting
        spec = eng.generate(tokens, GenOptions(max_tokens=32))
        assert eng.draft_model is not None and spec.tokens == plain.tokens
        assert len(notes) == 1
    finally:
        eng.close()
    eng = engine()
    try:
        got = eng.generate(eng.tokenize_prompt(REPEATING[1]), GenOptions(max_tokens=8), method="draft")
        assert eng.draft_model is not None and got.stats.method == "draft"  # asked for by name: loaded
    finally:
        eng.close()


# --- the policy ---------------------------------------------------------------------------------
def test_cpu_costs_refuse_the_draft_model_at_any_acceptance():
    c = cpu_like()
    assert best_length([0.999] * 32, c, c.draft_seconds("draft")).k == 0
    assert not extension_pays([], 0.999, 32, c, c.draft_seconds("draft"))


def test_cpu_costs_take_free_drafts_only_when_they_are_likely_kept():
    c = cpu_like()
    assert best_length([0.5] * 32, c).k == 0  # a 2-token pass costs 2.1 steps
    assert 3 <= best_length([0.9] * 32, c).k <= 8
    assert best_length([0.995] * 32, c).k == 32  # a long copy: long drafts are cheapest per token
    # acceptance that falls off after a few tokens: draft just those
    assert best_length([0.99] * 4 + [0.05] * 28, c).k == 4


def test_gpu_costs_choose_long_drafts_for_the_draft_model():
    c = gpu_like()
    d = c.draft_seconds("draft")
    assert best_length([0.8] * 32, c, d).k >= 6
    assert best_length([0.95] * 32, c, d).k >= 16
    assert extension_pays([0.8] * 4, 0.8, 32, c, d)
    assert not extension_pays([0.8] * 4, 0.01, 32, c, d)


def test_plain_decoding_when_nothing_beats_it():
    for c in (cpu_like(), gpu_like()):
        choice = best_length([0.0] * 8, c, 0.0)
        assert choice.k == 0 and choice.expected == 1.0
        assert best_length([], c).k == 0


def test_calibrator_learns_from_what_was_kept():
    cal = Calibrator()
    b = [("x",)] * 4
    assert cal.estimate(("x",), 0.9) == pytest.approx(0.9)
    for _ in range(40):
        cal.observe(b, [0.9] * 4, 0)  # the first token is always rejected
    assert cal.estimate(("x",), 0.9) < 0.15
    cal2 = Calibrator()
    cal2.observe([("a",), ("b",), ("c",)], [0.5] * 3, 1)
    # position 0 kept, position 1 rejected, position 2 never judged
    assert cal2.estimate(("a",), 0.5) > 0.5 > cal2.estimate(("b",), 0.5)
    assert cal2.estimate(("c",), 0.5) == pytest.approx(0.5)


def test_policy_decision_is_cheap():
    import time

    c = cpu_like()
    acc = [0.97] * 32
    t0 = time.perf_counter()
    for _ in range(200):
        best_length(acc, c)
    per = (time.perf_counter() - t0) / 200
    assert per < 0.02 * STEP * 5  # generous bound on a loaded CI machine; typically ~20 us


# --- the suffix index ---------------------------------------------------------------------------
def test_index_follows_the_longest_match():
    idx = SuffixIndex()
    seq = [1, 2, 3, 4, 5, 9, 2, 3, 4, 6, 7, 1, 2, 3, 4]
    idx.begin(seq)
    toks, shares, orders = idx.propose(seq, 3)
    assert toks == [5, 9, 2]  # "1 2 3 4" was followed by 5; "2 3 4" alone is ambiguous
    assert orders[0] == 4 and shares[0] == 1.0


def test_index_takes_the_most_frequent_continuation():
    idx = SuffixIndex()
    seq = [7, 1, 7, 1, 7, 2, 7, 1, 5, 7]
    idx.begin(seq)
    toks, shares, _ = idx.propose(seq, 1)
    assert toks == [1] and shares[0] == pytest.approx(3 / 4)


def test_index_grows_with_the_history():
    idx = SuffixIndex()
    hist = [1, 2, 3]
    idx.begin(hist)
    assert idx.propose(hist, 2)[0] == []
    hist += [9, 1, 2, 3]
    assert idx.propose(hist, 2)[0] == [9, 1]


def test_earlier_outputs_feed_the_index_but_not_their_own_prompt():
    idx = SuffixIndex()
    p1, p2 = [100, 101], [200, 201]
    idx.begin(p1)
    idx.propose(p1 + [5, 6, 7, 8, 9], 1)  # the first prompt's output: 5 6 7 8 9
    idx.begin(p2)
    assert idx.propose(p2 + [5, 6, 7], 2)[0] == [8, 9]  # found in the earlier output
    idx.begin(p1)  # the same prompt again (bench repeats): its own answer is not there
    assert idx.propose(p1 + [5, 6, 7], 2)[0] == []


def test_sequences_share_one_bounded_table_of_earlier_outputs(monkeypatch):
    """Every sequence of a batch or server draws on one table of the run's earlier outputs (it
    was copied per sequence, and grew to 4.6 KB per novel token each), which sees outputs that
    end while a sequence runs, and forgets the oldest past the limit."""
    monkeypatch.setattr(suffix, "SHARED_LIMIT", 40)
    pool = suffix.OutputPool()
    a, b = SuffixIndex(pool), SuffixIndex(pool)
    a.begin([100])
    b.begin([200])
    a.propose([100, 5, 6, 7, 8, 9], 1)
    a.finish()  # a's output ends while b runs
    assert b.propose([200, 5, 6, 7], 2)[0] == [8, 9]
    for i in range(10):  # 10 more outputs of 10 tokens: far past the limit
        pool.add((300 + i,), list(range(1000 + 10 * i, 1010 + 10 * i)))
    assert sum(len(o) for o in pool.outputs.values()) <= 40
    c = SuffixIndex(pool)
    c.begin([400])
    assert c.propose([400, 5, 6, 7], 2)[0] == []  # the oldest output is forgotten, in the table too
    assert c.propose([400, 1091, 1092], 2)[0] == [1093, 1094]  # the newest is there


# --- auto on the fixtures -----------------------------------------------------------------------
REPEATING = [
    "hello world this is the cat and the dog hello world this is the cat and",
    "one two three four five six one two three four five six one two three",
    "the and of to in is it that for on the and of to in is it that for",
    "a b c d e f g h a b c d e f g h a b c d",
    "we can see that one of the world we can see that one of the",
    "hello",
]


@pytest.fixture(scope="module")
def auto_engine(tiny_target, tiny_draft):
    eng = Engine(tiny_target, tiny_draft, options=EngineOptions(n_ctx=512, **EXACT),
                 draft=DraftOptions(draft_max=16, p_min=0.0), method="auto")
    yield eng
    eng.close()


@pytest.mark.parametrize("costs", ["cpu", "gpu", "measured"])
def test_auto_greedy_output_identical_to_target_alone(auto_engine, costs):
    eng = auto_engine
    if costs == "measured":
        eng._costs_ready = False
        eng.costs.adopt(CostModel())
        eng.ensure_costs()
        assert eng.costs.source in ("calibrated", "cached")
    else:
        eng.set_costs(cpu_like() if costs == "cpu" else gpu_like(0.02))
    split: Counter = Counter()
    mixed = 0
    for text in REPEATING:
        tokens = eng.tokenize_prompt(text)
        plain = eng.generate(tokens, GenOptions(max_tokens=64), use_draft=False)
        spec = eng.generate(tokens, GenOptions(max_tokens=64))
        assert spec.tokens == plain.tokens, text
        assert spec.stats.method == "auto" and spec.stats.n_generated == len(spec.tokens)
        split.update(spec.stats.steps_by_drafter)
        mixed += {"ngram", "draft"} <= set(spec.stats.steps_by_drafter)
        assert spec.cost_model is not None and spec.to_dict()["steps_by_drafter"] == spec.stats.steps_by_drafter
    if costs == "cpu":
        assert split["draft"] == 0  # the draft model cannot pay at CPU costs
    if costs == "gpu":
        assert split["draft"] > 0 and mixed > 0  # both drafters within one generation


def test_auto_without_a_draft_model_is_ngram_plus_plain(tiny_target):
    eng = Engine(tiny_target, None, options=EngineOptions(n_ctx=512, **EXACT), draft=DraftOptions(draft_max=16),
                 method="auto")
    try:
        eng.set_costs(gpu_like())
        for text in REPEATING:
            tokens = eng.tokenize_prompt(text)
            plain = eng.generate(tokens, GenOptions(max_tokens=48), use_draft=False)
            spec = eng.generate(tokens, GenOptions(max_tokens=48))
            assert spec.tokens == plain.tokens
            assert set(spec.stats.steps_by_drafter) <= {"ngram", "none"}
            assert "auto: " in spec.stats.summary() or spec.stats.n_target_passes == 0
    finally:
        eng.close()


def test_auto_at_temperature_samples_the_target_with_mixed_proposals(tiny_target, tmp_path):
    """Exact verification of mixed proposals: n-gram point masses and sampled draft tokens.

    The prompt ends in a long repeat, so the first pass takes the index's proposal; when the
    target rejects it, the next pass is the draft model's sampled proposal (GPU-like costs).
    The first two tokens must follow the target's own law either way."""
    from test_exact_sampling import SAMPLING, target_laws
    from tiny_models import TARGET_SHAPE, write_llama_gguf

    close = write_llama_gguf(tmp_path / "tiny-close-draft-f32.gguf", **TARGET_SHAPE, seed=1, output_scale=6.0,
                             name="tiny-close-draft")
    eng = Engine(tiny_target, close, options=EngineOptions(n_ctx=64, threads=1, **EXACT),
                 draft=DraftOptions(draft_max=1, p_min=0.0), method="auto")
    try:
        eng.set_costs(gpu_like(0.02))
        prompt = eng.tokenize_prompt("one two three four five six seven one two three four five six")
        n = 1500
        _first, pairs = target_laws(eng, prompt, n)
        seen: Counter = Counter()
        mixed = 0
        for seed in range(n):
            gen = GenOptions(max_tokens=3, sampling=SamplingParams(**SAMPLING, seed=seed), verify="exact")
            eng.drafters["auto"].reset()  # every seed starts from the same priors
            res = eng.generate(prompt, gen)
            two = tuple(res.tokens[:2]) if len(res.tokens) >= 2 else (EOG,) if not res.tokens else (res.tokens[0], EOG)
            seen[two if two[0] != EOG else (EOG,)] += 1
            mixed += {"ngram", "draft"} <= set(res.stats.steps_by_drafter)
        stat, df, p = chi_square(seen, pairs, n)
        assert mixed > n // 10, mixed
        assert p >= 0.001, f"chi2={stat:.1f} df={df} p={p:.3g}"
    finally:
        eng.close()


# --- the CLI ------------------------------------------------------------------------------------
def test_run_defaults_to_auto_and_reports_the_split(tiny_pair_dir):
    from test_cli import EXACT as CLI_EXACT
    from test_cli import specdec

    target = next(tiny_pair_dir.glob("tiny-target*.gguf"))
    proc = specdec("run", "-t", target, "-n", "24", "--json", *CLI_EXACT, "a b c d a b c d a b c")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["method"] == "auto" and out["draft_max"] == 32
    assert "auto: n-gram lookup and draft" in proc.stderr and "chosen per step" in proc.stderr
    assert "auto: " in proc.stderr.splitlines()[-1]  # the summary says how the passes were split
    assert set(out["steps_by_drafter"]) <= {"ngram", "draft", "none"}
    assert sum(out["steps_by_drafter"].values()) == out["n_target_passes"]
    assert sum(out["draft_lengths"].values()) == out["n_target_passes"]
    assert out["cost_model"]["pass_ms"]["1"] > 0
    plain = json.loads(specdec("run", "-t", target, "-n", "24", "--json", *CLI_EXACT, "--no-draft",
                               "a b c d a b c d a b c").stdout)
    assert plain["tokens"] == out["tokens"] and plain["method"] is None


def test_run_method_auto_explicit_and_bogus(tiny_target):
    from test_cli import EXACT as CLI_EXACT
    from test_cli import specdec

    ok = specdec("run", "-t", tiny_target, "-n", "8", *CLI_EXACT, "--method", "auto", "hello")
    assert ok.returncode == 0, ok.stderr
    bad = specdec("run", "-t", tiny_target, "-n", "8", "--method", "bogus", "hello")
    assert bad.returncode == 2 and "auto" in bad.stderr


def test_demo_explains_from_the_measured_costs():
    from specdec_cli.commands.demo import explain

    cpu = explain(cpu_like())
    assert "3.6 steps" in cpu and "cannot pay" in cpu and "0.63 steps" in cpu
    gpu = explain(gpu_like())
    assert "pays when most of its tokens are kept" in gpu


def test_calibrator_follows_a_change_of_workload():
    cal = Calibrator()
    b = [("x",)]
    for _ in range(2000):
        cal.observe(b, [0.9], 1)  # a long stretch where everything was kept
    for _ in range(40):
        cal.observe(b, [0.9], 0)  # then the workload changes: rejected every time
    assert cal.estimate(("x",), 0.9) < 0.5


# --- unsent offers: passes that sent no draft still teach the calibration -------------------------
from specdec_cli.engine.drafters import auto as auto_mod  # noqa: E402
from specdec_cli.engine.drafters.auto import AutoDrafter, UnsentOffers  # noqa: E402
from specdec_cli.engine.drafters.draft import Draft  # noqa: E402
from specdec_cli.engine.verify.verifiers import Proposal  # noqa: E402


def test_unsent_offers_score_each_proposers_first_token_once():
    learned = []
    h = UnsentOffers()
    h.offer(3, Draft(Proposal([7, 8]), "ngram", [("n",), ("n",)], [0.5, 0.5], accept=[0.5, 0.5]),
            Draft(Proposal([9], subst=[False]), "edit", [("e",)], [0.6], accept=[0.6]),
            Draft(Proposal([]), "edit"))
    h.settle([1, 2, 3, 7, 5], lambda *a: learned.append(a))
    assert learned == [("ngram", [("n",)], [0.5], 1), ("edit", [("e",)], [0.6], 0)]
    h.settle([1, 2, 3, 7, 5, 6], lambda *a: learned.append(a))  # scored once
    h.offer(5, Draft(Proposal([6]), "ngram", [("n",)], [0.5], accept=[0.5]))
    h.withdraw()  # a draft was sent instead: it is learned from when verified, not here
    h.settle([1, 2, 3, 7, 5, 6], lambda *a: learned.append(a))
    assert len(learned) == 2


def _copy_run(auto: AutoDrafter, source: list[int], n: int, grammar: bool = False) -> int:
    """The target copies ``source`` (the prompt) token for token; returns the tokens drafted.
    ``grammar``: drafts are asked as under a grammar that forces nothing here."""
    auto.begin(source)
    history, drafted = list(source), 0
    while len(history) - len(source) < n:
        truth = source[len(history) - len(source):]
        p = auto.propose_after(history, [], 32) if grammar else auto.propose(history, 32)
        kept = next((i for i, (t, w) in enumerate(zip(p.tokens, truth)) if t != w), len(p.tokens))
        auto.accept(kept)
        drafted += len(p.tokens)
        history += truth[: kept + 1]
    return drafted


@pytest.mark.parametrize("grammar", [False, True])
def test_a_proposer_valued_below_the_cpu_bar_learns_it_is_right_without_drafting(monkeypatch, grammar):
    """On CPU costs a draft pays only at about 0.85 per token; proposers whose face value is 0.6
    and that are always right must learn it from the passes they were not sent on."""
    import random

    monkeypatch.setattr(auto_mod, "_ngram_prior", lambda share, order: 0.6)
    monkeypatch.setattr(auto_mod, "_edit_signal", lambda d: (("copy",), 0.6))
    rng = random.Random(5)
    source = [rng.randrange(3, 5000) for _ in range(300)]
    assert _copy_run(AutoDrafter(cpu_like()), source, 200, grammar) > 100
    monkeypatch.setattr(UnsentOffers, "settle", lambda self, history, learn: None)
    assert _copy_run(AutoDrafter(cpu_like()), source, 200, grammar) == 0  # without it: never sent, never learned


def test_demo_says_a_run_of_the_targets_own_passes_is_no_speed_up():
    from specdec_cli.commands.demo import speed_line

    line = speed_line("writing new code", {"target alone": (28.1, 1.0), "auto": (30.6, 1.0)})
    assert line.startswith("writing new code: target alone 28.1 tok/s (1.00x), auto 30.6 tok/s (1.09x: ")
    assert "run-to-run variation" in line
    # 2 drafted tokens kept in 128: 1.02 a pass, which cannot make 8% (today's demo said a bare 1.08x)
    few = speed_line("writing new code", {"target alone": (28.9, 1.0), "auto": (31.2, 1.02)})
    assert "(1.08x: 1.02 tokens a pass, the target's own passes" in few
    assert "run-to-run" not in speed_line("c", {"target alone": (28.9, 1.0), "auto": (31.2, 1.06)})
    edit = speed_line("editing a given file", {"target alone": (30.7, 1.0), "auto": (37.7, 3.46)})
    assert edit == "editing a given file: target alone 30.7 tok/s (1.00x), auto 37.7 tok/s (1.23x)"

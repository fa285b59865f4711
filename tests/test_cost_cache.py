"""The cost cache's trust: figures measured while the machine was busy never decide alone, the
median of the quiet samples does, and a cache written under load is corrected by the next quiet
run (the figures injected here stand for a first ``serve`` started beside a build)."""

from __future__ import annotations

import time

import pytest

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
from specdec_cli.engine.drafters.auto import break_even, could_pay
from specdec_cli.engine.policy import cost_cache
from specdec_cli.engine.policy.costmodel import CostModel
from test_auto import CPU_STEPS, EXACT, REPEATING, STEP, cpu_like


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_COST_CACHE", str(tmp_path / "c.json"))
    return tmp_path / "c.json"


def _model(draft_steps: float) -> CostModel:
    c = CostModel({1: STEP, 2: 2.1 * STEP, 4: 3.0 * STEP}, {"draft": draft_steps * STEP})
    c.checked_at = time.time()
    return c


def _draft_steps(c: CostModel) -> float:
    return c.draft_seconds("draft") / c.step_seconds()


def test_busy_samples_never_decide_and_the_quiet_median_does(cache):
    cost_cache.save_cached("k", _model(3.26), busy=0.9)  # a first start beside a build
    got = cost_cache.load_cached("k")
    assert not got.quiet and got.samples == (0, 1) and _draft_steps(got) == pytest.approx(3.26)
    cost_cache.save_cached("k", _model(0.50), busy=0.05)
    got = cost_cache.load_cached("k")
    assert got.quiet and got.samples == (1, 2) and _draft_steps(got) == pytest.approx(0.50)
    cost_cache.save_cached("k", _model(0.52), busy=0.0)
    cost_cache.save_cached("k", _model(2.00), busy=0.1)  # quiet, and far from its neighbours
    got = cost_cache.load_cached("k")
    assert got.samples == (3, 4) and _draft_steps(got) == pytest.approx(0.52)  # the median drops it
    assert got.pass_seconds(2) / got.step_seconds() == pytest.approx(2.1)
    for _ in range(cost_cache.SAMPLES_KEPT):
        cost_cache.save_cached("k", _model(0.6), busy=0.0)
    assert cost_cache.load_cached("k").samples == (cost_cache.SAMPLES_KEPT, cost_cache.SAMPLES_KEPT)
    assert cost_cache.reset() == 1 and not cache.exists() and cost_cache.load_cached("k") is None


def test_the_busy_meter_counts_other_processes_only(monkeypatch):
    """Over one second on 2 CPUs the system was busy 1.5 CPU-seconds, this process 1.0 of them:
    other work took a quarter of the machine."""
    real = cost_cache._times()  # psutil reads this machine: wall, system busy, own, all non-negative
    assert real is not None and all(x >= 0 for x in real)
    readings = iter([(0.0, 10.0, 5.0), (1.0, 11.5, 6.0)])
    monkeypatch.setattr(cost_cache, "_times", lambda: next(readings))
    monkeypatch.setattr(cost_cache.os, "cpu_count", lambda: 2)
    assert cost_cache.BusyMeter().share() == pytest.approx(0.25)


def test_break_even_is_where_the_draft_starts_to_pay():
    c = cpu_like(0.63)
    edge = break_even(c, 16)
    assert 0 < edge < 0.63 * STEP
    curve = {b: s * STEP for b, s in CPU_STEPS.items()}
    assert could_pay(CostModel(curve, {"draft": edge * 0.95}), "draft", 16)
    assert not could_pay(CostModel(curve, {"draft": edge * 1.05}), "draft", 16)


def test_a_cache_written_under_load_is_corrected_by_the_next_quiet_run(tiny_target, tiny_draft, cache, monkeypatch):
    """Written busy, the dear draft figure does not leave the draft out: the next run loads the
    draft, measures it afresh, and saves a quiet sample that the figures then rest on. Written
    quiet, the same figure leaves it out, with a note giving the figures it compared."""
    notes: list[str] = []
    monkeypatch.setattr(cost_cache.BusyMeter, "share", lambda self: 0.0)  # this run: a quiet machine

    def engine():
        return Engine(tiny_target, tiny_draft, options=EngineOptions(n_ctx=256, **EXACT),
                      draft=DraftOptions(draft_max=16, p_min=0.0), method="auto", note=notes.append)

    eng = engine()
    key = eng._cost_key(eng.target_model.path, 0)
    eng.close()
    busy = cpu_like(3.26)
    busy.frozen, busy.checked_at = False, time.time()
    cost_cache.save_cached(key, busy, busy=0.9)
    eng = engine()
    try:
        eng.generate(eng.tokenize_prompt(REPEATING[0]), GenOptions(max_tokens=8))
        assert eng.draft_model is not None and not eng.draft_left_out and not notes
        measured = eng.costs.draft_seconds("draft") / eng.costs.step_seconds()
        assert measured != pytest.approx(3.26, rel=0.2)
    finally:
        eng.close()  # saves the run's figures: a quiet sample
    got = cost_cache.load_cached(key)
    assert got.quiet and got.samples == (1, 2)
    assert _draft_steps(got) == pytest.approx(measured, rel=0.05)

    cost_cache.reset()
    quiet = cpu_like(3.26)
    quiet.frozen, quiet.checked_at = False, time.time()
    cost_cache.save_cached(key, quiet, busy=0.0)
    eng = engine()
    try:
        eng.generate(eng.tokenize_prompt(REPEATING[0]), GenOptions(max_tokens=8))
        assert eng.draft_model is None and eng.draft_left_out
        assert len(notes) == 1 and "3.26 of a target step (one quiet measurement)" in notes[0]
        assert "pays only below 0." in notes[0] and "specdec bench --costs" in notes[0]
    finally:
        eng.close()


def test_bench_costs_shows_the_figures_and_what_they_decide(tiny_target, tiny_draft, cache):
    from test_cli import specdec

    key = cost_cache.cache_key(tiny_target, threads=2, gpu_layers=0, device="cpux2",
                               extra=f"fa-auto|draft-{tiny_draft.name}:{tiny_draft.stat().st_size}")
    cost_cache.save_cached(key, _model(3.26), busy=0.9)
    cost_cache.save_cached(key + "|seqs4", _model(3.26), busy=0.0)
    env = {"SPECDEC_COST_CACHE": str(cache)}
    out = specdec("bench", "--costs", env=env)
    assert out.returncode == 0, out.stderr
    blocks = out.stdout.strip().split("\n\n")
    assert len(blocks) == 2 and all(b.startswith(tiny_target.name) for b in blocks)
    assert "1 seq" in blocks[0] and "samples 0/1 quiet" in blocks[0] and "only busy samples" in blocks[0]
    assert "4 seq" in blocks[1] and "samples 1/1 quiet" in blocks[1] and "draft left out: it pays only below" in blocks[1]
    assert "a draft token in steps: draft 3.26" in blocks[1] and "a pass in steps by size: 2: 2.10, 4: 3.00" in blocks[1]
    assert "(2 entries)" in out.stderr
    gone = specdec("bench", "--reset-costs", env=env)
    assert gone.returncode == 0 and "emptied (2 entries)" in gone.stderr and not cache.exists()


def test_many_sequences_time_a_new_prompt_apart_from_drafting(tiny_target, tiny_draft, cache):
    """The draft's first catch-up of a sequence new to it is a read of its whole prompt: timed apart
    (``read_seconds``), it no longer counts as the cost of the few tokens drafted after it (a
    serve start recorded 3.26 target steps per draft token that way, against 0.5 for one sequence)."""
    from specdec_cli.engine.drafters.model_batch import READ_AFTER, Ask

    eng = Engine(tiny_target, tiny_draft, options=EngineOptions(n_ctx=512, n_seq=2, **EXACT), method="draft")
    try:
        eng.scheduler(GenOptions(max_tokens=8), n_parallel=2)
        drafter = eng.batch_model
        prompt = eng.tokenize_prompt(REPEATING[0] * 4)
        assert len(prompt) > READ_AFTER
        first = Ask(0, list(prompt), 4)
        drafter.propose([first])
        assert drafter.read_seconds > 0 and len(first.tokens) == 4
        later = Ask(0, list(prompt) + first.tokens[:2] + [first.tokens[0]], 4)  # two kept, and the target's own
        drafter.propose([later])
        assert drafter.read_seconds == 0.0 and len(later.tokens) == 4
    finally:
        eng.close()

"""`bench`: its prompt sets, its arithmetic, its recommendation rule, and a whole run on tiny models."""

from __future__ import annotations

import json

import pytest

from specdec_cli.bench.report import FLOOR, recommend, summarize
from specdec_cli.bench.runner import BASELINE, Config, Sample
from specdec_cli.bench.scenarios import SCENARIOS, load_scenarios
from specdec_cli.errors import UsageError
from test_cli import EXACT, assert_one_line_error, specdec


def test_every_use_case_ships_at_least_six_prompts():
    sets = load_scenarios()
    assert set(sets) == set(SCENARIOS) == {"edit", "documents", "code", "agent", "json", "qa", "creative"}
    for name, items in sets.items():
        assert len(items) >= 6, name
        assert all(item.messages for item in items)
    # the copy-heavy edits: at least 8 prompts, each with a long input to copy from
    assert len(sets["edit"]) >= 8
    assert all(len(item.messages[0]["content"]) >= 2000 for item in sets["edit"])


def test_unknown_scenario_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown scenario"):
        load_scenarios(["poetry"])


def sample(scenario, pid, rep, cfg, tps):
    return Sample(scenario, pid, rep, cfg, 10, 64, 0.1, 0.2, tps, 10 if cfg.use_draft else 0,
                  5 if cfg.use_draft else 0, 0.5 if cfg.use_draft else None, 1.5, 0.01, 1 << 30)


FAST = Config(True, 4, 0.5)
RISKY = Config(True, 8, 0.0)


def synthetic():
    out = []
    for scenario, base, fast, risky in (("code", 10.0, 13.0, 16.0), ("qa", 10.0, 10.0, 8.0)):
        for rep in range(3):
            out += [sample(scenario, f"{scenario}-1", rep, BASELINE, base),
                    sample(scenario, f"{scenario}-1", rep, FAST, fast),
                    sample(scenario, f"{scenario}-1", rep, RISKY, risky)]
    return out


def test_speedups_are_ratios_within_each_prompt_and_repeat():
    rows = summarize(synthetic())
    code_risky = next(r for r in rows if r.scenario == "code" and r.config == RISKY)
    assert code_risky.speedup == pytest.approx(1.6)
    assert code_risky.speedup_min == pytest.approx(1.6) and code_risky.n == 3
    overall_fast = next(r for r in rows if r.scenario == "overall" and r.config == FAST)
    assert overall_fast.n == 6


def test_recommendation_never_slows_a_scenario_and_includes_no_draft():
    rec = recommend(summarize(synthetic()))
    assert rec["per_scenario"]["code"]["label"] == RISKY.label  # fastest for code alone
    assert rec["per_scenario"]["qa"]["label"] in (BASELINE.label, FAST.label)
    assert rec["overall"]["label"] == FAST.label  # RISKY would make qa 0.8x, below the floor
    slow = [s for s in synthetic() if s.config != FAST]
    assert recommend(summarize(slow))["overall"]["label"] == "no draft"
    assert FLOOR == 0.98


def test_bench_end_to_end_on_tiny_models(tiny_target, tiny_draft, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello world"}\n{"prompt": "the world is"}\n')
    out = tmp_path / "bench.json"
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = specdec(
        "bench", "-t", tiny_target, "-d", tiny_draft, "--prompts", prompts, "--no-chat", "--repeats", "2",
        "-n", "24", "--draft-max", "1,3", "--p-min", "0", *EXACT[:6], "--json", out, "--save", env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "recommended for every scenario" in proc.stdout and "no draft" in proc.stdout
    data = json.loads(out.read_text())
    assert len(data["samples"]) == 2 * 2 * 6  # prompts x repeats x (baseline + auto + 2 n-gram + 2 draft settings)
    assert {s["config"]["method"] for s in data["samples"]} == {None, "auto", "ngram", "draft"}
    assert data["cost_model"]["pass_ms"]["1"] > 0
    assert {r["scenario"] for r in data["rows"]} == {"custom", "overall"}
    assert 0 <= data["python_overhead_fraction_median"] < 1
    for s in data["samples"]:
        assert 0 <= s["n_substituted"] <= s["n_accepted"]  # kept tokens a learned edit wrote (auto's edit tracker)
        if s["config"]["use_draft"]:
            assert s["divergence"] is None  # f32 fixtures: greedy output identical to the target alone
    saved = json.loads((tmp_path / "config" / "specdec" / "tuned.json").read_text())
    (stored,) = saved.values()
    assert stored["use_draft"] == (data["recommendation"]["overall"]["use_draft"])
    run = specdec("run", "-t", tiny_target, "-d", tiny_draft, "-n", "4", *EXACT[:6], "hello", env=env)
    assert run.returncode == 0
    assert "(bench)" in run.stderr or "bench --save" in run.stderr  # run says the setting came from bench


def test_bench_bad_grid(tiny_target, tiny_draft):
    proc = specdec("bench", "-t", tiny_target, "-d", tiny_draft, "--draft-max", "0,x")
    assert_one_line_error(proc, 2, "--draft-max")


def test_bench_without_a_draft_measures_auto_and_ngram(tiny_target, tmp_path):
    lonely = tmp_path / "alone.gguf"
    lonely.write_bytes(tiny_target.read_bytes())
    out = tmp_path / "b.json"
    proc = specdec("bench", "-t", lonely, "--scenarios", "qa", "--repeats", "1", "--max-tokens", "8",
                   "--json", out, "--save")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert {s["config"]["method"] for s in data["samples"]} == {None, "auto", "ngram"}
    assert "target pass cost by batch size" in proc.stdout
    assert "nothing to save" in proc.stderr


def test_plot_draws_both_panels(tmp_path):
    pytest.importorskip("matplotlib")
    from specdec_cli.bench.plot import plot

    rows = summarize(synthetic())
    path = plot(rows, recommend(rows), tmp_path / "bench.png")
    assert path.stat().st_size > 10_000
    with pytest.raises(UsageError, match="png or .svg"):
        plot(rows, recommend(rows), tmp_path / "bench.pdf")


def test_throughput_times_no_batch_with_the_cost_check_in_it(tiny_target, monkeypatch):
    """bench --parallel: every (count, speculation) system of every repeat; auto's cost check is
    done before the first timed batch, not inside it."""
    from specdec_cli.bench import throughput
    from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions

    eng = Engine(tiny_target, None, options=EngineOptions(n_ctx=256, n_seq=2, flash_attn="off",
                                                          cache_type_k="f32", cache_type_v="f32"),
                 draft=DraftOptions(draft_max=8), method="auto")
    timed = throughput._one

    def one(engine, *a, **k):
        assert engine._costs_ready  # checked and calibrated before the clock starts
        return timed(engine, *a, **k)

    monkeypatch.setattr(throughput, "_one", one)
    try:
        prompts = [eng.tokenize_prompt(t) for t in ("one two three one two three one two", "a b c a b c a b")]
        runs = throughput.run_throughput(eng, {"x": prompts}, [1, 2], repeats=2, gen=GenOptions(max_tokens=8))
    finally:
        eng.close()
    assert [(r.repeat, r.n_parallel, r.speculation) for r in runs] == [
        (0, 1, False), (0, 1, True), (0, 2, False), (0, 2, True),
        (1, 2, True), (1, 2, False), (1, 1, True), (1, 1, False)]
    assert all(r.n_generated == 16 and r.tokens_per_second > 0 for r in runs)

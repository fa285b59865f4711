"""Where a pass's time goes (``--profile``): stages timed apart, the output untouched, the table on stderr."""

from __future__ import annotations

import json

from specdec_cli.engine.decode.engine import GenOptions
from specdec_cli.engine.decode.pass_profile import NO_PROFILE, STAGES, PassProfile
from specdec_cli.engine.decode.scheduler import Job
from test_auto import gpu_like
from test_cli import EXACT as CLI_EXACT
from test_cli import assert_one_line_error, specdec
from test_scheduler import PROMPTS, _engine


def test_a_stage_inside_another_counts_in_the_inner_one_alone(monkeypatch):
    import specdec_cli.engine.decode.pass_profile as pp

    clock = [0.0]
    monkeypatch.setattr(pp.time, "perf_counter", lambda: clock[0])
    p = PassProfile()
    with p.stage("drafting"):
        clock[0] += 0.02
        with p.stage("cost policy"):
            clock[0] += 0.03
        p.add("llama_decode", 0.01)  # measured apart, inside the drafting stage
        clock[0] += 0.01
    p.add_step(0.08)
    assert abs(p.seconds["drafting"] - 0.02) < 1e-9  # its own 20 ms: not the policy's 30 nor the 10 added
    assert abs(p.seconds["cost policy"] - 0.03) < 1e-9
    stages = p.to_dict()["stages"]
    assert list(stages) == [*STAGES, "unaccounted"]
    assert abs(stages["unaccounted"]["share"] - 0.25) < 1e-3  # 20 ms of the step's 80 outside every stage
    assert abs(sum(v["share"] for v in stages.values()) - 1.0) < 1e-3


def test_profiling_off_adds_nothing():
    with NO_PROFILE.stage("verify"):
        pass
    NO_PROFILE.add("verify", 1.0)
    NO_PROFILE.count_pass(3, 4)
    with NO_PROFILE.outside_step("answer"):
        pass
    assert not NO_PROFILE.enabled and NO_PROFILE.passes == 0 and sum(NO_PROFILE.seconds.values()) == 0


def test_a_profiled_run_decodes_the_same_tokens_and_counts_every_pass(tiny_target, tiny_draft):
    eng = _engine(tiny_target, tiny_draft, 3, "auto")
    try:
        eng.set_costs(gpu_like(0.02))  # the draft model and the index both draft
        prompts = [eng.tokenize_prompt(p) for p in PROMPTS]
        gen = GenOptions(max_tokens=30)
        plain = {j.index: r.tokens for j, r in eng.run_many([Job(i, p) for i, p in enumerate(prompts)], gen,
                                                           n_parallel=3)}
        prof = PassProfile()
        timed = {j.index: r.tokens for j, r in eng.run_many([Job(i, p) for i, p in enumerate(prompts)], gen,
                                                           n_parallel=3, profile=prof)}
        assert timed == plain
        assert eng.last_run is not None and prof.passes == eng.last_run.n_passes
        assert prof.seconds["llama_decode"] > 0 and prof.seconds["drafting"] > 0 and prof.seconds["verify"] > 0
        assert all(v >= 0 for v in prof.seconds.values())
        assert prof.seconds["llama_decode"] <= prof.step_seconds
    finally:
        eng.close()


def test_run_batch_profile_writes_the_table_on_stderr_only(tiny_target, tmp_path):
    batch = tmp_path / "b.jsonl"
    batch.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS[:3]))
    proc = specdec("run", "-t", tiny_target, "--no-draft", *CLI_EXACT, "-n", "8", "--batch", batch,
                   "--parallel", "2", "--profile")
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["n_generated"] for line in proc.stdout.splitlines()] == [8, 8, 8]
    assert "profile:" in proc.stderr and "llama_decode" in proc.stderr and "ms/pass" in proc.stderr


def test_profile_without_batch_is_one_line_of_usage(tiny_target):
    assert_one_line_error(specdec("run", "-t", tiny_target, "--profile", "hello"), 2, "--profile")

"""A fault while serving one sequence ends that sequence alone.

Faults are injected into one of three sequences in flight (its grammar's state, its drafter, its
logits, its text stream) and into the scheduler itself; the faulting job ends with stop reason
"error" and its cause, its cells are freed, and every other job's output is what it is alone.
A drafter that faults is set aside for its sequence, which goes on undrafted to the same output.
On the one-sequence path a fault is a ``GenerationFault`` (one line at the CLI), a drafter's
fault again only sets the drafter aside. The server's and the CLI's side are in
``test_fault_isolation_cli.py``.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
from specdec_cli.engine.decode.scheduler import Job, Scheduler
from specdec_cli.engine.errors import GenerationFault
from specdec_cli.engine.structured.constraint import ConstraintViolation, compile_constraint, tokenizer_for
from specdec_cli.terminal.constraint_args import ConstraintSpec
from test_auto import gpu_like
from test_structured import SCHEMAS

EXACT = dict(flash_attn="off", cache_type_k="f32", cache_type_v="f32")
PROMPTS = ["hello world this is the cat and the dog hello world this is the cat",
           "one two three four five six one two three four five six one two",
           "we can see that one of the world we can see that one of the"]
VICTIM = 1  # the job the faults are injected into


@pytest.fixture(scope="module")
def engine(tiny_target, tiny_draft):
    eng = Engine(tiny_target, tiny_draft, options=EngineOptions(n_ctx=512, n_seq=3, **EXACT),
                 draft=DraftOptions(draft_max=6, p_min=0.0), method="auto")
    eng.set_costs(gpu_like(0.02))  # every drafter drafts
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def jobs_and_alone(engine):
    grammar = compile_constraint(ConstraintSpec("json_schema", json.dumps(SCHEMAS[0]), "--json-schema"),
                                 tokenizer_for(engine.target_model))
    gens = [GenOptions(max_tokens=40, grammar=grammar if i != 2 else None) for i in range(3)]
    prompts = [engine.tokenize_prompt(p) for p in PROMPTS]
    alone = [engine.generate(p, g, use_draft=False).tokens for p, g in zip(prompts, gens)]
    return prompts, gens, alone


def run_three(engine, prompts, gens, inject):
    """The three jobs at once, ``inject(slot)`` called when the victim's sequence starts."""
    sched = engine.scheduler(GenOptions(), n_parallel=3)
    start = sched._start

    def starting(slot, job, reused):
        start(slot, job, reused)
        if job.index == VICTIM:
            inject(slot)

    sched._start = starting
    jobs = [Job(i, p, gen=g) for i, (p, g) in enumerate(zip(prompts, gens))]
    return {job.index: res for job, res in sched.run(jobs)}, sched


def after_calls(n: int, exc: Exception):
    """A function that raises ``exc`` from its ``n``-th call on."""
    calls = [0]

    def tripped(*_a, **_k):
        calls[0] += 1
        if calls[0] >= n:
            raise exc
    return tripped


def _wrap_before(obj, name: str, hook):
    original = getattr(obj, name)

    def wrapped(*a, **k):
        hook(*a, **k)
        return original(*a, **k)
    setattr(obj, name, wrapped)


def assert_only_the_victim_faulted(results, alone, cause: str, sched):
    victim = results[VICTIM]
    assert victim.stats.stop_reason == "error" and cause in victim.stats.fault
    for i, res in results.items():
        if i != VICTIM:
            assert res.stats.stop_reason != "error" and res.tokens == alone[i]
    # the victim's cells are freed: nothing it computed is left for a later prompt to reuse
    freed = [s for s in sched.slots if not s.tokens]
    assert freed and all(sched.ctx.pos_max(s.seq) == -1 for s in freed)


def test_a_grammar_fault_ends_its_request_alone(engine, jobs_and_alone):
    prompts, gens, alone = jobs_and_alone
    results, sched = run_three(engine, prompts, gens, lambda slot: _wrap_before(
        slot.constraint, "consume", after_calls(3, ConstraintViolation("injected"))))
    assert_only_the_victim_faulted(results, alone, "ConstraintViolation: injected", sched)


def test_nan_logits_end_their_request_alone(engine, jobs_and_alone):
    prompts, gens, alone = jobs_and_alone

    def poison(slot):
        verify = slot.verifier.verify
        calls = [0]

        def nan_rows(rows, proposal):
            calls[0] += 1
            if calls[0] < 3:
                return verify(rows, proposal)
            return verify(lambda i: np.full(engine.target_model.n_vocab, np.nan, dtype=np.float32), proposal)
        slot.verifier.verify = nan_rows

    results, sched = run_three(engine, prompts, gens, poison)
    assert_only_the_victim_faulted(results, alone, "RowFault", sched)


def test_a_text_stream_fault_ends_its_request_alone(engine, jobs_and_alone):
    prompts, gens, alone = jobs_and_alone
    results, sched = run_three(engine, prompts, gens, lambda slot: _wrap_before(
        slot.stream, "push", after_calls(2, UnicodeDecodeError("utf-8", b"\xff", 0, 1, "injected"))))
    assert_only_the_victim_faulted(results, alone, "UnicodeDecodeError", sched)


def test_a_drafter_that_faults_is_set_aside_and_its_sequence_goes_on(engine, jobs_and_alone, monkeypatch):
    prompts, gens, alone = jobs_and_alone
    from specdec_cli.engine.decode.pass_drafts import PassDrafter

    draft = PassDrafter.draft
    calls = [0]

    def faulty(self, seqs, caps, n_prefill):
        calls[0] += 1
        if calls[0] > 2 and any(s.job is not None and s.job.index == VICTIM for s in seqs):
            raise RuntimeError("injected drafter fault")
        return draft(self, seqs, caps, n_prefill)

    monkeypatch.setattr(PassDrafter, "draft", faulty)
    sched = engine.scheduler(GenOptions(), n_parallel=3)
    jobs = [Job(i, p, gen=g) for i, (p, g) in enumerate(zip(prompts, gens))]
    results = {job.index: res for job, res in sched.run(jobs)}
    for i, res in results.items():
        assert res.stats.stop_reason != "error" and res.tokens == alone[i]
    assert "injected drafter fault" in results[VICTIM].stats.drafter_fault
    assert all(results[i].stats.drafter_fault is None for i in results if i != VICTIM)
    assert sum(results[i].stats.n_drafted for i in results if i != VICTIM) > 0


def test_a_fault_no_sequence_owns_ends_the_running_jobs_and_the_rest_run(engine, jobs_and_alone, monkeypatch):
    """A fault outside any one sequence's work (here the pass's caps) ends the jobs running then;
    the cache is emptied and the jobs still waiting run to their own outputs."""
    prompts, gens, alone = jobs_and_alone
    caps = Scheduler._caps
    calls = [0]

    def faulty(self, *a, **k):
        calls[0] += 1
        if calls[0] == 4:
            raise RuntimeError("injected scheduler fault")
        return caps(self, *a, **k)

    monkeypatch.setattr(Scheduler, "_caps", faulty)
    sched = engine.scheduler(GenOptions(), n_parallel=1)
    jobs = [Job(i, p, gen=g) for i, (p, g) in enumerate(zip(prompts, gens))]
    results = {job.index: res for job, res in sched.run(jobs)}
    assert results[0].stats.stop_reason == "error" and "injected scheduler fault" in results[0].stats.fault
    assert [results[i].tokens for i in (1, 2)] == alone[1:]


def test_one_sequence_a_fault_is_one_generation_fault_and_a_drafter_fault_sets_it_aside(engine, jobs_and_alone,
                                                                                       monkeypatch):
    prompts, gens, alone = jobs_and_alone
    from specdec_cli.engine.structured import constraint as C

    consume = C.Constraint.consume
    monkeypatch.setattr(C.Constraint, "consume", lambda self, t: (_ for _ in ()).throw(ConstraintViolation("boom")))
    with pytest.raises(GenerationFault, match="internal fault: ConstraintViolation: boom"):
        engine.generate(prompts[0], gens[0])
    monkeypatch.setattr(C.Constraint, "consume", consume)
    auto = engine.drafters["auto"]
    monkeypatch.setattr(type(auto), "propose_after", lambda *a, **k: (_ for _ in ()).throw(KeyError("drafter")))
    res = engine.generate(prompts[0], gens[0])
    assert res.tokens == alone[0] and "KeyError" in res.stats.drafter_fault
    assert res.stats.n_drafted == 0
    res = engine.generate(prompts[0], replace(gens[0], max_tokens=8), use_draft=False)
    assert res.tokens == alone[0][:8] and res.stats.drafter_fault is None

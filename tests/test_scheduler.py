"""Many prompts at once: the pass-level policy, and the scheduler's outputs against each prompt alone."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
from specdec_cli.engine.decode.scheduler import Job, cells_for
from specdec_cli.engine.policy.costmodel import CostModel
from specdec_cli.engine.policy.decisions import best_length, choose_parallel, plan_pass
from specdec_cli.engine.verify.verifiers import SamplingParams
from test_auto import REPEATING, cpu_like, gpu_like
from test_exact_sampling import EOG, SAMPLING, chi_square

EXACT = dict(flash_attn="off", cache_type_k="f32", cache_type_v="f32")

# ragged: long and short prompts, some that repeat (drafts are kept), one that ends at once
PROMPTS = REPEATING + [
    "the cat and the dog the cat and the dog the cat and the dog the cat",
    "is it that for on is it that",
    "one of the world",
    "hello world this is the cat and the dog and the world of the one we can see",
]


# --- the policy over a pass ---------------------------------------------------------------------
def test_one_sequence_plans_as_best_length():
    costs = cpu_like()
    for accept in ([0.9] * 8, [0.5, 0.4, 0.3], [0.99] * 20, [0.2]):
        assert plan_pass([accept], costs).lengths == [best_length(accept, costs).k]


def test_flat_costs_draft_long_for_many_sequences():
    accepts = [[0.8] * 16 for _ in range(8)]
    plan = plan_pass(accepts, gpu_like())
    # a pass costs one step up to 33 tokens: the 8 sequences fill it with drafts of 3
    assert sum(plan.lengths) >= 24 and min(plan.lengths) >= 3, plan.lengths
    flat = CostModel({1: 1.0, 128: 1.1}, frozen=True)
    assert min(plan_pass(accepts, flat).lengths) >= 12  # flatter still: longer drafts


def test_cpu_costs_draft_short_or_not_at_all():
    accepts = [[0.8] * 16 for _ in range(8)]
    plan = plan_pass(accepts, cpu_like())
    assert max(plan.lengths) <= 2, plan.lengths  # against 3+ on the flat curve, 12+ on a flatter one


def test_a_draft_that_does_not_pay_at_this_batch_size_is_not_made():
    # beside a prefill chunk on a curve where every token costs a step, a 0.6-likely token does
    # not pay; on a flat curve it does
    steep = CostModel({1: 1.0, 2: 2.0, 64: 64.0}, frozen=True)
    assert plan_pass([[0.6]], steep, n_prefill=39).lengths == [0]
    assert plan_pass([[0.6]], CostModel({1: 1.0, 128: 1.1}, frozen=True), n_prefill=39).lengths == [1]


def test_sure_drafts_go_first_across_sequences():
    plan = plan_pass([[0.99] * 4, [0.3] * 4], cpu_like())
    assert plan.lengths[0] >= plan.lengths[1]


def test_choose_parallel_follows_the_curve():
    assert choose_parallel(gpu_like(), 16) == 16  # flat: as many as allowed
    assert choose_parallel(CostModel({1: 1.0, 8: 8.0}, frozen=True), 16) == 1  # linear: batching cannot pay
    assert choose_parallel(cpu_like(), 4) == 4  # 4 tokens for 2.9 steps beats 1 for 1 and 2 for 2.1
    assert choose_parallel(cpu_like(), 2) == 1  # 2 for 2.1 steps: no gain
    bump = CostModel({1: 1.0, 8: 4.0, 16: 8.0, 32: 40.0}, frozen=True)  # past 16 a token costs more again
    assert choose_parallel(bump, 32) == 16


def test_riding_with_prompt_chunks_is_measured_against_running_apart():
    costs = CostModel({1: 0.03, 4: 0.09, 128: 1.2}, frozen=False)
    assert costs.rides(133)  # nothing measured yet: decoding rows ride, as they always did
    curve = costs.curve()
    apart = costs.pass_seconds(128) + costs.pass_seconds(5)
    costs.observe_ride(1.4 * apart, 128, 5)  # a CPU's tiles over several sequences' cells
    assert not costs.rides(133) and not costs.rides(150)
    assert costs.rides(40)  # measured per size class: a small pass rides until measured dearer
    assert costs.curve() == curve  # kept off the curve, which prices passes of one kind
    for _ in range(10):
        costs.observe_ride(0.9 * apart, 128, 5)  # near the start of the sequences: cheaper together
    assert costs.rides(133)
    frozen = CostModel({1: 0.03, 128: 1.2}, frozen=True)
    frozen.observe_ride(10.0, 128, 5)
    assert not frozen.ride and frozen.rides(133)


# --- lossless against each prompt alone ----------------------------------------------------------
def _engine(target, draft, n_seq: int, method: str | None, n_ctx: int = 256, kv_streams: bool = False) -> Engine:
    return Engine(target, draft, options=EngineOptions(n_ctx=n_ctx, n_seq=n_seq, kv_streams=kv_streams, **EXACT),
                  draft=DraftOptions(draft_max=8, p_min=0.0), method=method)


def _alone(eng: Engine, prompts: list[list[int]], gen: GenOptions) -> list:
    return [eng.generate(p, gen, use_draft=False) for p in prompts]


@pytest.mark.parametrize("n_seq", [2, 3, 8])
@pytest.mark.parametrize("method", ["auto", "ngram", "draft", None])
@pytest.mark.parametrize("kv_streams", [False, True], ids=["pool", "streams"])
def test_greedy_outputs_equal_each_prompt_alone(tiny_target, tiny_draft, n_seq, method, kv_streams):
    eng = _engine(tiny_target, tiny_draft, n_seq, method, kv_streams=kv_streams)
    try:
        if method == "auto":
            eng.set_costs(gpu_like(0.02))  # so the draft model and the index both draft
        prompts = [eng.tokenize_prompt(p) for p in PROMPTS]
        unit = eng.tokenize_prompt("the cat and the dog " * 8)
        long = (unit + unit[1:] * 8)[:230]  # its context fills after 26 tokens
        prompts.insert(2, long)
        gens = [GenOptions(max_tokens=40), GenOptions(max_tokens=30, stop=["ca ca", " t t", " have"])]
        for gen in gens:
            alone = _alone(eng, prompts, gen)
            got = {}
            for job, res in eng.run_many([Job(i, p) for i, p in enumerate(prompts)], gen, n_parallel=n_seq):
                got[job.index] = res
            assert sorted(got) == list(range(len(prompts)))
            for i, res in got.items():
                assert res.tokens == alone[i].tokens, i
                assert res.text == alone[i].text
                assert res.stats.stop_reason == alone[i].stats.stop_reason
                assert res.stats.n_generated == len(res.tokens)
            reasons = {r.stats.stop_reason for r in got.values()}
            assert len(reasons) >= 2, reasons  # ragged: not every job ends alike
            drafters = Counter()
            for r in got.values():
                drafters.update(r.stats.steps_by_drafter)
            if method == "auto":
                assert drafters["ngram"] and drafters["draft"], drafters
            elif method is not None:
                assert drafters[method], drafters
            assert eng.last_run.mean_sequences > 1.0
    finally:
        eng.close()


def test_decoding_apart_from_prompt_chunks_decodes_each_as_alone(tiny_target, tiny_draft):
    """Where riding along with prompt chunks measured dearer than two passes, the prompts are read
    in a pass of their own and the decoding sequences decode in the next (riding one step in
    ``RIDE_ANYWAY_EVERY`` still): the same outputs, and far fewer passes that do both."""
    eng = _engine(tiny_target, tiny_draft, 2, "auto")
    try:
        eng.set_costs(gpu_like(0.02))
        prompts = [eng.tokenize_prompt(p) for p in PROMPTS]  # more jobs than sequences: prompts join mid-run
        gen = GenOptions(max_tokens=30)
        alone = _alone(eng, prompts, gen)
        both: dict[float, int] = {}
        for ride in (0.5, 2.0):
            eng.costs.ride = {c: ride for c in range(1, 12)}  # as measured: together cheaper, or dearer
            seen: list[tuple[int, int]] = []
            eng.costs.observe_ride = lambda _s, p, d, seen=seen: seen.append((p, d))  # noqa: B023
            for job, res in eng.run_many([Job(i, p) for i, p in enumerate(prompts)], gen, n_parallel=2):
                assert res.tokens == alone[job.index].tokens, (ride, job.index)
                assert res.stats.stop_reason == alone[job.index].stats.stop_reason
            both[ride] = len(seen)
        assert both[0.5] >= 4 and both[2.0] * 3 <= both[0.5], both
    finally:
        eng.close()


def test_a_server_sends_no_draft_in_the_pass_that_gives_a_first_token(tiny_target, tiny_draft):
    """``first_tokens_first`` (``specdec serve``): where a waiting prompt is read to its end, the
    decoding sequences draft nothing in that pass, so the newcomer's first token is not held up
    by their drafts; a batch run drafts there. Outputs are the same either way."""
    eng = _engine(tiny_target, tiny_draft, 2, "auto")
    try:
        eng.set_costs(gpu_like(0.02))  # long drafts wherever the index has a guess
        prompts = [eng.tokenize_prompt(p) for p in PROMPTS]  # more jobs than sequences: prompts join mid-run
        gen = GenOptions(max_tokens=30)
        alone = _alone(eng, prompts, gen)
        seen: dict[bool, list[tuple[bool, list[int]]]] = {}
        for first in (False, True):
            sched = eng.scheduler(gen, n_parallel=2, first_tokens_first=first)
            draft = sched.drafter.draft
            calls = seen[first] = []

            def record(dec, caps, n_prefill, sched=sched, draft=draft, calls=calls):
                ends = any(s.job is not None and not s.decoding and s.wait is None
                           and s.unread <= sched.ctx.n_batch - len(dec) for s in sched.slots)
                out = draft(dec, caps, n_prefill)
                calls.append((ends and bool(dec), [len(d.proposal.tokens) for d in out]))
                return out

            sched.drafter.draft = record
            for job, res in sched.run([Job(i, p) for i, p in enumerate(prompts)]):
                assert res.tokens == alone[job.index].tokens, (first, job.index)
        joining = {first: [sizes for ends, sizes in calls if ends] for first, calls in seen.items()}
        assert joining[True] and all(sum(sizes) == 0 for sizes in joining[True]), joining[True]
        assert any(sum(sizes) for sizes in joining[False]), joining[False]  # a batch run drafts there
        assert any(sum(sizes) for _ends, sizes in seen[True])  # and the server elsewhere
    finally:
        eng.close()


def test_a_prompt_that_arrives_while_a_neighbour_drafts_long_is_read_in_the_next_pass(tiny_target, tiny_draft):
    """A server's newcomer, sent while its neighbour drafts the longest drafts it may, is read
    whole in the very next pass, its first token out of that pass, the neighbour's draft left
    out of it (its timeline says so: admitted, one prompt pass, first token); both then decode
    exactly as each alone."""
    eng = _engine(tiny_target, tiny_draft, 2, "auto")
    try:
        eng.set_costs(gpu_like(0.02))  # long drafts wherever the index has a guess
        a = eng.tokenize_prompt(REPEATING[0] + " " + REPEATING[0])
        b = eng.tokenize_prompt(PROMPTS[-1])
        gen = GenOptions(max_tokens=60)
        alone = _alone(eng, [a, b], gen)
        sched = eng.scheduler(gen, n_parallel=2, first_tokens_first=True)
        draft = sched.drafter.draft
        calls: list[list[int]] = []

        def record(dec, caps, n_prefill):
            out = draft(dec, caps, n_prefill)
            calls.append([len(d.proposal.tokens) for d in out])
            return out

        sched.drafter.draft = record
        sched.start()
        sched.submit(Job(0, a))
        got = {}
        while not any(sum(sizes) >= sched.draft_max for sizes in calls):  # the neighbour drafts its longest
            got.update((job.index, res) for job, res in sched.step())
        assert not got
        joined = len(calls)
        sched.submit(Job(1, b))
        got.update((job.index, res) for job, res in sched.step())
        assert calls[joined:] == [[0]]  # one pass: the neighbour's row without its draft, and the whole prompt
        newcomer = next(s for s in sched.slots if s.job is not None and s.job.index == 1)
        events = newcomer.stats.timeline
        assert [e["event"] for e in events] == ["admitted", "prompt pass", "first token"], events
        assert events[1]["rows"] == events[0]["unread"] == len(b) - 1 - events[0]["reused"]  # whole, at once
        assert events[1]["decoding_rows"] == 1
        assert newcomer.stats.ttft_seconds is not None and newcomer.stats.queue_seconds >= 0
        while sched.busy:
            got.update((job.index, res) for job, res in sched.step())
        for i, res in got.items():
            assert res.tokens == alone[i].tokens, i
            assert res.stats.ttft_seconds <= res.stats.request_seconds
    finally:
        eng.close()


def test_a_new_conversation_leaves_an_idle_ones_cells_alone(tiny_target):
    """A new conversation that shares only its opening with an idle one takes a free or least
    recently used sequence and copies that opening; the idle conversation's next turn then finds
    its whole history cached. (Chosen by the longest common prefix alone, the newcomer took the
    idle conversation's sequence and its next turn read everything again.)"""
    eng = _engine(tiny_target, None, 3, None)
    try:
        head = "we can see that one of the world " * 3
        x = eng.tokenize_prompt(head + "hello world this is the cat")
        y = eng.tokenize_prompt(head + "one two three four five six")
        gen = GenOptions(max_tokens=12)
        sched = eng.scheduler(gen, n_parallel=1)
        sched.start()
        outputs = {}
        for job in (Job(0, x), Job(1, y)):
            sched.submit(job)
            while sched.busy:
                outputs.update((j.index, r) for j, r in sched.step())
        assert outputs[1].stats.n_prompt_reused >= len(eng.tokenize_prompt(head)) - 1  # the opening, copied
        follow = x + outputs[0].tokens + eng.target_model.tokenize(" and the dog", add_special=False, parse_special=False)
        sched.submit(Job(2, follow))
        while sched.busy:
            outputs.update((j.index, r) for j, r in sched.step())
        assert outputs[2].stats.n_prompt_reused == len(x) + len(outputs[0].tokens) - 1
        assert outputs[2].tokens == eng.generate(follow, gen, use_draft=False).tokens
    finally:
        eng.close()


def test_a_full_context_ends_each_sequence_as_alone(tiny_target):
    eng = _engine(tiny_target, None, 3, "auto", n_ctx=48)
    try:
        eng.set_costs(gpu_like())
        prompts = [eng.tokenize_prompt(p) for p in PROMPTS[:5]]
        gen = GenOptions(max_tokens=100)
        alone = _alone(eng, prompts, gen)
        for job, res in eng.run_many([Job(i, p) for i, p in enumerate(prompts)], gen, n_parallel=3):
            assert res.tokens == alone[job.index].tokens
            assert res.stats.stop_reason == alone[job.index].stats.stop_reason == "context"
    finally:
        eng.close()


@pytest.mark.parametrize("kv_streams", [False, True], ids=["pool", "streams"])
def test_a_shared_prefix_is_computed_once(tiny_target, kv_streams):
    """In a unified pool the shared cells are tagged; across streams the source stream is copied
    whole and cut to the prefix (llama.cpp copies no part of one)."""
    eng = _engine(tiny_target, None, 2, None, kv_streams=kv_streams)
    try:
        head = "we can see that one of the world " * 3
        texts = [head + tail for tail in ("hello", "the cat", "one two three", "a b c")]
        prompts = [eng.tokenize_prompt(t) for t in texts]
        gen = GenOptions(max_tokens=16)
        alone = _alone(eng, prompts, gen)
        reused = 0
        for job, res in eng.run_many([Job(i, p) for i, p in enumerate(prompts)], gen, n_parallel=2):
            assert res.tokens == alone[job.index].tokens
            reused += res.stats.n_prompt_reused
        shared = len(eng.tokenize_prompt(head)) - 1  # the head's last space joins the next word
        assert reused >= shared * 3  # every prompt but the first starts from the first one's cells
    finally:
        eng.close()


def test_sampled_first_tokens_follow_the_target_in_a_mixed_batch(tiny_target, tmp_path):
    """Exact verification per sequence, each with its own RNG: the first two tokens of one prompt,
    decoded beside other prompts with n-gram and sampled draft-model proposals, follow the target."""
    from test_exact_sampling import target_laws
    from tiny_models import TARGET_SHAPE, write_llama_gguf

    close = write_llama_gguf(tmp_path / "tiny-close-draft-f32.gguf", **TARGET_SHAPE, seed=1, output_scale=6.0,
                             name="tiny-close-draft")
    eng = Engine(tiny_target, close, options=EngineOptions(n_ctx=64, n_seq=4, threads=1, **EXACT),
                 draft=DraftOptions(draft_max=2, p_min=0.0), method="auto")
    try:
        eng.set_costs(gpu_like(0.02))
        prompt = eng.tokenize_prompt("one two three four five six seven one two three four five six")
        others = [eng.tokenize_prompt(t) for t in ("hello world this is", "a b c d a b c", "the and of to")]
        n = 1200
        _first, pairs = target_laws(eng, prompt, n)
        seen: Counter = Counter()
        sources: Counter = Counter()
        for rnd in range(n // 4):
            jobs = [Job(k, prompt if k == 0 else others[k - 1], seed=rnd * 7 + k) for k in range(4)]
            jobs += [Job(4 + k, prompt, seed=100_000 + rnd * 3 + k) for k in range(3)]
            eng.drafters["auto"].reset()
            gen = GenOptions(max_tokens=3, sampling=SamplingParams(**SAMPLING, seed=rnd), verify="exact")
            for job, res in eng.run_many(jobs, gen, n_parallel=4):
                if job.prompt is not prompt:
                    continue
                t = res.tokens
                two = tuple(t[:2]) if len(t) >= 2 else (EOG,) if not t else (t[0], EOG)
                seen[two if two[0] != EOG else (EOG,)] += 1
                sources.update(res.stats.steps_by_drafter)
        total = sum(seen.values())
        stat, df, p = chi_square(seen, pairs, total)
        assert sources["ngram"] and sources["draft"], sources
        assert p >= 0.001, f"chi2={stat:.1f} df={df} p={p:.3g}"
    finally:
        eng.close()


# --- the command line ----------------------------------------------------------------------------
def test_batch_lines_come_in_input_order_and_equal_one_at_a_time(tiny_target, tiny_draft, tmp_path):
    from test_cli import EXACT as CLI_EXACT
    from test_cli import specdec

    batch = tmp_path / "b.jsonl"
    batch.write_text("".join(json.dumps({"id": f"p{i}", "prompt": p}) + "\n" for i, p in enumerate(PROMPTS)))
    one = specdec("run", "-t", tiny_target, "-d", tiny_draft, *CLI_EXACT, "-n", "24", "--batch", batch,
                  "--parallel", "1")
    many = specdec("run", "-t", tiny_target, "-d", tiny_draft, *CLI_EXACT, "-n", "24", "--batch", batch,
                   "--parallel", "4")
    assert one.returncode == many.returncode == 0, many.stderr
    a = [json.loads(line) for line in one.stdout.splitlines()]
    b = [json.loads(line) for line in many.stdout.splitlines()]
    assert [x["id"] for x in b] == [f"p{i}" for i in range(len(PROMPTS))]
    assert [x["tokens"] for x in a] == [x["tokens"] for x in b]
    assert {x["parallel"] for x in b} == {4} and {x["parallel"] for x in a} == {1}
    assert "4 prompts at once" in many.stderr and "seq/pass" in many.stderr.splitlines()[-1]


def test_one_at_a_time_batch_summary_gives_the_batch_rate(tiny_target, tmp_path):
    """Both summaries give generated tokens per second of the whole batch, so the two can be
    compared (one at a time once gave its decoding rate alone, prompts left out)."""
    import re

    from test_cli import EXACT as CLI_EXACT
    from test_cli import specdec

    batch = tmp_path / "b.jsonl"
    batch.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    one = specdec("run", "-t", tiny_target, *CLI_EXACT, "-n", "24", "--batch", batch, "--parallel", "1")
    assert one.returncode == 0, one.stderr
    last = one.stderr.splitlines()[-1]
    m = re.match(r"all \d+ prompts in ([\d.]+) s: .*generated (\d+) tok \| ([\d.]+) tok/s", last)
    assert m, last
    seconds, generated, rate = float(m[1]), int(m[2]), float(m[3])
    # the seconds are printed to 0.01 s, which on the tiny models' short batch is several percent
    assert generated / (seconds + 0.005) - 0.01 <= rate <= generated / max(seconds - 0.005, 1e-3) + 0.01


def test_parallel_is_never_more_than_the_prompts_and_is_lowered_to_fit(tiny_target, tmp_path, monkeypatch):
    from specdec_cli.commands import loading
    from test_cli import EXACT as CLI_EXACT
    from test_cli import specdec

    batch = tmp_path / "b.jsonl"
    batch.write_text("hello\nthe cat\n")
    proc = specdec("run", "-t", tiny_target, *CLI_EXACT, "-n", "4", "--batch", batch, "--parallel", "8")
    assert proc.returncode == 0, proc.stderr
    assert {json.loads(x)["parallel"] for x in proc.stdout.splitlines()} == {2}

    # memory for 8 sequences of --ctx each that does not fit: fewer, never an out-of-memory crash
    from specdec_cli.pairing.plan import ModelChoice, build_plan
    from specdec_cli.pairing.registry import load_registry

    plan = build_plan(load_registry(None), ModelChoice(target=str(tiny_target)), no_draft=True)
    fits = {1: True, 2: True, 3: True, 4: False, 6: False, 8: False}
    monkeypatch.setattr(loading, "_estimate", lambda _p, _d, _l, n=1: type("E", (), {"fits": fits[n]})())
    assert loading.fit_parallel(plan, loading.LoadOptions(), 4, 8) == 3


# --- caches sized to the jobs --------------------------------------------------------------------
def test_cells_for_counts_the_longest_jobs_that_can_be_held_at_once():
    assert cells_for([10, 50, 30, 20], 2, 4096) == 80  # the two longest
    assert cells_for([10, 50, 30, 20], 8, 4096) == 110  # fewer jobs than sequences: all of them
    assert cells_for([9000, 10], 2, 4096) == 4106  # a job never holds more than its context


def _sized_to_jobs(target, draft, texts: list[str], gen: GenOptions, *, n_ctx: int):
    """An auto engine of 3 sequences whose caches hold what the jobs of ``texts`` need, and those
    jobs' prompts (tokenized by the engine as it sizes its caches)."""
    sized: list[list[int]] = []

    def cells(engine) -> int:
        sized[:] = [engine.tokenize_prompt(t) for t in texts]
        return cells_for([len(p) + gen.max_tokens for p in sized], 3, engine.options.n_ctx)

    eng = Engine(target, draft, options=EngineOptions(n_ctx=n_ctx, n_seq=3, **EXACT),
                 draft=DraftOptions(draft_max=8, p_min=0.0), method="auto", cells=cells)
    return eng, sized


def test_caches_sized_to_the_jobs_decode_each_as_alone(tiny_target, tiny_draft):
    """A batch's caches hold what its n_seq longest jobs need, far fewer cells than n_seq whole
    contexts, and every job still decodes as alone: more jobs than sequences (finished ones keep
    their cells until their sequence is taken), a shared prefix, drafts of every kind."""
    texts = PROMPTS + ["we can see that one of the world " * 3 + t for t in ("hello", "the cat", "a b c")]
    gen = GenOptions(max_tokens=100)
    eng, sized = _sized_to_jobs(tiny_target, tiny_draft, texts, gen, n_ctx=1024)
    try:
        eng.set_costs(gpu_like(0.02))  # so the draft model and the index both draft
        assert eng.n_cells == cells_for([len(p) + 100 for p in sized], 3, 1024) < 3 * 1024
        assert eng.target_ctx.n_ctx < 3 * 1024 and eng.draft_ctx.n_ctx < 3 * 1024
        alone = _alone(eng, sized, gen)
        drafters, reused = Counter(), 0
        for job, res in eng.run_many([Job(i, p) for i, p in enumerate(sized)], gen, n_parallel=3):
            assert res.tokens == alone[job.index].tokens, job.index
            assert res.stats.stop_reason == alone[job.index].stats.stop_reason
            drafters.update(res.stats.steps_by_drafter)
            reused += res.stats.n_prompt_reused
        assert drafters["ngram"] and drafters["draft"], drafters
        assert reused > 0
    finally:
        eng.close()


def test_passes_run_at_a_cheaper_larger_size_decode_each_as_alone(tiny_target, tiny_draft):
    """Filler tokens that run a pass at a size the curve says is cheaper change no output: one
    sequence, and many at once in caches sized to the jobs (a pass the cells cannot hold with
    its filler runs without it)."""
    # passes of 9 to 15 tokens cost more than one of 16, as on an AVX-512 CPU
    saw = CostModel({1: 0.02, 2: 0.04, 4: 0.064, 8: 0.14, 12: 0.2, 16: 0.15, 32: 0.28}, {"draft": 1e-4},
                    frozen=True)
    gen = GenOptions(max_tokens=60)
    eng, sized = _sized_to_jobs(tiny_target, tiny_draft, PROMPTS, gen, n_ctx=512)
    try:
        alone = _alone(eng, sized, gen)
        eng.set_costs(saw)
        assert saw.pass_size(9) == 16
        filler = 0
        for i, p in enumerate(sized):
            res = eng.generate(p, gen, method="ngram")
            assert res.tokens == alone[i].tokens, i
            filler += res.stats.n_filler
        assert filler > 0
        for job, res in eng.run_many([Job(i, p) for i, p in enumerate(sized)], gen, n_parallel=3):
            assert res.tokens == alone[job.index].tokens, job.index
            assert res.stats.stop_reason == alone[job.index].stats.stop_reason
        assert eng.last_run.n_filler > 0
    finally:
        eng.close()

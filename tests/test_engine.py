"""The speculative loop on synthetic f32 models: lossless, rolls back, stops where it should.

The fixtures have clear logit margins, and flash attention is off with an f32 KV cache,
so batched and single-token logits agree to ~5e-4 and greedy speculative output must be
identical to the target alone (see "Losslessness" in docs/measurements.md).
"""

from __future__ import annotations

import random

import pytest

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
from specdec_cli.engine.decode.session import Session
from specdec_cli.engine.drafters.base import Drafter
from specdec_cli.engine.errors import ContextFull, PromptTooLong
from specdec_cli.engine.llama.context import Context, ContextParams
from specdec_cli.engine.llama.model import Model
from specdec_cli.engine.verify.verifiers import GreedyVerifier, SamplingParams
from specdec_cli.errors import UsageError

EXACT = dict(flash_attn="off", cache_type_k="f32", cache_type_v="f32")
WORDS = ["the", "and", "of", "to", "in", "is", "it", "that", "for", "on", "with", "as", "was", "hello", "world", "this", "are", "be", "at", "or", "you"]


def random_prompts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 24))]
        prompts.append(" ".join(words))
    return prompts


@pytest.fixture(scope="module")
def engine(tiny_target, tiny_draft):
    eng = Engine(tiny_target, tiny_draft, options=EngineOptions(n_ctx=512, **EXACT), draft=DraftOptions(draft_max=8, p_min=0.0))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def self_draft_engine(tiny_target):
    """The target as its own draft: every proposal must be accepted."""
    eng = Engine(tiny_target, tiny_target, options=EngineOptions(n_ctx=512, **EXACT), draft=DraftOptions(draft_max=6, p_min=0.0))
    yield eng
    eng.close()


def greedy(n: int) -> GenOptions:
    return GenOptions(max_tokens=n, sampling=SamplingParams(temp=0.0))


@pytest.mark.parametrize("draft_max,p_min", [(1, 0.0), (2, 0.0), (4, 0.0), (8, 0.0), (4, 0.2), (8, 0.9)])
def test_greedy_output_identical_to_target_alone(engine, draft_max, p_min):
    engine.draft_options.draft_max = draft_max
    engine.drafter.p_min = p_min
    drafted = 0
    for text in random_prompts(10, seed=draft_max):
        tokens = engine.tokenize_prompt(text)
        plain = engine.generate(tokens, greedy(48), use_draft=False)
        spec = engine.generate(tokens, greedy(48))
        assert spec.tokens == plain.tokens, text
        assert spec.text == plain.text
        assert spec.stats.n_accepted <= spec.stats.n_drafted
        assert spec.stats.n_generated == len(spec.tokens)
        drafted += spec.stats.n_drafted
    if p_min < 0.9:
        assert drafted > 0


def test_self_draft_accepts_everything(self_draft_engine):
    for text in random_prompts(6, seed=7):
        tokens = self_draft_engine.tokenize_prompt(text)
        plain = self_draft_engine.generate(tokens, greedy(40), use_draft=False)
        spec = self_draft_engine.generate(tokens, greedy(40))
        assert spec.tokens == plain.tokens
        assert spec.stats.n_drafted > 0
        assert spec.stats.n_accepted == spec.stats.n_drafted
        assert spec.stats.tokens_per_pass > 3


class ScriptedDrafter(Drafter):
    """Proposes a known continuation, either exactly (all accepted) or off by one token id (all rejected)."""

    method = "scripted"

    def __init__(self, prompt_len: int, continuation: list[int], n_vocab: int, wrong: bool):
        self.prompt_len, self.continuation, self.n_vocab, self.wrong = prompt_len, continuation, n_vocab, wrong

    def draft(self, history, n_max):
        start = len(history) - self.prompt_len
        guess = self.continuation[start : start + n_max]
        return [(t + 1) % self.n_vocab for t in guess] if self.wrong else guess


@pytest.mark.parametrize("wrong", [False, True])
def test_scripted_drafts_all_accepted_or_all_rejected(engine, wrong):
    """All-rejected steps exercise the KV rollback on every pass; output must not change."""
    target = engine.target_ctx
    for text in random_prompts(5, seed=11):
        tokens = engine.tokenize_prompt(text)
        plain = engine.generate(tokens, greedy(40), use_draft=False)
        drafter = ScriptedDrafter(len(tokens), plain.tokens, target.model.n_vocab, wrong)
        session = Session(target, GreedyVerifier(), drafter, draft_max=5)
        out = [t for step in session.run(tokens, 40) for t in step.tokens]
        assert out == plain.tokens
        st = session.stats
        assert st.n_drafted > 0
        assert st.n_accepted == (0 if wrong else st.n_drafted)


def test_rollback_restores_the_cache(tiny_target):
    """Logits after decode -> roll back -> decode again equal those of a fresh evaluation."""
    model = Model(tiny_target)
    ctx = Context(model, ContextParams(n_ctx=128, n_outputs_max=8, **EXACT))
    try:
        prompt = model.tokenize("hello world this is")
        ctx.decode(prompt, 0, outputs="last")
        fresh = ctx.logits(-1).copy()
        ctx.decode([7, 8, 9, 10], len(prompt), outputs="all")
        ctx.kv_keep_until(len(prompt) - 1)
        ctx.decode(prompt[-1:], len(prompt) - 1, outputs="last")
        assert abs(ctx.logits(-1) - fresh).max() < 1e-3
    finally:
        ctx.close()
        model.close()


def test_max_tokens_is_exact(engine):
    tokens = engine.tokenize_prompt("hello world")
    for n in (1, 2, 3, 7, 9, 17):
        res = engine.generate(tokens, greedy(n))
        assert res.stats.n_generated == len(res.tokens) <= n
        if res.stats.stop_reason == "length":
            assert len(res.tokens) == n


def test_stop_string_cuts_the_text(engine):
    tokens = engine.tokenize_prompt("the world is")
    full = engine.generate(tokens, greedy(40), use_draft=False).text
    assert len(full) > 6
    stop = full[3:6]
    res = engine.generate(tokens, GenOptions(max_tokens=40, stop=[stop]))
    assert res.stats.stop_reason == "stop"
    assert res.text == full[: full.find(stop)]


def test_full_context_stops_cleanly(tiny_target, tiny_draft):
    eng = Engine(tiny_target, tiny_draft, options=EngineOptions(n_ctx=48, **EXACT), draft=DraftOptions(draft_max=8, p_min=0.0))
    try:
        n_ctx = eng.target_ctx.n_ctx  # llama.cpp may round the size up
        tokens = eng.tokenize_prompt("hello world " * 6)
        res = eng.generate(tokens, greedy(n_ctx * 2))
        assert res.stats.stop_reason == "context"
        assert len(tokens) + len(res.tokens) == n_ctx + 1  # the last token needs no cache slot
        plain = eng.generate(tokens, greedy(n_ctx * 2), use_draft=False)
        assert plain.tokens == res.tokens
    finally:
        eng.close()


def test_prompt_longer_than_context_is_refused(tiny_target):
    eng = Engine(tiny_target, None, options=EngineOptions(n_ctx=16, **EXACT))
    try:
        with pytest.raises(UsageError, match="context"):
            eng.tokenize_prompt("hello world " * 400)
    finally:
        eng.close()


def test_sampling_runs_are_reproducible_with_a_seed(engine):
    tokens = engine.tokenize_prompt("hello")
    gen = GenOptions(max_tokens=24, sampling=SamplingParams(temp=0.9, seed=123))
    a = engine.generate(tokens, gen)
    b = engine.generate(tokens, gen)
    assert a.tokens == b.tokens
    assert a.stats.n_generated > 0


def test_chat_template_renders(engine):
    text = engine.render_chat([{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert engine.tokenize_prompt(text)[0] == engine.target_model.bos


def test_merge_combines_every_stats_field():
    """A new field of GenerationStats must be given a rule in ``merge``: merged into an empty
    total, every field but the per-generation stop reason comes out as it went in."""
    from dataclasses import fields

    from specdec_cli.engine.stats import GenerationStats

    s = GenerationStats(n_prompt=5, n_generated=7, n_target_passes=4, n_eog=1, prompt_seconds=0.5,
                        decode_seconds=2.0, draft_seconds=0.5, target_seconds=1.0, first_token_seconds=0.6,
                        stop_reason="eog", method="auto", steps=[(3, 2), (2, 2)], fault="X: y",
                        drafter_fault="Z: w")
    s.record_acceptance(3, 2)
    s.record_acceptance(2, 2)
    s.record_step("draft", 3)
    s.record_step("ngram", 2)
    total = GenerationStats()
    total.merge(s)
    for f in fields(GenerationStats):
        if f.name not in ("stop_reason", "fault", "drafter_fault"):
            assert getattr(total, f.name) == getattr(s, f.name), f.name
    assert total.stop_reason == "" and total.fault is None and total.drafter_fault is None
    total.merge(s)
    assert total.n_drafted == 10 and total.accepted_per_position == [4, 4, 0] and total.steps_by_drafter["draft"] == 2
    assert total.first_token_seconds == 0.6 and len(total.steps) == 4


def test_result_dict_is_the_stats_schema_plus_the_run(engine):
    res = engine.generate(engine.tokenize_prompt("hello world"), greedy(8))
    d = res.to_dict()
    assert {k: d[k] for k in res.stats.to_dict()} == res.stats.to_dict()
    assert set(d) - set(res.stats.to_dict()) == {"text", "prompt_tokens", "tokens", "cost_model", "seed", "verify"}


def test_context_errors_carry_the_facts_and_name_no_flag(tiny_target):
    """The engine says what ran out and how much was needed; naming flags is the CLI's business."""
    eng = Engine(tiny_target, None, options=EngineOptions(n_ctx=16, **EXACT))
    try:
        ctx = eng.target_ctx
        with pytest.raises(PromptTooLong) as long_prompt:
            eng.tokenize_prompt("hello world " * 400)
        e = long_prompt.value
        assert e.n_ctx == ctx.n_ctx and e.needed > ctx.n_ctx and e.exit_code == 2 and "--" not in e.hint
        ctx.kv_clear()
        with pytest.raises(ContextFull) as full:
            for pos in range(ctx.n_ctx + 1):
                ctx.decode([eng.target_model.bos], pos)
        assert full.value.n_ctx == ctx.n_ctx and full.value.needed == ctx.n_ctx + 1 and "--" not in full.value.hint
    finally:
        eng.close()


def test_a_pass_ends_when_the_device_is_done(tiny_target, monkeypatch):
    """On a GPU llama_decode returns once the work is queued; costs timed around it alone were
    launch times (seen on an H200: a 16-token pass "took" 0.5 ms, a 1-token one 4 ms). Every
    decode must wait for the device inside its timed span."""
    import llama_cpp

    calls = []
    decode, sync = llama_cpp.llama_decode, llama_cpp.llama_synchronize
    monkeypatch.setattr(llama_cpp, "llama_decode", lambda *a: (calls.append("decode"), decode(*a))[1])
    monkeypatch.setattr(llama_cpp, "llama_synchronize", lambda *a: (calls.append("sync"), sync(*a))[1])
    model = Model(tiny_target)
    ctx = Context(model, ContextParams(n_ctx=64, n_outputs_max=4, **EXACT))
    try:
        tok = model.tokenize("hello world", add_special=False)
        ctx.decode(tok, 0, outputs="all")
        ctx.decode([tok[0]], len(tok))
    finally:
        ctx.close()
        model.close()
    assert calls == ["decode", "sync", "decode", "sync"]


# --- the prompt prefix kept between generations -------------------------------------------------
def test_a_prompt_reuses_the_prefix_the_last_generation_left_and_decodes_as_from_scratch(tiny_target):
    """One generation after another (a batch one at a time, bench): the target keeps the cells of
    the prompt head they share, as llama-server's prompt cache does, and the output is the one a
    fresh engine gives."""
    shared = "hello world this is the cat and the dog and one two three four five six"
    prompts = [shared + " we can see", shared + " the world is", "one two three four five"]
    gen = GenOptions(max_tokens=24)

    def fresh(tokens):
        eng = Engine(tiny_target, None, options=EngineOptions(n_ctx=512, **EXACT), method=None)
        try:
            return eng.generate(tokens, gen)
        finally:
            eng.close()

    eng = Engine(tiny_target, None, options=EngineOptions(n_ctx=512, **EXACT), method="ngram",
                 draft=DraftOptions(draft_max=4))
    try:
        toks = [eng.tokenize_prompt(p) for p in prompts]
        first = eng.generate(toks[0], gen)
        assert first.stats.n_prompt_reused == 0
        second = eng.generate(toks[1], gen)
        common = next(i for i, (a, b) in enumerate(zip(toks[0], toks[1])) if a != b)
        assert second.stats.n_prompt_reused == common > 10
        again = eng.generate(toks[1], gen, use_draft=False)
        assert again.stats.n_prompt_reused == len(toks[1]) - 1  # all but the last token, which the first pass reads
        other = eng.generate(toks[2], gen)
        assert other.stats.n_prompt_reused == next(i for i, (a, b) in enumerate(zip(toks[1], toks[2])) if a != b) < 2
        for tokens, res in zip([toks[0], toks[1], toks[1], toks[2]], [first, second, again, other]):
            assert res.tokens == fresh(tokens).tokens
    finally:
        eng.close()


def test_the_context_knows_what_sequence_0_holds(tiny_target):
    model = Model(tiny_target)
    ctx = Context(model, ContextParams(n_ctx=128, n_seq_max=2, n_outputs_max=4))
    try:
        assert ctx.held_prefix([5, 6, 7], 3) == 0
        ctx.decode([5, 6, 7, 8], 0)
        assert ctx.held_prefix([5, 6, 7, 9], 4) == 3 and ctx.held_prefix([5, 6, 7, 8], 2) == 2
        ctx.kv_keep_until(2)
        assert ctx.held_prefix([5, 6, 7], 3) == 2
        ctx.decode([9], 2)
        assert ctx.held_prefix([5, 6, 9], 3) == 3
        ctx.seq_rm(0, 1, 2)  # a hole: nothing known from position 1 on
        assert ctx.held_prefix([5, 6, 9], 3) == 1
        ctx.decode_many([1, 2], [3, 0], [0, 1], [False, True])  # many sequences: no longer followed
        assert ctx.held_prefix([5, 1], 2) == 0
        ctx.kv_clear()
        ctx.decode([3, 4], 0)
        assert ctx.held_prefix([3, 4], 2) == 2
    finally:
        ctx.close()
        model.close()


def test_filler_tokens_leave_the_rows_and_the_cache_as_without_them(tiny_target):
    """A padded pass reads the same logits and leaves the cache holding what it would without the
    filler; where the cells cannot hold the filler, the pass runs without it."""
    model = Model(tiny_target)
    params = ContextParams(n_ctx=64, n_seq_max=2, n_outputs_max=4, **EXACT)
    plain, padded = Context(model, params), Context(model, params)
    try:
        prompt = [5, 6, 7, 8, 9, 10]
        for ctx in (plain, padded):
            ctx.decode(prompt, 0)
        assert plain.decode([11, 12, 13], 6, outputs="all") == 0
        assert padded.decode([11, 12, 13], 6, outputs="all", pad=5) == 5
        assert padded.pos_max() == plain.pos_max() == 8
        assert padded.held_prefix([*prompt, 11, 12, 13, 14], 10) == 9
        for i in range(3):
            assert padded.logits(i) == pytest.approx(plain.logits(i), abs=1e-3)
        for ctx in (plain, padded):  # sequence 1 beside it, many sequences in one pass
            ctx.decode_many([5, 6, 14], [0, 1, 9], [1, 1, 0], [False, True, True])
        assert padded.decode_many([7, 15], [2, 10], [1, 0], [True, True], pad=4) == 4
        plain.decode_many([7, 15], [2, 10], [1, 0], [True, True])
        assert padded.pos_max(0) == 10 and padded.pos_max(1) == 2
        for i in range(2):
            assert padded.logits(i) == pytest.approx(plain.logits(i), abs=1e-3)
        fill = [20 + i % 50 for i in range(padded.n_ctx - 14 - 2)]  # the cells all but full
        for at in range(0, len(fill), 32):
            part = fill[at : at + 32]
            padded.decode_many(part, list(range(3 + at, 3 + at + len(part))), [1] * len(part), [False] * len(part))
        assert padded.decode_many([16], [11], [0], [True], pad=4) == 0  # no room for the filler
        assert padded.pos_max(0) == 11
    finally:
        plain.close()
        padded.close()
        model.close()

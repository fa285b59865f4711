"""Speculation inside tool calls keeps the output the constrained target's own: greedy outputs
identical to the target alone with every drafter in play (the draft model, the suffix index and
the edit tracker over the conversation's JSON spellings, the tokens the grammar forces), alone
and many at once; at temperature 1 the first free choice of a call follows the masked target."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
from specdec_cli.engine.decode.scheduler import Job
from specdec_cli.engine.verify.verifiers import SamplingParams
from specdec_cli.toolcalls.request import read_tools
from specdec_cli.toolcalls.turn import ChatPrompter
from test_auto import gpu_like
from test_exact_sampling import chi_square
from test_structured import masked_law

EXACT = dict(flash_attn="off", cache_type_k="f32", cache_type_v="f32")
WRITE = {"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"enum": ["a.py", "b.py"]}, "content": {"type": "string", "maxLength": 60}},
    "required": ["path", "content"]}}}
KIND = {"type": "function", "function": {"name": "pick", "parameters": {
    "type": "object", "properties": {"kind": {"enum": ["cat", "dog", "bird", "fish", "one", "two", "the", "world"]}},
    "required": ["kind"]}}}
FILE = 'def f(x):\n    return "the cat and the dog"\n\n\ndef g(y):\n    return f(y) + "hello world"\n'
CHATS = [
    [{"role": "user", "content": f"rename f to h in a.py and save it:\n{FILE}"}],
    [{"role": "user", "content": "hello world this is the cat and the dog"}],
    [{"role": "user", "content": f"save b.py:\n{FILE}"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write_file",
                                                      "arguments": json.dumps({"path": "b.py", "content": FILE[:50]})}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "written"}, {"role": "user", "content": "again, whole"}],
]


@pytest.fixture(scope="module")
def engine(tiny_tool_target, tiny_tool_draft):
    eng = Engine(tiny_tool_target, tiny_tool_draft, options=EngineOptions(n_ctx=2048, n_seq=3, **EXACT),
                 draft=DraftOptions(draft_max=8, p_min=0.0), method="auto")
    eng.set_costs(gpu_like(0.02))  # every drafter drafts
    yield eng
    eng.close()


@pytest.mark.parametrize("choice", ["required", "auto", {"type": "function", "function": {"name": "write_file"}}])
def test_greedy_calls_equal_the_constrained_target_alone(engine, choice):
    prompter = ChatPrompter(engine.target_model, engine.n_ctx_seq)
    turns = [prompter.turn(chat, read_tools([WRITE, KIND], choice)) for chat in CHATS]
    base = GenOptions(max_tokens=200)
    gens = [replace(base, grammar=t.grammar, shown=t.shown) for t in turns]
    alone = [engine.generate(t.tokens, g, use_draft=False) for t, g in zip(turns, gens)]
    drafted = 0
    for t, g, a in zip(turns, gens, alone):
        spec = engine.generate(t.tokens, g)
        assert spec.tokens == a.tokens
        drafted += spec.stats.n_drafted
    jobs = [Job(i, t.tokens, gen=g, sources=t.sources) for i, (t, g) in enumerate(zip(turns, gens))]
    for job, res in engine.run_many(jobs, base, n_parallel=3):
        assert res.tokens == alone[job.index].tokens
        reply = turns[job.index].read(res.text)
        if choice != "auto":
            assert reply.calls and res.stats.stop_reason == "grammar"
        for call in reply.calls:
            assert call.complete and isinstance(json.loads(call.arguments), dict)
        drafted += res.stats.n_drafted
    assert drafted > 0


def test_sampled_first_choice_of_a_call_follows_the_masked_target(tiny_tool_target, tiny_tool_draft):
    eng = Engine(tiny_tool_target, tiny_tool_draft, options=EngineOptions(n_ctx=2048, threads=1, **EXACT),
                 draft=DraftOptions(draft_max=4, p_min=0.0), method="auto")
    try:
        eng.set_costs(gpu_like(0.02))
        prompter = ChatPrompter(eng.target_model, eng.n_ctx_seq)
        turn = prompter.turn([{"role": "user", "content": "hello world this is the cat"}],
                             read_tools([KIND], {"type": "function", "function": {"name": "pick"}}))
        # <tool_call>\n{"name": "pick", "arguments": {"kind": " forced, then the kind's first token
        opening, law = masked_law(eng, turn.tokens, turn.grammar)
        n = 600
        seen: Counter = Counter()
        for seed in range(n):
            gen = GenOptions(max_tokens=len(opening) + 1, grammar=turn.grammar,
                             sampling=SamplingParams(temp=1.0, top_k=0, top_p=1.0, seed=seed))
            res = eng.generate(turn.tokens, gen)
            assert res.tokens[: len(opening)] == opening
            seen[res.tokens[len(opening)]] += 1
        stat, df, p = chi_square(seen, law, n)
        assert set(seen) <= set(law) and len(law) > 1
        assert p >= 0.001, f"chi2={stat:.1f} df={df} p={p:.3g}"
    finally:
        eng.close()

"""Structured output in the decode loop: masked rows, forced tokens as drafts, and the output law."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
from specdec_cli.engine.decode.scheduler import Job
from specdec_cli.engine.structured.constraint import compile_constraint, tokenizer_for
from specdec_cli.engine.verify.verifiers import Sampler, SamplingParams
from specdec_cli.terminal.constraint_args import ConstraintSpec
from test_auto import gpu_like
from test_exact_sampling import chi_square

jsonschema = pytest.importorskip("jsonschema")

EXACT = dict(flash_attn="off", cache_type_k="f32", cache_type_v="f32")
SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                      "kind": {"enum": ["cat", "dog", "bird"]}},
     "required": ["name", "kind"], "additionalProperties": False},
    {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer", "minimum": 0,
                                                                           "maximum": 99}, "maxItems": 4},
                                      "ok": {"type": "boolean"}},
     "required": ["items", "ok"], "additionalProperties": False},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999}, "tags": {"type": "array", "maxItems": 2,
                                                                      "items": {"enum": ["a", "b"]}}},
        "required": ["id", "tags"], "additionalProperties": False}},
     "required": ["user"], "additionalProperties": False},
]
PROMPTS = ["hello world this is the cat and", "one two three four five six", "we can see that one of the"]


@pytest.fixture(scope="module")
def engine(tiny_target, tiny_draft):
    eng = Engine(tiny_target, tiny_draft, options=EngineOptions(n_ctx=512, n_seq=3, **EXACT),
                 draft=DraftOptions(draft_max=8, p_min=0.0), method="auto")
    eng.set_costs(gpu_like(0.02))  # the draft model, the index and the forced tokens all draft
    yield eng
    eng.close()


def _grammar(eng, schema):
    return compile_constraint(ConstraintSpec("json_schema", json.dumps(schema), "--json-schema"),
                              tokenizer_for(eng.target_model))


def test_constrained_greedy_equals_the_constrained_target_alone_and_validates(engine):
    forced = 0
    sources: Counter = Counter()
    for schema in SCHEMAS:
        gen = GenOptions(max_tokens=96, grammar=_grammar(engine, schema))
        for text in PROMPTS:
            tokens = engine.tokenize_prompt(text)
            alone = engine.generate(tokens, gen, use_draft=False)
            spec = engine.generate(tokens, gen)
            assert spec.tokens == alone.tokens, (schema, text)
            assert spec.stats.stop_reason == alone.stats.stop_reason == "grammar"
            jsonschema.validate(json.loads(spec.text), schema)
            forced += spec.stats.n_forced
            sources.update(spec.stats.steps_by_drafter)
    assert forced > 0 and sources["grammar"] + sources["ngram"] + sources["edit"] > 0, sources


def test_many_at_once_obey_their_own_schemas(engine):
    prompts = [engine.tokenize_prompt(t) for t in PROMPTS]
    grammars = [_grammar(engine, s) for s in SCHEMAS]
    base = GenOptions(max_tokens=96)
    alone = [engine.generate(p, replace(base, grammar=g), use_draft=False) for p, g in zip(prompts, grammars)]
    jobs = [Job(i, p, gen=replace(base, grammar=g)) for i, (p, g) in enumerate(zip(prompts, grammars))]
    for job, res in engine.run_many(jobs, base, n_parallel=3):
        assert res.tokens == alone[job.index].tokens
        jsonschema.validate(json.loads(res.text), SCHEMAS[job.index])
        assert res.stats.stop_reason == "grammar"


def test_rows_the_grammar_decides_alone_get_no_logits_and_change_nothing(engine, monkeypatch):
    """Where a row's mask allows one token, llama.cpp computes no logits for it (a quarter of a
    step on a CPU); the outputs, alone, drafted and many at once, are those with every row."""
    from specdec_cli.engine.structured import pass_masks

    prompts = [engine.tokenize_prompt(t) for t in PROMPTS]
    grammars = [_grammar(engine, s) for s in SCHEMAS]
    base = GenOptions(max_tokens=96)

    def outputs() -> list[list[int]]:
        out = []
        for p, g in zip(prompts, grammars):
            gen = replace(base, grammar=g)
            out += [engine.generate(p, gen, use_draft=False).tokens, engine.generate(p, gen).tokens]
        jobs = [Job(i, p, gen=replace(base, grammar=g)) for i, (p, g) in enumerate(zip(prompts, grammars))]
        out += [r.tokens for _j, r in sorted(engine.run_many(jobs, base, n_parallel=3), key=lambda x: x[0].index)]
        return out

    fixed = []
    real = pass_masks.only_allowed

    def counting(masks):
        only = real(masks)
        fixed.extend(t for t in only if t is not None)
        return only

    monkeypatch.setattr(pass_masks, "only_allowed", counting)
    skipping = outputs()
    monkeypatch.setattr(pass_masks, "only_allowed", lambda masks: [None] * len(masks))  # every row
    assert outputs() == skipping
    assert len(fixed) > 20, fixed


def masked_law(eng, prompt: list[int], grammar) -> tuple[list[int], dict[int, float]]:
    """The tokens ``grammar`` forces after ``prompt``, and the law of the next one at temperature 1:
    the target's logits there, masked to what the grammar allows."""
    cons = eng.constraint(grammar)
    opening = cons.forced_tokens()
    ctx = eng.target_ctx
    ctx.kv_clear()
    ctx.decode(prompt + opening, 0, outputs="last")
    logits = np.array(ctx.logits(-1))
    cons.consume(opening)
    cons.mask(logits)
    ids, probs = Sampler(SamplingParams(temp=1.0, top_k=0, top_p=1.0)).distribution(logits)
    return opening, {int(t): float(p) for t, p in zip(ids, probs)}


def test_sampled_first_tokens_follow_the_masked_target(tiny_target, tiny_draft):
    """At temperature 1 the first token of an enum's value is drawn from the target's distribution
    restricted to what the grammar allows, with drafts in play."""
    schema = {"enum": ["cat", "dog", "bird", "fish", "one", "two", "the", "world"]}
    eng = Engine(tiny_target, tiny_draft, options=EngineOptions(n_ctx=128, threads=1, **EXACT),
                 draft=DraftOptions(draft_max=4, p_min=0.0), method="auto")
    try:
        eng.set_costs(gpu_like(0.02))
        grammar = _grammar(eng, schema)
        prompt = eng.tokenize_prompt("hello world this is the cat and the dog")
        opening, law = masked_law(eng, prompt, grammar)  # the opening quote, and what may follow it
        n = 800
        seen: Counter = Counter()
        for seed in range(n):
            gen = GenOptions(max_tokens=len(opening) + 1, grammar=grammar,
                             sampling=SamplingParams(temp=1.0, top_k=0, top_p=1.0, seed=seed))
            res = eng.generate(prompt, gen)
            assert res.tokens[: len(opening)] == opening
            seen[res.tokens[len(opening)]] += 1
        stat, df, p = chi_square(seen, law, n)
        assert set(seen) <= set(law)
        assert p >= 0.001, f"chi2={stat:.1f} df={df} p={p:.3g}"
    finally:
        eng.close()


# --- the command line ----------------------------------------------------------------------------
def test_run_with_a_schema_prints_valid_json(tiny_target, tiny_draft, tmp_path):
    from test_cli import EXACT as CLI_EXACT
    from test_cli import specdec

    path = tmp_path / "s.json"
    path.write_text(json.dumps(SCHEMAS[0]))
    proc = specdec("run", "-t", tiny_target, "-d", tiny_draft, *CLI_EXACT, "-n", "96", "--json-schema", f"@{path}",
                   "--json", "hello world")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    jsonschema.validate(json.loads(out["text"]), SCHEMAS[0])
    assert out["stop_reason"] == "grammar" and out["n_forced"] >= 0
    plain = specdec("run", "-t", tiny_target, "--no-draft", *CLI_EXACT, "-n", "96", "--json-schema", f"@{path}",
                    "--json", "hello world")
    assert json.loads(plain.stdout)["tokens"] == out["tokens"]


def test_a_schema_that_cannot_be_met_within_n_exits_1_with_the_partial_text(tiny_target):
    from test_cli import EXACT as CLI_EXACT
    from test_cli import specdec

    schema = json.dumps({"type": "object", "properties": {"a": {"type": "string", "minLength": 50}},
                         "required": ["a"]})
    proc = specdec("run", "-t", tiny_target, *CLI_EXACT, "-n", "8", "--json-schema", schema, "hello")
    assert proc.returncode == 1
    assert proc.stdout.startswith('{"a": "')  # the partial text stays printed
    assert proc.stderr.strip().splitlines()[-1].startswith("error: the output does not satisfy --json-schema")


@pytest.mark.parametrize("args", [
    ["--json-schema", "{not json"],
    ["--json-schema", '{"type": "object", "dependentSchemas": {"a": {}}}'],
    ["--json-schema", "false"],
    ["--regex", "a^b"],
    ["--json-schema", "{}", "--regex", "a"],
])
def test_bad_constraints_are_one_line_and_exit_2_before_loading(tiny_target, args):
    from test_cli import specdec

    proc = specdec("run", "-t", tiny_target, "-n", "4", *args, "hello")
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error:")


def test_an_empty_grammar_file_is_exit_2(tiny_target, tmp_path):
    from test_cli import specdec

    empty = tmp_path / "g.gbnf"
    empty.write_text("")
    proc = specdec("run", "-t", tiny_target, "-n", "4", "--grammar-file", empty, "hello")
    assert proc.returncode == 2 and "empty" in proc.stderr


def test_methods_that_cannot_honour_a_grammar_are_refused():
    from specdec_cli.commands.structured import check_before_load
    from specdec_cli.errors import UsageError

    spec = ConstraintSpec("regex", "[a-z]+", "--regex")
    for method in ("eagle3", "dflash", "dspark", "mtp"):
        with pytest.raises(UsageError) as err:
            check_before_load(spec, [], method)
        assert err.value.exit_code == 2 and "--method" in str(err.value)
    check_before_load(spec, [], "auto")  # fine


def test_batch_lines_carry_their_own_schema(tiny_target, tmp_path):
    from test_cli import EXACT as CLI_EXACT
    from test_cli import specdec

    batch = tmp_path / "b.jsonl"
    batch.write_text("".join(json.dumps({"prompt": p, "json_schema": s}) + "\n" for p, s in zip(PROMPTS, SCHEMAS)))
    proc = specdec("run", "-t", tiny_target, *CLI_EXACT, "-n", "96", "--batch", batch, "--parallel", "3")
    assert proc.returncode == 0, proc.stderr
    for line, schema in zip(proc.stdout.splitlines(), SCHEMAS):
        jsonschema.validate(json.loads(json.loads(line)["text"]), schema)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "x", "json_schema": "nope"}) + "\n")
    proc = specdec("run", "-t", tiny_target, "--batch", bad)
    assert proc.returncode == 2 and "json_schema" in proc.stderr

"""Structured output with llguidance: the tokenizer built from a llama.cpp vocabulary, compiling
JSON Schema / grammars / regexes with one-line usage errors, and what a speculative loop needs
from a matcher (masks, forced tokens, draft validation, masks along a draft)."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specdec_cli.engine.llama.model import Model
from specdec_cli.engine.structured.constraint import (
    Constraint,
    ConstraintViolation,
    apply_mask,
    compile_constraint,
    tokenizer_for,
)
from specdec_cli.errors import EXIT_USAGE, UsageError
from specdec_cli.terminal.constraint_args import ConstraintSpec, read_constraint

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "color": {"enum": ["red", "green", "blue"]},
    },
    "required": ["name", "color"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def model(tiny_target):
    m = Model(tiny_target)
    yield m
    m.close()


@pytest.fixture(scope="module")
def tok(model):
    return tokenizer_for(model)


def schema_spec(schema=SCHEMA) -> ConstraintSpec:
    return ConstraintSpec("json_schema", json.dumps(schema), "--json-schema")


def constraint(tok, spec: ConstraintSpec, **kw) -> Constraint:
    return Constraint(compile_constraint(spec, tok), tok, **kw)


def random_decode(c: Constraint, tok, seed: int, n_vocab: int, max_tokens: int = 300) -> str:
    """Greedy decoding of random logits under the constraint, until it stops or picks EOS."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(max_tokens):
        logits = rng.standard_normal(n_vocab).astype(np.float32)
        c.mask(logits)
        t = int(np.argmax(logits))
        assert np.isfinite(logits[t])
        c.consume([t])
        if t in tok.eos_tokens:
            break
        out.append(t)
        if c.is_stopped():
            break
    assert c.is_accepting()
    return tok.decode_str(out)


# --- tokenizer -------------------------------------------------------------------------------


def test_tokenizer_round_trips(model, tok):
    assert tok.vocab_size == model.n_vocab
    assert tokenizer_for(model) is tok  # cached per model
    assert sorted(tok.eos_tokens) == [t for t in range(model.n_vocab) if model.is_eog(t)]
    text = 'hello world, the {"a": [1, 2]}!'
    ids = model.tokenize(text, add_special=False)
    assert tok.decode_bytes(ids) == b"".join(model.piece(t) for t in ids)
    assert tok.decode_str(tok.tokenize_str(text)) == text
    assert tok.is_special_token(3)  # <|im_start|>, a control token


# --- compiling -------------------------------------------------------------------------------


def test_schema_compiles_without_and_with_a_tokenizer(tok):
    early = compile_constraint(schema_spec())  # before any model loads
    late = compile_constraint(schema_spec(), tok)
    assert early.text == late.text and late.origin == "--json-schema"
    Constraint(early, tok)


@pytest.mark.parametrize("spec, needle", [
    (ConstraintSpec("json_schema", '{"type": "objekt"}', "--json-schema s.json"), "objekt"),
    (ConstraintSpec("json_schema", '{"type": "object", "dependentSchemas": {"a": {}}}', "--json-schema"),
     "dependentSchemas"),
    (ConstraintSpec("json_schema", "false", "--json-schema"), "nothing satisfies"),
    (ConstraintSpec("grammar", "", "--grammar-file g.gbnf"), "empty grammar"),
    (ConstraintSpec("grammar", "  \n", "--grammar-file g.gbnf"), "empty grammar"),
    (ConstraintSpec("grammar", 'root ::= "a" (', "--grammar-file g.gbnf"), "line 1"),
    (ConstraintSpec("grammar", 'start: "a" b\n', "--grammar-file g.lark"), "line 1, column 8"),
    (ConstraintSpec("regex", "a^b", "--regex"), "a^b"),
    (ConstraintSpec("regex", "a(b", "--regex"), "column 2"),
    (ConstraintSpec("regex", r"ab[^\x00-\x{10FFFF}]", "--regex"), "no text matches"),
])
@pytest.mark.parametrize("with_tokenizer", [False, True])
def test_bad_constraints_are_one_line_usage_errors(tok, spec, needle, with_tokenizer):
    with pytest.raises(UsageError) as err:
        compile_constraint(spec, tok if with_tokenizer else None)
    msg = err.value.one_line()
    assert err.value.exit_code == EXIT_USAGE
    assert "\n" not in msg and len(msg) < 400
    assert str(err.value).startswith(spec.origin + ": ")
    assert needle in msg


def test_special_token_names_are_checked_against_the_vocabulary(tok):
    ok = ConstraintSpec("grammar", 'start: "yes" <|im_end|>\n', "--grammar-file g.lark")
    compile_constraint(ok)  # cannot be checked before the model loads
    c = constraint(tok, ok)
    yes = tok.tokenize_str("yes")
    c.consume(yes)
    assert c.forced_tokens() == [4]
    bad = ConstraintSpec("grammar", 'start: "yes" <|nope|>\n', "--grammar-file g.lark")
    with pytest.raises(UsageError, match="nope"):
        compile_constraint(bad, tok)


# --- decoding under a constraint -------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_masked_random_decoding_gives_valid_json(model, tok, seed):
    c = constraint(tok, schema_spec())
    text = random_decode(c, tok, seed, model.n_vocab)
    jsonschema.validate(json.loads(text), SCHEMA)


def test_gbnf_and_regex_decode_to_what_they_describe(model, tok):
    gbnf = ConstraintSpec("grammar", 'root ::= answer "."\nanswer ::= "yes" | "no"\n', "--grammar-file g.gbnf")
    regex = ConstraintSpec("regex", r"[0-9]{3}-[a-z]{2,4}", "--regex")
    for seed in range(3):
        assert random_decode(constraint(tok, gbnf), tok, seed, model.n_vocab) in ("yes.", "no.")
        assert re.fullmatch(r"[0-9]{3}-[a-z]{2,4}", random_decode(constraint(tok, regex), tok, seed, model.n_vocab))


def test_forced_tokens_follow_the_brace(tok):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    c = constraint(tok, schema_spec(schema))
    brace = tok.tokenize_str("{")
    assert c.forced_tokens()[: len(brace)] == brace
    c.consume(brace)
    forced = c.forced_tokens()
    assert tok.decode_str(forced) == '"name": "'
    c.consume(forced)
    assert c.forced_tokens() == []  # the string's content is free
    c.consume(tok.tokenize_str('Al"'))
    assert tok.decode_str(c.forced_tokens()) == ', "age": '


def test_validate_draft_stops_at_the_first_illegal_token(tok):
    c = constraint(tok, schema_spec())
    good = tok.tokenize_str('{"name": "ab"')
    before = c.allowed_mask()
    assert c.validate_draft(good + tok.tokenize_str("X}")) == len(good)
    assert c.validate_draft(good) == len(good)
    assert c.validate_draft(tok.tokenize_str("[")) == 0
    assert c.validate_draft([]) == 0
    assert np.array_equal(c.allowed_mask(), before)  # nothing consumed


def test_masks_along_a_draft_match_consuming_one_by_one(tok):
    spec = schema_spec()
    c = constraint(tok, spec)
    c.consume(tok.tokenize_str("{"))
    valid = tok.tokenize_str('"name": "ab", "color": "re')
    draft = valid + tok.tokenize_str("Z")
    before = c.allowed_mask()
    masks = c.masks_along(draft)
    assert masks.shape == (len(valid) + 1, tok.vocab_size)
    assert np.array_equal(c.allowed_mask(), before)  # rolled back
    for i in range(len(valid) + 1):
        step = constraint(tok, spec)
        step.consume(tok.tokenize_str("{") + valid[:i])
        assert np.array_equal(masks[i], step.allowed_mask()), i


@pytest.mark.parametrize("pattern", ["ab", "ab(ab)*"])
def test_masks_along_through_the_end_of_sequence_roll_back(tok, pattern):
    # llguidance records an EOS only when it is consumed before the matcher stopped
    c = constraint(tok, ConstraintSpec("regex", pattern, "--regex"))
    draft = tok.tokenize_str("ab") + [tok.eos_token]
    before, forced = c.allowed_mask(), c.forced_tokens()
    masks = c.masks_along(draft)
    assert len(masks) == len(draft) + 1
    assert np.array_equal(c.allowed_mask(), before) and not c.is_stopped()
    assert c.forced_tokens() == forced == tok.tokenize_str("ab")
    c.consume(draft)
    assert c.is_stopped()


def test_consume_rejects_an_illegal_token_and_keeps_the_state(tok):
    c = constraint(tok, schema_spec())
    before = c.allowed_mask()
    with pytest.raises(ConstraintViolation, match="position 1"):
        c.consume(tok.tokenize_str("{") + tok.tokenize_str("}"))
    assert np.array_equal(c.allowed_mask(), before)
    assert c.error() == ""


def test_accepting_stopped_and_reset(tok):
    c = constraint(tok, ConstraintSpec("regex", "ab(ab)?", "--regex"))
    assert not c.is_accepting() and not c.is_stopped()
    c.consume(tok.tokenize_str("ab"))
    assert c.is_accepting() and not c.is_stopped()  # "abab" could follow
    c.consume(tok.tokenize_str("ab"))
    assert c.is_stopped()
    allowed = np.flatnonzero(c.allowed_mask())
    assert sorted(allowed.tolist()) == sorted(tok.eos_tokens)  # only the end of sequence is left
    assert c.validate_draft([tok.eos_token]) == 1 and c.validate_draft(tok.tokenize_str("a")) == 0
    assert len(c.masks_along([tok.eos_token])) == 2
    c.consume([tok.eos_token])
    assert c.is_stopped() and c.is_accepting()
    c.reset()
    assert not c.is_accepting() and c.validate_draft(tok.tokenize_str("abab")) == 4


def test_logit_rows_wider_or_narrower_than_the_vocabulary(tok):
    spec = ConstraintSpec("regex", "[0-9]+", "--regex")
    wide = constraint(tok, spec, n_vocab=tok.vocab_size + 9)
    allowed = wide.allowed_mask()
    assert allowed.shape == (tok.vocab_size + 9,) and not allowed[tok.vocab_size:].any()
    digits = [t for t in range(tok.vocab_size) if tok.decode_bytes([t]) in [str(d).encode() for d in range(10)]]
    assert sorted(np.flatnonzero(allowed).tolist()) == sorted(digits)
    logits = np.zeros(tok.vocab_size + 20, dtype=np.float32)
    wide.mask(logits)
    assert np.isneginf(logits[tok.vocab_size:]).all()
    assert sorted(np.flatnonzero(np.isfinite(logits)).tolist()) == sorted(digits)
    narrow = constraint(tok, spec, n_vocab=100)  # drops bits past the row
    row = np.zeros(100, dtype=np.float32)
    narrow.mask(row)
    assert sorted(np.flatnonzero(np.isfinite(row)).tolist()) == [d for d in digits if d < 100]
    rows = np.zeros((2, tok.vocab_size), dtype=np.float32)
    apply_mask(rows, np.stack([allowed[: tok.vocab_size]] * 2))
    assert np.array_equal(np.isfinite(rows[1]), allowed[: tok.vocab_size])


# --- reading the options ---------------------------------------------------------------------


def test_read_constraint_options(tmp_path):
    assert read_constraint() is None
    inline = read_constraint(json_schema='{"type": "object"}')
    assert inline == ConstraintSpec("json_schema", '{"type": "object"}', "--json-schema")
    f = tmp_path / "s.json"
    f.write_text(json.dumps(SCHEMA))
    assert read_constraint(json_schema=f"@{f}").origin == f"--json-schema {f}"
    g = tmp_path / "g.gbnf"
    g.write_text('root ::= "a"\n')
    assert read_constraint(grammar_file=g) == ConstraintSpec("grammar", 'root ::= "a"\n', f"--grammar-file {g}")
    assert read_constraint(regex="[a-z]+").kind == "regex"


def test_read_constraint_errors_name_the_file_and_position(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "type": "object",\n  "properties": {,}\n}')
    cases = [
        (dict(json_schema=f"@{bad}"), [str(bad), "line 3, column 18"]),
        (dict(json_schema="{'a': 1}"), ["--json-schema", "line 1, column 2"]),
        (dict(json_schema="[1, 2]"), ["an array"]),
        (dict(json_schema=f"@{tmp_path / 'missing.json'}"), ["missing.json", "no such file"]),
        (dict(grammar_file=tmp_path), [str(tmp_path), "directory"]),
        (dict(json_schema="{}", regex="a"), ["--json-schema and --regex"]),
    ]
    latin1 = tmp_path / "latin1.gbnf"
    latin1.write_bytes(b'root ::= "caf\xe9"\n')
    cases.append((dict(grammar_file=latin1), ["latin1.gbnf", "offset 13"]))
    for kwargs, needles in cases:
        with pytest.raises(UsageError) as err:
            read_constraint(**kwargs)
        msg = err.value.one_line()
        assert err.value.exit_code == EXIT_USAGE and "\n" not in msg
        for needle in needles:
            assert needle in msg, (kwargs, msg)


def test_the_terminal_layer_does_not_load_llguidance():
    code = ("import sys, specdec_cli.terminal.constraint_args; "
            "sys.exit(any(m.startswith(('llguidance', 'specdec_cli.engine')) for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1]).returncode == 0


# --- the real vocabulary ---------------------------------------------------------------------

REAL = Path(os.path.expanduser("~/.cache/specdec/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))


@pytest.mark.real
@pytest.mark.skipif(not REAL.exists(), reason=f"{REAL} is not fetched")
def test_real_vocabulary_compiles_a_schema():
    if "vocab_only" not in inspect.signature(Model).parameters:
        pytest.skip("Model cannot load a vocabulary alone (no vocab_only)")
    m = Model(REAL, vocab_only=True)
    try:
        tok = tokenizer_for(m)
        c = constraint(tok, schema_spec(), n_vocab=m.n_vocab)
        assert tok.decode_str(c.forced_tokens()).startswith('{"name": "')
        text = '{"name": "Alice", "color": "red"}'
        ids = m.tokenize(text, add_special=False)
        assert c.validate_draft(ids) == len(ids)
    finally:
        m.close()

"""Differential fuzzing of speculation under a constraint: adversarial drafters, every grammar kind.

The promise: under any drafter and any constraint, a kept token is the constrained target's own
choice. The drafters here are built to break it, not to help: random tokens; copies of the
conversation (an earlier call's JSON, a tool result, the prompt); the target's own answer with
one token swapped for one that closes an object early, skips a required key or ends the
generation; and drafts that run past the end of the output. They hand their drafts straight to
the pass, with nothing cut (the production drafters cut nothing either: ``PassMasks.along`` is
the one place a draft meets the grammar), on the many-sequence path (``Scheduler``) and the
one-sequence path (``Session``), at draft lengths 1, 2 and 8.

Properties, per grammar kind (tool calls required and auto after a ``read_file`` call and its
result, as agents send them; a JSON Schema; a regex; a Lark grammar):

- no generation faults (no ``ConstraintViolation`` leaves the engine);
- greedy output is token for token the constrained target's alone (f32 fixtures: no batch-shape
  ties);
- of the drafted tokens the grammar forbids, none is kept;
- at temperature 1, the first free token after a call's forced opening follows the masked
  target's law (chi-square) with a drafter that offers forbidden and unlikely tokens first.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
from specdec_cli.engine.decode.scheduler import Job
from specdec_cli.engine.drafters.base import Drafter
from specdec_cli.engine.drafters.draft import Draft
from specdec_cli.engine.structured.constraint import compile_constraint, tokenizer_for
from specdec_cli.engine.structured.pass_masks import PassMasks
from specdec_cli.engine.verify.verifiers import Proposal, SamplingParams
from specdec_cli.terminal.constraint_args import ConstraintSpec
from specdec_cli.toolcalls.request import read_tools
from specdec_cli.toolcalls.turn import ChatPrompter
from test_auto import gpu_like
from test_exact_sampling import chi_square
from test_structured import SCHEMAS, masked_law

EXACT = dict(flash_attn="off", cache_type_k="f32", cache_type_v="f32")
READ = {"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
WRITE = {"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string", "maxLength": 12},
                                     "content": {"type": "string", "maxLength": 40}},
    "required": ["path", "content"]}}}
TESTS = {"type": "function", "function": {"name": "run_tests", "parameters": {"type": "object", "properties": {}}}}
FILE = "def f(x):\n    return the cat and the dog\n"
ASKS = ["add a docstring to f in a.py", "rename f to g in a.py", "hello world this is the cat"]
TEXTS = ["hello world this is the cat and", "one two three four five six", "we can see that one of the"]
REGEX = r"(the|a) (cat|dog|bird)( and (the|a) (cat|dog|bird)){0,4}"
LARK = 'start: item (" and " item)*\nitem: "the " NAME | "one " NAME\nNAME: "cat" | "dog" | "world"\n'
LENGTHS = (1, 2, 8)


def agent_chat(ask: str) -> list[dict]:
    """The issue's shape: a system prompt, the ask, a ``read_file`` call and its result."""
    return [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": ask},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "read_file", "arguments": json.dumps({"path": "a.py"})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": FILE}]


@dataclass
class Case:
    """One prompt under one grammar, and what the constrained target writes alone."""

    prompt: list[int]
    gen: GenOptions
    sources: tuple[list[int], ...] = ()
    alone: list[int] = field(default_factory=list)


@dataclass
class Tally:
    passes: int = 0
    drafted: int = 0
    forbidden: int = 0  # drafts holding a token the grammar forbids where it stands
    kept: int = 0


class Adversary:
    """Drafts meant to break the constraint, for a sequence whose output so far is ``out`` and
    whose case is ``case``; ``n``: the longest draft it makes."""

    def __init__(self, model, seed: int, n: int, tally: Tally):
        self.rng = random.Random(seed)
        self.n = n
        self.tally = tally
        self.vocab = model.n_vocab
        eog = [t for t in range(model.n_vocab) if model.is_eog(t)]
        closers = [t for text in ('"}}', "}", '"}', '"', "}}\n", "]", ", ") for t in model.tokenize(
            text, add_special=False, parse_special=True)]
        self.bad = eog + closers

    def tokens(self, case: Case, out: list[int], k: int) -> list[int]:
        rng, ref = self.rng, case.alone
        at = len(out)
        what = rng.random()
        if what < 0.35 and at < len(ref):  # the right answer, then one bad token in it
            draft = list(ref[at: at + k])
            if draft:
                draft[rng.randrange(len(draft))] = rng.choice(self.bad + [rng.randrange(self.vocab)])
        elif what < 0.5:  # the right answer and on past its end: the end of generation, then more
            draft = list(ref[at: at + k]) + rng.sample(self.bad, min(3, len(self.bad)))
        elif what < 0.75:  # a copy of the conversation: an earlier call, the tool's result, the prompt
            src = rng.choice([case.prompt, *case.sources])
            j = rng.randrange(len(src))
            draft = list(src[j: j + k])
        else:
            draft = [rng.randrange(self.vocab) for _ in range(k)]
        return draft[:k]


class PassAdversary:
    """In place of the scheduler's ``PassDrafter``: an ``Adversary`` draft for every sequence,
    uncut, within the pass's caps."""

    def __init__(self, adversary: Adversary, cases: list[Case]):
        self.adv = adversary
        self.cases = cases

    def draft(self, seqs, caps, n_prefill):
        out = []
        for s, cap in zip(seqs, caps):
            toks = self.adv.tokens(self.cases[s.job.index], s.output, min(cap, self.adv.n))
            out.append(Draft(Proposal(toks), "adversary", [], []) if toks else Draft.nothing())
        return out

    def learn(self, d, n_kept):
        self.adv.tally.kept += n_kept


class SessionAdversary(Drafter):
    """The same for the one-sequence path, behind the ``Drafter`` interface."""

    method = "adversary"

    def __init__(self, adversary: Adversary, case: Case):
        self.adv = adversary
        self.case = case
        self._n = 0

    def begin(self, prompt, sampler=None):
        self._n = len(prompt)

    def draft(self, history, n_max):
        return self.adv.tokens(self.case, history[self._n:], min(n_max, self.adv.n))

    def accept(self, n_accepted):
        self.adv.tally.kept += n_accepted


@pytest.fixture(scope="module")
def engine(tiny_tool_target):
    eng = Engine(tiny_tool_target, None, options=EngineOptions(n_ctx=4096, n_seq=3, **EXACT),
                 draft=DraftOptions(draft_max=8, p_min=0.0), method="ngram")
    eng.set_costs(gpu_like(0.02))
    yield eng
    eng.close()


def _compiled(eng, kind: str, text: str):
    return compile_constraint(ConstraintSpec(kind, text, f"--{kind}"), tokenizer_for(eng.target_model))


def cases_for(eng, kind: str) -> list[Case]:
    """The prompts of one grammar kind, with the constrained target's own greedy answers."""
    base = GenOptions(max_tokens=48)
    if kind in ("required", "auto"):
        prompter = ChatPrompter(eng.target_model, eng.n_ctx_seq)
        turns = [prompter.turn(agent_chat(a), read_tools([READ, WRITE, TESTS], kind)) for a in ASKS]
        cases = [Case(t.tokens, replace(base, grammar=t.grammar, shown=t.shown), t.sources) for t in turns]
    else:
        spec = {"json": ("json_schema", json.dumps(SCHEMAS[0])), "regex": ("regex", REGEX),
                "lark": ("grammar", LARK)}[kind]
        grammar = _compiled(eng, *spec)
        cases = [Case(eng.tokenize_prompt(t), replace(base, grammar=grammar)) for t in TEXTS]
    for c in cases:
        c.alone = eng.generate(c.prompt, c.gen, use_draft=False).tokens
    return cases


@pytest.fixture
def tally(monkeypatch) -> Tally:
    """Counts every draft where it meets the grammar (``PassMasks.along``, on both paths)."""
    counts = Tally()
    along = PassMasks.along.__func__

    def counted(cls, constraint, proposal):
        m = along(cls, constraint, proposal)
        if proposal.tokens:
            counts.passes += 1
            counts.drafted += len(proposal)
            counts.forbidden += len(m.proposal) < len(proposal)
        return m

    monkeypatch.setattr(PassMasks, "along", classmethod(counted))
    return counts


@pytest.mark.parametrize("kind", ["required", "auto", "json", "regex", "lark"])
def test_adversarial_drafts_keep_only_the_constrained_targets_tokens(engine, kind, tally):
    cases = cases_for(engine, kind)
    for n in LENGTHS:
        for seed in range(2):
            adv = Adversary(engine.target_model, seed * 10 + n, n, tally)
            # many at once: three sequences in one pass
            sched = engine.scheduler(GenOptions(), n_parallel=3)
            sched.drafter = PassAdversary(adv, cases)
            jobs = [Job(i, c.prompt, gen=c.gen, sources=c.sources) for i, c in enumerate(cases)]
            for job, res in sched.run(jobs):
                assert res.stats.stop_reason != "error", res.stats.fault
                assert res.tokens == cases[job.index].alone, (kind, n, job.index)
            # one at a time, through the Drafter interface
            for c in cases:
                session = engine.session(c.gen, use_draft=False)
                session.drafter, session.draft_max = SessionAdversary(adv, c), n
                out = [t for step in session.run(c.prompt, c.gen.max_tokens) for t in step.tokens]
                assert session.stats.drafter_fault is None
                assert out == c.alone, (kind, n, "session")
    print(f"\n{kind}: {tally.passes} drafted passes, {tally.drafted} tokens drafted, {tally.forbidden} drafts "
          f"holding a forbidden token, all cut there (outputs identical), {tally.kept} drafted tokens kept")
    assert tally.passes >= 500 and tally.forbidden >= 50 and tally.kept > 0


def test_a_sampled_call_follows_the_masked_target_under_adversarial_drafts(engine):
    """At temperature 1 the first free token of a call's arguments is drawn from the masked target,
    with a drafter that offers a forbidden token or the least likely allowed one at that place."""
    prompter = ChatPrompter(engine.target_model, engine.n_ctx_seq)
    kind = {"type": "function", "function": {"name": "pick", "parameters": {"type": "object", "properties": {
        "kind": {"enum": ["cat", "dog", "bird", "fish", "one", "two", "the", "world"]}}, "required": ["kind"]}}}
    turn = prompter.turn(agent_chat("pick one"), read_tools([kind], {"type": "function", "function": {"name": "pick"}}))
    opening, law = masked_law(engine, turn.tokens, turn.grammar)
    allowed = {t for t, p in law.items() if p > 0}
    unlikely = min(allowed, key=law.get)
    forbidden = next(t for t in range(engine.target_model.n_vocab) if t not in allowed)

    class Skewed(Drafter):
        method = "skewed"

        def __init__(self):
            self.i = 0

        def draft(self, history, n_max):
            self.i += 1
            return [forbidden if self.i % 2 else unlikely, unlikely][:n_max]

    n = 600
    seen: Counter = Counter()
    for seed in range(n):
        gen = GenOptions(max_tokens=len(opening) + 3, grammar=turn.grammar,
                         sampling=SamplingParams(temp=1.0, top_k=0, top_p=1.0, seed=seed))
        session = engine.session(gen, use_draft=False)
        session.drafter, session.draft_max = Skewed(), 4
        out = [t for step in session.run(turn.tokens, gen.max_tokens) for t in step.tokens]
        assert out[: len(opening)] == opening
        seen[out[len(opening)]] += 1
    stat, df, p = chi_square(seen, law, n)
    assert set(seen) <= allowed and len(allowed) > 1
    assert p >= 0.001, f"chi2={stat:.1f} df={df} p={p:.3g}"


def test_the_masks_are_taken_along_the_draft_the_pass_verifies(engine):
    """``PassMasks.along`` cuts the draft before the first token the grammar rejects and gives one
    mask per row of what remains: the pass carries, and the verifier checks, that very draft."""
    from specdec_cli.engine.structured.constraint import ConstraintViolation

    case = cases_for(engine, "required")[0]
    cons = engine.constraint(case.gen.grammar)
    ref = case.alone
    bad = Adversary(engine.target_model, 0, 8, Tally()).bad
    for cut in range(1, 8):
        draft = ref[:cut] + [bad[0]] + ref[cut + 1: 10]
        m = PassMasks.along(cons, Proposal(draft))
        assert m.proposal.tokens == ref[:cut] and m.masks.shape[0] == cut + 1
        assert all(m.masks[i, t] for i, t in enumerate(ref[:cut]))
        m.check(ref[: cut + 1])
        with pytest.raises(ConstraintViolation):
            m.check(ref[:cut] + [bad[0]])
    assert np.count_nonzero(m.masks[0]) >= 1

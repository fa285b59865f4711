"""Exact speculative sampling (``--verify exact``): the output follows the target's distribution.

The proof is statistical. With a fixed prompt and many seeds, the first generated token, and
the pair of the first two, are counted and compared with the target-only distribution
computed *analytically* from the target's logits (p(t1), and p(t1) * p(t2 | t1) by evaluating
the target on each likely t1), with Pearson's chi-square test at significance level
ALPHA = 0.001: a correct verifier must give p-value >= ALPHA. The same test must reject a
deliberately wrong verifier that accepts every draft token (its output follows the draft, not
the target): p-value < ALPHA.

Fixtures: the tiny synthetic f32 models (357-token vocabulary, flash attention off, f32 KV
cache, so batched and single-token logits agree to ~5e-4), at temperature 1.0 with top-k and
top-p off, so that the target's support is wide (entropy ~4.3 nats): about 130 first tokens
have an expected count of 5 or more (and ~30 first pairs). Rarer outcomes are pooled into one bin, and all
end-of-generation tokens into another. One thread per context: these models are so small
that a second thread only adds synchronisation.

Two drafts: ``close_draft`` is the target's own weights with the output projection scaled
by 0.75 (so q is p at temperature 4/3: flatter, acceptance ~0.8, both branches of the rule
run often) and ``tiny_draft`` is an unrelated random model (acceptance ~0.25: mostly the
residual branch). Each run draws 2,000 seeds, generates until it has two tokens, and stops.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
from specdec_cli.engine.decode.session import Session
from specdec_cli.engine.llama.context import Context
from specdec_cli.engine.verify.verifiers import (
    ExactVerifier,
    MatchVerifier,
    Proposal,
    Sampler,
    SamplingParams,
    Verifier,
    resolve_verify,
)
from specdec_cli.errors import UsageError
from tiny_models import TARGET_SHAPE, write_llama_gguf

ALPHA = 0.001  # significance level of every chi-square test in this file
N_SEEDS = 2000
MIN_EXPECTED = 5.0  # bins with a smaller expected count are pooled
PROMPT = "hello world"
SAMPLING = dict(temp=1.0, top_k=0, top_p=1.0)
EXACT = dict(flash_attn="off", cache_type_k="f32", cache_type_v="f32")
EOG = "eog"  # the label of every end-of-generation token (the session does not emit them)


# --- chi-square, without scipy --------------------------------------------------------------
def _gammaincc(a: float, x: float) -> float:
    """Regularized upper incomplete gamma Q(a, x) (Numerical Recipes: series / continued fraction)."""
    if x <= 0.0:
        return 1.0
    log_pre = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:  # series for P(a, x)
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_pre))
    tiny = 1e-300  # Lentz's continued fraction for Q(a, x)
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(log_pre) * h


def chi2_sf(stat: float, df: int) -> float:
    """P(X >= stat) for X ~ chi-square with ``df`` degrees of freedom."""
    return _gammaincc(df / 2.0, stat / 2.0)


def chi_square(observed: Counter, expected_probs: dict, n: int) -> tuple[float, int, float]:
    """Pearson's test of ``observed`` counts against ``expected_probs``: (statistic, df, p-value).

    Outcomes expected fewer than MIN_EXPECTED times, and outcomes missing from
    ``expected_probs``, share one pooled bin (whose probability is what the listed bins leave).
    """
    bins = [k for k, p in expected_probs.items() if p * n >= MIN_EXPECTED]
    probs = [expected_probs[k] for k in bins]
    obs = [observed.get(k, 0) for k in bins]
    rest_p = max(0.0, 1.0 - sum(probs))
    rest_o = n - sum(obs)
    if rest_p * n >= MIN_EXPECTED:
        probs.append(rest_p)
        obs.append(rest_o)
    elif probs:  # too small to stand alone: fold into the smallest bin
        i = int(np.argmin(probs))
        probs[i] += rest_p
        obs[i] += rest_o
    exp = np.asarray(probs) * n
    stat = float((((np.asarray(obs) - exp) ** 2) / exp).sum())
    df = len(exp) - 1
    return stat, df, chi2_sf(stat, df)


def test_chi2_sf_matches_known_values():
    # textbook critical values: P(X >= x) for (x, df)
    for x, df, p in [(3.841, 1, 0.05), (10.828, 1, 0.001), (18.307, 10, 0.05), (29.588, 10, 0.001),
                     (124.342, 100, 0.05), (149.449, 100, 0.001), (0.0, 5, 1.0)]:
        assert chi2_sf(x, df) == pytest.approx(p, rel=2e-3, abs=1e-12)
    scipy_stats = pytest.importorskip("scipy.stats")
    for x, df in [(0.5, 1), (7.0, 3), (250.0, 200), (80.0, 130), (400.0, 130)]:
        assert chi2_sf(x, df) == pytest.approx(scipy_stats.chi2.sf(x, df), rel=1e-9, abs=1e-300)


# --- fixtures -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def close_draft(tmp_path_factory, tiny_target):
    """The target's weights with the output projection scaled by 0.75: q = p at temperature 4/3."""
    d = tmp_path_factory.mktemp("close_draft")
    return write_llama_gguf(d / "tiny-close-draft-f32.gguf", **TARGET_SHAPE, seed=1, output_scale=6.0,
                            name="tiny-close-draft")


def _engine(target, draft, draft_max: int, p_min: float) -> Engine:
    return Engine(target, draft, options=EngineOptions(n_ctx=64, threads=1, **EXACT),
                  draft=DraftOptions(draft_max=draft_max, p_min=p_min))


@pytest.fixture(scope="module")
def close_engine(tiny_target, close_draft):
    eng = _engine(tiny_target, close_draft, draft_max=3, p_min=0.0)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def far_engine(tiny_target, tiny_draft):
    """An unrelated draft, and a p-min that cuts about half the proposals early."""
    eng = _engine(tiny_target, tiny_draft, draft_max=4, p_min=0.18)
    yield eng
    eng.close()


def target_laws(eng: Engine, prompt: list[int], n_seeds: int = N_SEEDS) -> tuple[dict, dict]:
    """The target-only law of the first token and of the first two after ``prompt``, from the
    target's logits (EOG-labelled; pairs only for first tokens likely enough to be tested)."""
    model = eng.target_model
    sampler = Sampler(SamplingParams(**SAMPLING))
    ctx: Context = eng.target_ctx

    def next_dist(tokens: list[int]) -> dict:
        ctx.kv_clear()
        ctx.decode(tokens, 0, outputs="last")
        ids, probs = sampler.distribution(ctx.logits(-1))
        law: dict = {}
        for t, p in zip(ids.tolist(), probs.tolist()):
            key = EOG if model.is_eog(t) else t
            law[key] = law.get(key, 0.0) + p
        return law

    first = next_dist(prompt)
    pairs: dict = {}
    for t1, p1 in first.items():
        if t1 == EOG:
            pairs[(EOG,)] = p1
        elif p1 * n_seeds >= MIN_EXPECTED:  # rarer t1s fall in the pooled bin anyway
            for t2, p2 in next_dist(prompt + [t1]).items():
                pairs[(t1, t2)] = p1 * p2
    return first, pairs


@pytest.fixture(scope="module")
def target_law(close_engine):
    """The target-only law of the first token and of the first two, from the target's logits."""
    prompt = close_engine.tokenize_prompt(PROMPT)
    first, pairs = target_laws(close_engine, prompt)
    return prompt, first, pairs


# --- running many seeds ---------------------------------------------------------------------
class AlwaysAccept(Verifier):
    """WRONG on purpose: keeps every draft token, then adds the target's token. Follows q, not p."""

    rule = "always-accept"

    def __init__(self, sampler: Sampler):
        self.sampler = sampler

    def verify(self, rows, proposal: Proposal) -> list[int]:
        return [*proposal.tokens, self.sampler.sample(rows(len(proposal.tokens)))]


def first_two(session: Session, prompt: list[int]) -> tuple:
    """The first two generated tokens (EOG-labelled), stopping the run as soon as they are known."""
    out: list = []
    steps = session.run(prompt, 1 + session.draft_max)  # room for a full first proposal
    for step in steps:
        out.extend(step.tokens)
        if len(out) >= 2:
            break
    steps.close()
    if len(out) < 2 and session.stats.stop_reason == "eog":
        out.append(EOG)
    assert len(out) >= 2 or out[:1] == [EOG], (out, session.stats.stop_reason)
    return tuple(out[:2])


def sample_many(eng: Engine, prompt: list[int], make_session, n: int = N_SEEDS):
    """Counters of the first token and of the first pair over seeds 0..n-1; acceptance rate."""
    firsts: Counter = Counter()
    pairs: Counter = Counter()
    drafted = accepted = 0
    for seed in range(n):
        gen = GenOptions(max_tokens=8, sampling=SamplingParams(**SAMPLING, seed=seed), verify="exact")
        session = make_session(eng, gen)
        two = first_two(session, prompt)
        firsts[two[0]] += 1
        pairs[two if two[0] != EOG else (EOG,)] += 1
        drafted += session.stats.n_drafted
        accepted += session.stats.n_accepted
    return firsts, pairs, accepted / max(drafted, 1)


def exact_sampled(eng: Engine, gen: GenOptions) -> Session:
    """What ``Engine.generate`` runs for --verify exact: sampled proposals, exact rule."""
    return eng.session(gen)


def exact_greedy_proposals(eng: Engine, gen: GenOptions) -> Session:
    """The exact rule on greedy proposals (point masses), as for EAGLE-3/DFlash/DSpark drafts."""
    sampler = Sampler(gen.sampling)
    return Session(eng.target_ctx, ExactVerifier(sampler), eng.drafter,
                   draft_max=eng.draft_options.draft_max, draft_sampler=None)


def always_accept(eng: Engine, gen: GenOptions) -> Session:
    session = eng.session(gen)
    session.verifier = AlwaysAccept(session.verifier.sampler)
    return session


def _report(name, first_test, pair_test, rate):
    print(f"\n{name}: first token chi2={first_test[0]:.1f} df={first_test[1]} p={first_test[2]:.4g}; "
          f"pair chi2={pair_test[0]:.1f} df={pair_test[1]} p={pair_test[2]:.4g}; acceptance {rate:.3f}")


@pytest.mark.parametrize(
    "engine_name,make_session,acceptance",
    [
        ("close_engine", exact_sampled, (0.6, 0.95)),
        ("far_engine", exact_sampled, (0.1, 0.5)),
        ("close_engine", exact_greedy_proposals, (0.02, 0.5)),
    ],
    ids=["sampled-close-draft", "sampled-unrelated-draft-pmin", "greedy-proposals"],
)
def test_exact_verifier_samples_the_target_distribution(request, target_law, engine_name, make_session,
                                                        acceptance):
    eng: Engine = request.getfixturevalue(engine_name)
    prompt, law1, law2 = target_law
    firsts, pairs, rate = sample_many(eng, prompt, make_session)
    t1 = chi_square(firsts, law1, N_SEEDS)
    t2 = chi_square(pairs, law2, N_SEEDS)
    _report(request.node.callspec.id, t1, t2, rate)
    assert t1[1] >= 50 and t2[1] >= 20  # wide enough support for the test to mean something
    assert acceptance[0] < rate < acceptance[1]  # the accept and reject branches both ran
    assert t1[2] >= ALPHA, f"first token: chi2={t1[0]:.1f}, df={t1[1]}, p={t1[2]:.3g}"
    assert t2[2] >= ALPHA, f"first pair: chi2={t2[0]:.1f}, df={t2[1]}, p={t2[2]:.3g}"


def test_always_accepting_verifier_fails_the_same_test(close_engine, target_law):
    """The control: the test above has the power to see a verifier that ignores p."""
    prompt, law1, law2 = target_law
    firsts, pairs, rate = sample_many(close_engine, prompt, always_accept)
    t1 = chi_square(firsts, law1, N_SEEDS)
    t2 = chi_square(pairs, law2, N_SEEDS)
    _report("always-accept", t1, t2, rate)
    assert rate == 1.0
    assert t1[2] < ALPHA
    assert t2[2] < ALPHA


# --- the verifier alone, on hand-made distributions -----------------------------------------
def _rows(*logit_rows):
    arr = [np.asarray(r, dtype=np.float32) for r in logit_rows]
    return lambda i: arr[i]


@pytest.mark.parametrize("q_kind", ["sparse", "point-mass"])
def test_exact_rule_on_one_position(q_kind):
    """Monte Carlo over the rule itself: the emitted token follows p whatever q proposes,
    including a q whose support misses part of p's and covers tokens p gives nothing."""
    n = 20_000
    logits = np.log(np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04]))
    sampler = Sampler(SamplingParams(temp=1.0, top_k=0, top_p=1.0, seed=7))
    p_ids, p = sampler.distribution(logits)
    law = dict(zip(p_ids.tolist(), p.tolist()))
    # q puts most mass where p has little, and some on token 6, outside p's vocabulary
    q_ids, q = np.array([5, 4, 6, 0]), np.array([0.4, 0.3, 0.2, 0.1])
    verifier = ExactVerifier(sampler)
    rows = _rows(logits, logits)
    counts: Counter = Counter()
    kept = 0
    for _ in range(n):
        if q_kind == "sparse":
            x = int(q_ids[sampler.rng.choice(4, p=q)])
            proposal = Proposal([x], [(q_ids, q)])
        else:
            proposal = Proposal([3])  # a greedy draft that always guesses token 3
        out = verifier.verify(rows, proposal)
        kept += out[0] == proposal.tokens[0] and len(out) == 2
        counts[out[0]] += 1
    stat, df, pval = chi_square(counts, law, n)
    assert pval >= ALPHA, (stat, df, pval)
    expected_kept = sum(min(law.get(t, 0.0), qq) for t, qq in zip(q_ids.tolist(), q)) if q_kind == "sparse" else law[3]
    assert kept / n == pytest.approx(expected_kept, abs=0.015)
    assert 6 not in counts  # never emits what p excludes


def test_draw_matches_rng_choice():
    """``Sampler.draw`` picks what ``rng.choice`` would from the same random number."""
    probs = np.array([0.5, 0.2, 0.2, 0.1])
    ids = np.array([9, 3, 7, 1])
    a = Sampler(SamplingParams(seed=3))
    rng = np.random.default_rng(3)
    for _ in range(500):
        assert a.draw(ids, probs) == ids[rng.choice(4, p=probs)]


# --- wiring: modes, defaults, determinism ---------------------------------------------------
def test_verify_modes_resolve():
    assert resolve_verify("auto", 0.0) == "greedy"
    assert resolve_verify("exact", 0.0) == "greedy"
    assert resolve_verify("match", 0.0) == "greedy"
    assert resolve_verify("auto", 0.7) == "exact"
    assert resolve_verify("auto", 0.7, sampled_drafts=False) == "match"
    assert resolve_verify("match", 0.7) == "match"
    assert resolve_verify("exact", 1.0, sampled_drafts=False) == "exact"
    with pytest.raises(UsageError, match="verify"):
        resolve_verify("strict", 0.7)
    with pytest.raises(UsageError, match="verify"):
        GenOptions(verify="Exact")


def test_engine_default_is_exact_above_zero_and_greedy_at_zero(close_engine):
    eng = close_engine
    prompt = eng.tokenize_prompt(PROMPT)
    hot = eng.generate(prompt, GenOptions(max_tokens=12, sampling=SamplingParams(temp=0.7, seed=1)))
    assert hot.verify == "exact" and hot.to_dict()["verify"] == "exact"
    assert hot.stats.n_drafted > 0
    match = eng.generate(prompt, GenOptions(max_tokens=12, sampling=SamplingParams(temp=0.7, seed=1),
                                            verify="match"))
    assert match.verify == "match"
    assert eng.drafter.sampler is None  # match keeps llama.cpp's greedy drafts
    cold = eng.generate(prompt, GenOptions(max_tokens=12, verify="exact"))
    assert cold.verify == "greedy"
    assert eng.drafter.sampler is None  # temperature 0: no draft distribution, no softmax
    session = eng.session(GenOptions(sampling=SamplingParams(temp=0.7, seed=1), verify="match"))
    assert isinstance(session.verifier, MatchVerifier)


def test_exact_runs_are_reproducible_and_seeds_differ(close_engine):
    eng = close_engine
    prompt = eng.tokenize_prompt(PROMPT)

    def run(seed):
        return eng.generate(prompt, GenOptions(max_tokens=24, sampling=SamplingParams(temp=1.0, seed=seed))).tokens

    a, b = run(5), run(5)
    assert a == b and len(a) > 0
    assert any(run(s) != a for s in (6, 7, 8))


def test_target_alone_is_the_same_in_every_mode(close_engine):
    """Without a draft both sampling rules draw the target's token from the same RNG."""
    eng = close_engine
    prompt = eng.tokenize_prompt(PROMPT)
    outs = {
        mode: eng.generate(prompt, GenOptions(max_tokens=16, sampling=SamplingParams(temp=0.9, seed=11),
                                              verify=mode), use_draft=False).tokens
        for mode in ("exact", "match")
    }
    assert outs["exact"] == outs["match"]


def test_sampled_proposals_carry_their_distribution(close_engine):
    eng = close_engine
    prompt = eng.tokenize_prompt(PROMPT)
    sampler = Sampler(SamplingParams(temp=0.8, top_k=20, top_p=0.9, seed=2))
    drafter = eng.drafter
    drafter.n_min = 10  # not applied to sampled proposals: dropping short ones would bias them
    try:
        drafter.begin(prompt, sampler)
        proposal = drafter.propose(prompt, 3)
    finally:
        drafter.n_min = 0
    assert len(proposal.tokens) == 3 and len(proposal.q) == 3
    for tok, (ids, probs) in zip(proposal.tokens, proposal.q):
        assert len(ids) <= 20 and tok in ids.tolist()
        assert probs.sum() == pytest.approx(1.0)
    drafter.begin(prompt, None)
    greedy = drafter.propose(prompt, 3)
    assert greedy.q is None and len(greedy.tokens) == 3

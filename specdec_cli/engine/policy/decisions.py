"""How far to draft: the length that maximises expected tokens per second, from measurements.

For a proposal whose i-th token is kept with (conditional) probability a_i, drafting k
tokens yields 1 + sum_{i<=k} prod_{j<=i} a_j tokens per target pass (the kept prefix plus
the target's own token) and costs one (k+1)-token pass plus k draft steps (plus, on a target
whose memory can only be checkpointed, the state copies and the replay a rejection brings:
``CostModel.rejection_seconds``). The policy picks
the k in 0..k_max with the best ratio; k = 0 is plain decoding and wins whenever nothing
beats it by ``MIN_GAIN``. Costs come from ``CostModel``; the a_i from ``Calibrator``, which maps what a
drafter knows (its own probability, an n-gram's match length and continuation frequency)
to the acceptance really observed so far in this run.
"""

from __future__ import annotations

from dataclasses import dataclass

from .costmodel import CostModel

MIN_GAIN = 0.03  # a draft must beat plain decoding by this share: its cost is sure, its gain an estimate


@dataclass
class Choice:
    k: int
    rate: float  # expected tokens per second
    expected: float  # expected tokens per pass, 1 + E[accepted]


def best_length(accept: list[float], costs: CostModel, draft_cost: float = 0.0) -> Choice:
    """The k (0..len(accept)) with the highest expected tokens per second; plain decoding (k = 0)
    unless drafting is expected to beat it by ``MIN_GAIN``. At a near-tie the estimate decides
    the wrong way about as often as the right one, and a refused draft costs its whole pass
    while a kept one gains little: on a 17-token answer, one 3-token draft at an estimated
    0.74 per token, 1 or 2 of them kept, is a visible share of the time."""
    plain = Choice(0, 1.0 / costs.pass_seconds(1), 1.0)
    best = plain
    run, expected = 1.0, 1.0
    for k, a in enumerate(accept, start=1):
        run *= a
        expected += run
        rate = expected / (costs.pass_seconds(k + 1) + k * draft_cost + costs.rejection_seconds(run, expected))
        if rate > best.rate:
            best = Choice(k, rate, expected)
        if run < 1e-4:
            break
    return best if best.rate > plain.rate * (1 + MIN_GAIN) else plain


@dataclass
class PassPlan:
    lengths: list[int]  # draft length per sequence
    rate: float  # expected tokens per second of the pass
    expected: float  # expected tokens the pass emits


def plan_pass(accepts: list[list[float]], costs: CostModel, *, n_prefill: int = 0,
              draft_costs: list[float] | None = None) -> PassPlan:
    """The drafts of one pass over several sequences that maximise its expected tokens per second.

    ``accepts[s]``: the acceptance of each successive draft token sequence ``s`` could send (each
    conditional on the ones before it). Every decoding sequence emits its own token whatever is
    drafted; draft token i of sequence s adds ``prod(accepts[s][:i+1])`` tokens. The decoding part
    of the pass costs what it adds to the measured time of the whole pass: its sequences' last
    tokens and the drafts on top of ``n_prefill`` prompt tokens that ride in the same pass (work
    that is done either way), plus ``draft_costs[s]`` seconds per token drafted for ``s``. Since a
    sequence's products only shrink along its draft, taking candidates in order of value per
    cost keeps each sequence's draft a prefix; every cut of that order is tried. With one
    sequence and no prefill this is :func:`best_length`'s rule.
    """
    n_seq = len(accepts)
    if n_seq == 0:
        return PassPlan([], 0.0, 0.0)
    dcost = draft_costs or [0.0] * n_seq
    riding = costs.pass_seconds(n_prefill) if n_prefill else 0.0
    floor = 0.02 * costs.pass_seconds(1)  # the decoding part never counts as free

    def decode_seconds(k: int) -> float:
        return max(floor, costs.pass_seconds(n_seq + n_prefill + k) - riding)

    base = decode_seconds(0)
    step = max(1e-9, decode_seconds(1) - base)  # what one more token adds to the pass
    cands: list[tuple[float, int, float]] = []  # (value per cost, sequence, value)
    for s, acc in enumerate(accepts):
        run = 1.0
        for a in acc:
            run *= a
            if run < 1e-4:
                break
            cands.append((run / (step + dcost[s]), s, run))
    cands.sort(key=lambda c: -c[0])
    plain = best = PassPlan([0] * n_seq, n_seq / base, float(n_seq))
    lengths = [0] * n_seq
    expected, drafting = float(n_seq), 0.0
    for k, (_density, s, value) in enumerate(cands, start=1):
        lengths[s] += 1
        expected += value
        drafting += dcost[s]
        rate = expected / (decode_seconds(k) + drafting)
        if rate > best.rate:
            best = PassPlan(list(lengths), rate, expected)
    return best if best.rate > plain.rate * (1 + MIN_GAIN) else plain  # as best_length's


PARALLEL_TOLERANCE = 0.03  # rates within this share of the best count as the best (the curve is noisy)


def choose_parallel(costs: CostModel, n_max: int) -> int:
    """How many sequences to decode at once: where one more stops raising throughput, read from the
    measured curve as n tokens per pass of n. Among the counts within ``PARALLEL_TOLERANCE`` of the
    best rate up to ``n_max``, the most: more sequences at the same rate mean fewer waves of jobs
    and a shorter tail of lone sequences. On a GPU the curve is flat and this is ``n_max``; where
    batching does not raise the rate above one sequence's (a pass of n costs n steps) it is 1.
    The counts weighed are powers of two and ``n_max``: the sizes the curve is measured at
    (``BATCH_SIZES``), where a count between two is read off a line through noisy neighbours,
    and two runs of the same 12 document jobs took 12 and 11 at once as one such size measured
    a little cheap."""
    n_max = max(1, n_max)
    rates = {n: n / costs.pass_seconds(n) for n in _parallel_candidates(n_max)}
    best = max(rates.values())
    if best <= rates[1] * (1 + PARALLEL_TOLERANCE):
        return 1
    return max(n for n, r in rates.items() if r >= best * (1 - PARALLEL_TOLERANCE))


def _parallel_candidates(n_max: int) -> list[int]:
    """1, 2, 4, ... below ``n_max``, and ``n_max``."""
    out, n = [], 1
    while n < n_max:
        out.append(n)
        n *= 2
    return [*out, n_max]


def extension_pays(accept: list[float], next_a: float, k_max: int, costs: CostModel, draft_cost: float) -> bool:
    """Whether one more draft step can raise the expected rate above drafting ``accept`` alone,
    assuming the tokens after it are kept as often as ``next_a`` (the draft model's stop rule)."""
    now = best_length(accept, costs, draft_cost).rate
    longer = accept + [next_a] * max(0, k_max - len(accept))
    return best_length(longer, costs, draft_cost).rate > now


class Calibrator:
    """Acceptance by bucket of a drafter's own signal, learned from what the target kept.

    Each bucket starts from a prior (its signal's face value, worth ``PRIOR_WEIGHT``
    observations) and moves to the observed frequency as verifies come in. Old observations
    fade (``DECAY`` per new one in the same bucket, a memory of about 30), so a bucket
    follows the workload when it changes: a run that copied code well and then converts a
    table must not keep drafting on the code's record.
    """

    PRIOR_WEIGHT = 4.0
    DECAY = 0.97

    def __init__(self):
        self._cells: dict[tuple, list[float]] = {}  # bucket -> [kept, seen]

    def estimate(self, bucket: tuple, prior: float) -> float:
        cell = self._cells.get(bucket)
        if cell is None:
            return prior
        return (cell[0] + prior * self.PRIOR_WEIGHT) / (cell[1] + self.PRIOR_WEIGHT)

    def observe(self, buckets: list[tuple], priors: list[float], n_accepted: int) -> None:
        """The first ``n_accepted`` positions were kept; the next one (if drafted) was not;
        positions after it were never judged and teach nothing."""
        for i, (bucket, _prior) in enumerate(zip(buckets, priors)):
            if i > n_accepted:
                break
            cell = self._cells.setdefault(bucket, [0.0, 0.0])
            cell[0] = cell[0] * self.DECAY + (1.0 if i < n_accepted else 0.0)
            cell[1] = cell[1] * self.DECAY + 1.0

    def best(self, prior: float) -> float:
        """The most optimistic calibrated acceptance: whether a drafter could pay at all."""
        return max([prior, *(self.estimate(b, prior) for b in self._cells)])


def confidence_bucket(p: float) -> int:
    """Coarse bins of a probability, finer near 1 where long drafts are decided."""
    for i, edge in enumerate((0.3, 0.6, 0.8, 0.9, 0.97)):
        if p < edge:
            return i
    return 5

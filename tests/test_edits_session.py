"""The edit tracker inside auto and the real decode loop, against a scripted target.

The tiny random fixtures never copy their prompt with edits, so the tracker would never
propose anything there. Here the target is a stand-in whose greedy choice at every position
is a fixed script (the source with a rename applied), so the test can check that auto's
substitution proposals are made, verified and kept, and that the output is exactly the
script: what the loop emits is still only what the target chose. The stand-in is a test
double of the context, not a model; the real models' losslessness is tested elsewhere.
"""

from __future__ import annotations

import numpy as np

from specdec_cli.engine.decode.session import Session
from specdec_cli.engine.drafters.auto import AutoDrafter
from specdec_cli.engine.verify.verifiers import GreedyVerifier
from test_auto import gpu_like

N_VOCAB = 64


class _Model:
    n_swa = 0

    def __init__(self, eog: int):
        self.eog = eog

    def is_eog(self, tok: int) -> bool:
        return tok == self.eog


class ScriptedTarget:
    """A context whose argmax after position p is ``script[p]`` (positions count the prompt)."""

    n_batch = 512
    n_ctx = 4096
    n_rs_seq = 0

    def __init__(self, script: list[int], eog: int):
        self.script = script
        self.model = _Model(eog)
        self._rows: list[np.ndarray] = []
        self.passes = 0

    def kv_clear(self) -> None:
        pass

    def held_prefix(self, tokens, limit) -> int:
        return 0  # every generation starts from an empty memory

    def kv_try_keep_until(self, pos: int) -> bool:
        return True

    def kv_keep_until(self, pos: int) -> None:
        pass

    def decode(self, tokens, pos0, *, outputs="last", skip=0, rows=None, pad=0) -> int:
        self.passes += outputs == "all"
        self._rows = []
        for i in range(len(tokens)):
            row = np.zeros(N_VOCAB, dtype=np.float32)
            nxt = pos0 + i + 1
            row[self.script[nxt] if nxt < len(self.script) else self.model.eog] = 10.0
            self._rows.append(row)
        self._first = 0 if outputs == "all" else len(tokens) - 1
        return 0  # no filler: a script has no cost curve

    def logits(self, i: int) -> np.ndarray:
        return self._rows[i if i >= 0 else len(self._rows) + i]


def _source() -> tuple[list[int], list[int]]:
    """A 'file' with a variable (token 7) used many times, and its copy with 7 renamed to 8 9."""
    line = [20, 21, 7, 22, 23, 24, 7, 25, 26, 27, 28, 29, 30]
    src = []
    for k in range(12):
        src += line + [31 + k % 5, 40]
    out = []
    for t in src:
        out += [8, 9] if t == 7 else [t]
    return src, out


def test_a_rename_seen_once_is_drafted_at_every_later_occurrence():
    src, renamed = _source()
    prompt = [1, 2, 3] + src + [4]
    script = prompt + renamed  # the target copies the source with the rename
    eog = 63
    target = ScriptedTarget(script, eog)
    auto = AutoDrafter(gpu_like())
    session = Session(target, GreedyVerifier(), auto, draft_max=16)
    out: list[int] = []
    for step in session.run(prompt, len(renamed)):
        out.extend(step.tokens)
    assert out == renamed  # only what the target chose
    st = session.stats
    assert st.steps_by_drafter.get("edit", 0) > 0
    assert st.n_substituted >= 10  # 24 renames; the first ones are learned, most later ones drafted
    assert st.n_target_passes < len(renamed) // 3  # long drafts kept


def test_without_edits_the_index_keeps_proposing_the_original():
    src, renamed = _source()
    prompt = [1, 2, 3] + src + [4]
    target = ScriptedTarget(prompt + renamed, 63)
    auto = AutoDrafter(gpu_like())
    auto.edits.propose = lambda n_max: []  # the tracker switched off: the suffix index alone
    session = Session(target, GreedyVerifier(), auto, draft_max=16)
    out = [t for step in session.run(prompt, len(renamed)) for t in step.tokens]
    assert out == renamed
    with_edits = AutoDrafter(gpu_like())
    session2 = Session(ScriptedTarget(prompt + renamed, 63), GreedyVerifier(), with_edits, draft_max=16)
    out2 = [t for step in session2.run(prompt, len(renamed)) for t in step.tokens]
    assert out2 == renamed
    assert session2.stats.n_target_passes < session.stats.n_target_passes


class NoisyScriptedTarget(ScriptedTarget):
    """The script's token is the likely one at every position, but not the only one: the law of
    the token after position p is softmax(``lift`` on ``script[p]``), whatever came before."""

    def __init__(self, script: list[int], eog: int, lift: float):
        super().__init__(script, eog)
        self.lift = lift

    def decode(self, tokens, pos0, *, outputs="last", skip=0, rows=None, pad=0) -> int:
        super().decode(tokens, pos0, outputs=outputs, skip=skip)
        for row in self._rows:
            row *= self.lift / 10.0
            row[self.model.eog] = -30.0  # the generation never ends early
        return 0

    def law(self, pos: int) -> np.ndarray:
        row = np.zeros(N_VOCAB)
        row[self.script[pos]] = self.lift
        row[self.model.eog] = -30.0
        p = np.exp(row - row.max())
        return p / p.sum()


def test_sampling_with_substitutions_proposed_still_follows_the_targets_law():
    """Exact verification with the edit tracker's substituted copies among the proposals: the
    tokens at two positions where the rename falls must follow the target's own law (chi-square).

    The tracker first learns the rename on a greedy run; every sampled run then starts from a
    copy of it, so substituted proposals are drafted wherever the sampled output follows the copy."""
    import copy
    from collections import Counter

    from specdec_cli.engine.verify.verifiers import Sampler, SamplingParams, make_verifier
    from test_exact_sampling import ALPHA, SAMPLING, chi_square

    src, renamed = _source()
    prompt = [1, 2, 3] + src + [4]
    script = prompt + renamed
    learned = AutoDrafter(gpu_like())
    warm = Session(ScriptedTarget(script, 63), GreedyVerifier(), learned, draft_max=16)
    for _ in warm.run(prompt, len(renamed)):
        pass
    # the third rename of the first line pair: output positions of the second line's 8 9
    at = [i for i, t in enumerate(renamed) if t == 8][2]
    target = NoisyScriptedTarget(script, 63, lift=7.0)  # the script's token ~ 0.94
    p1, p2 = target.law(len(prompt) + at), target.law(len(prompt) + at + 1)
    law = {(a, b): p1[a] * p2[b] for a in range(N_VOCAB) for b in range(N_VOCAB)}
    n, seen, substituted = 1500, Counter(), 0
    for seed in range(n):
        auto = copy.deepcopy(learned)
        sampler = Sampler(SamplingParams(**SAMPLING, seed=seed))
        session = Session(target, make_verifier("exact", sampler), auto, draft_max=16)
        out = [t for step in session.run(prompt, at + 2) for t in step.tokens]
        seen[(out[at], out[at + 1])] += 1
        substituted += session.stats.n_substituted > 0
    stat, df, p = chi_square(seen, law, n)
    assert substituted > n // 4, substituted  # substituted proposals were drafted and kept in many runs
    assert p >= ALPHA, f"chi2={stat:.1f} df={df} p={p:.3g}"

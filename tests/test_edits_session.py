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

from specdec_cli.engine.drafters.auto import AutoDrafter
from specdec_cli.engine.session import Session
from specdec_cli.engine.verify import GreedyVerifier
from test_auto import gpu_like

N_VOCAB = 64


class _Model:
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

    def kv_try_keep_until(self, pos: int) -> bool:
        return True

    def kv_keep_until(self, pos: int) -> None:
        pass

    def decode(self, tokens, pos0, *, outputs="last", skip=0) -> None:
        self.passes += outputs == "all"
        self._rows = []
        for i in range(len(tokens)):
            row = np.zeros(N_VOCAB, dtype=np.float32)
            nxt = pos0 + i + 1
            row[self.script[nxt] if nxt < len(self.script) else self.model.eog] = 10.0
            self._rows.append(row)
        self._first = 0 if outputs == "all" else len(tokens) - 1

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

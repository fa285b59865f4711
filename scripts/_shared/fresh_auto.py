"""One generation as a new ``specdec run`` process makes it: the target alone, or a fresh auto.

Each auto generation starts from a fresh drafter (no rules, pool or calibration from another
prompt), with the draft model beside the target (``BESIDE``: ``specdec run -t T`` as a user runs
it) or with none found (``ALONE``: the suffix index and the edit tracker only); ``BASE`` is the
target alone, the baseline of every ratio. Used by ``compare/edit_check.py`` and
``checks/flash_attn_compare.py``.
"""

from __future__ import annotations

from specdec_cli.engine.decode.engine import Engine, GenOptions  # noqa: E402
from specdec_cli.engine.drafters.auto import AutoDrafter  # noqa: E402

BASE, BESIDE, ALONE = "target alone", "auto, beside", "auto, no draft"


def run_specdec(eng: Engine, tokens: list[int], n: int, label: str, model_drafter) -> dict:
    """One generation of ``tokens`` as ``label`` (``BASE``, ``BESIDE`` or ``ALONE``; ``model_drafter``:
    the engine's draft-model drafter, for ``BESIDE``): decode speed, counts, text."""
    gen = GenOptions(max_tokens=n)
    if label == BASE:
        r = eng.generate(tokens, gen, use_draft=False)
    else:  # a fresh auto, as a new `specdec run` process has: nothing learned from another prompt
        eng.drafters["auto"] = AutoDrafter(eng.costs, model_drafter if label == BESIDE else None)
        r = eng.generate(tokens, gen, method="auto")
    s = r.stats
    return {"tps": s.tokens_per_second, "prompt_s": s.prompt_seconds, "n": s.n_generated, "text": r.text,
            "drafted": s.n_drafted, "accepted": s.n_accepted, "substituted": s.n_substituted, "split": s.split()}

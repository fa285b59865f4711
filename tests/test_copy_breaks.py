"""scripts/ceilings/copy_breaks.py: where a loop's copies break, what the draft model says there, and the price of asking it."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts" / "ceilings"))

import copy_breaks  # noqa: E402
import loop_passes  # noqa: E402

from specdec_cli.engine.decode.engine import AUTO_DRAFT_MAX, DraftOptions, Engine, EngineOptions  # noqa: E402
from specdec_cli.engine.llama.model import Model  # noqa: E402


def test_tally_counts_breaks_by_the_run_before_them_and_what_the_guesses_said():
    output = [1, 2, 3, 4, 5, 6]
    named = [1, 9, 3, None, 5, 7]  # right, a break, right, nothing named, right, a break
    guesses = [1, 2, 8, 4, 5, 6]  # right at both breaks; a false alarm at place 2
    c = copy_breaks.tally(output, named, guesses)
    assert (c["tokens"], c["named"], c["breaks"]) == (6, 5, 2)
    assert (c["break_differs"], c["break_right"], c["right_differs"]) == (2, 2, 1)
    # runs before the named places: 0, 1 (the break), 0 (after it), then 0 after the unnamed place, 1 (a break)
    assert c["by_run"][0] == [3, 3] and c["by_run"][1] == [2, 2]
    assert sum(n for n, _ in c["by_run"].values()) == c["named"]


def test_a_draft_that_is_the_target_names_the_breaks_and_raises_no_false_alarm_but_at_near_ties(tiny_target, tiny_draft):
    engine = Engine(str(tiny_target), str(tiny_draft), options=EngineOptions(n_ctx=1024, n_seq=4),
                    draft=DraftOptions(draft_max=AUTO_DRAFT_MAX), method="auto")
    try:
        engine.ensure_costs()
        _, rows, _, requests = loop_passes.run_loop(engine, sessions=2, turns=2, n=40)
    finally:
        engine.close()
    saved = json.loads(json.dumps({"turns": rows, "requests": requests}))  # as --json writes it
    reader = Engine(str(tiny_target), None, options=EngineOptions(n_ctx=1024), method=None)
    same = Model(str(tiny_target))
    try:
        a = copy_breaks.analyse(reader, same, [saved], from_turn=0, ctx_size=1024)
    finally:
        same.close()
        reader.close()
    assert a["turns"] == 4 and a["tokens"] == sum(len(r["output"]) for r in rows)
    assert a["breaks"] > 0
    # the target's own argmax, teacher-forced, is its greedy output but at near-ties, which these passes
    # (other batch shapes than the loop's) may decide the other way: on this loop three places of one
    # turn, 0.005-0.014 apart in logit. A guess read one place off would be wrong almost everywhere.
    right = a["named"] - a["breaks"]
    assert a["break_right"] >= 0.9 * a["breaks"] and a["break_differs"] >= a["break_right"]
    assert a["right_differs"] <= 0.05 * right
    assert all(ms > 0 for by in a["ms_per_row"].values() for ms in by.values())

"""scripts/loop_passes.py: the agent loop run in process, and its accounting of where the time went."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import loop_passes  # noqa: E402

from specdec_cli.engine.runner import AUTO_DRAFT_MAX, DraftOptions, Engine, EngineOptions  # noqa: E402


def test_every_turn_runs_and_the_passes_account_for_every_token(tiny_target, tiny_draft):
    engine = Engine(str(tiny_target), str(tiny_draft), options=EngineOptions(n_ctx=1024, n_seq=4),
                    draft=DraftOptions(draft_max=AUTO_DRAFT_MAX), method="auto")
    try:
        engine.ensure_costs()
        wall, rows, log, requests = loop_passes.run_loop(engine, sessions=2, turns=2, n=24)
    finally:
        engine.close()
    assert sorted((r["session"], r["turn"]) for r in rows) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    classes = log.classes()
    assert sum(c["passes"] for c in classes.values()) == len(log.passes)
    assert sum(c["tokens"] for c in classes.values()) == sum(r["n"] for r in rows)
    assert sum(c["wasted"] for c in classes.values()) == sum(r["drafted"] - r["kept"] for r in rows)
    assert 0 < sum(c["seconds"] for c in classes.values()) <= wall
    # each turn's request is the conversation so far, ending with the user's turn
    for reqs in requests.values():
        assert [len(r["messages"]) for r in reqs] == [1, 3]
        assert all(r["messages"][-1]["role"] == "user" for r in reqs)
        assert reqs[1]["messages"][1]["role"] == "assistant"

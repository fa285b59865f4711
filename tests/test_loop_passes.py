"""scripts/ceilings/loop_passes.py: the agent loop run in process, and its accounting of where the time went."""

import json
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path[:0] = [str(SCRIPTS), str(SCRIPTS / "ceilings")]

import loop_passes  # noqa: E402
from _shared.free_guesses import guessable  # noqa: E402

from specdec_cli.engine.decode.engine import AUTO_DRAFT_MAX, DraftOptions, Engine, EngineOptions  # noqa: E402


def _engine(target, draft) -> Engine:
    return Engine(str(target), str(draft), options=EngineOptions(n_ctx=1024, n_seq=4),
                  draft=DraftOptions(draft_max=AUTO_DRAFT_MAX), method="auto")


def test_every_turn_runs_and_the_passes_account_for_every_token(tiny_target, tiny_draft):
    engine = _engine(tiny_target, tiny_draft)
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


def test_free_drafts_send_only_guessable_tokens_of_the_saved_outputs_and_keep_them_all(tiny_target, tiny_draft):
    engine = _engine(tiny_target, tiny_draft)
    try:
        engine.ensure_costs()
        _, rows, _, requests = loop_passes.run_loop(engine, sessions=2, turns=2, n=40)
        saved = json.loads(json.dumps({"turns": rows, "requests": requests}))  # as --json writes it
        free = loop_passes.FreeDrafts(engine, [saved])
        _, again, log, _ = loop_passes.run_loop(engine, sessions=2, turns=2, n=40, free=free)
        cut = loop_passes.FreeDrafts(engine, [saved], pass_rows=3)
        _, _, cut_log, _ = loop_passes.run_loop(engine, sessions=2, turns=2, n=40, free=cut)
        # what each turn could have had guessed, read here on its own
        could = {}
        for r in rows:
            text = engine.render_chat(requests[r["session"]][r["turn"]]["messages"])
            could[(r["session"], r["turn"])] = sum(guessable(engine.target_model, text, engine.tokenize_prompt(text),
                                                             r["output"])[0])
    finally:
        engine.close()
    key = lambda r: (r["session"], r["turn"])  # noqa: E731
    assert [r["output"] for r in sorted(again, key=key)] == [r["output"] for r in sorted(rows, key=key)]
    assert free.unreached == {}
    assert sum(could.values()) > 0  # the fixture's outputs repeat themselves: there is something to guess
    for r in again:
        assert r["drafted"] == r["kept"]  # never wrong
        # a guessable token is sent unless a pass had no room for a draft (a prompt ending in it)
        assert 0 < r["kept"] <= could[key(r)] or could[key(r)] == 0
    assert sum(c["wasted"] for c in log.classes().values()) == 0
    # --pass-rows 3: no pass of the decoding sequences carries more than 3 rows, and some carried drafts
    decoding = [p for p in cut_log.passes if p["seqs"] and p["tokens"] == sum(1 + d for _, d, _, _ in p["seqs"])]
    assert max(p["tokens"] for p in decoding) <= 3
    assert any(d for p in decoding for _, d, _, _ in p["seqs"])

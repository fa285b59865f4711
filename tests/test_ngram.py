"""Prompt-lookup drafting: what it proposes, and that it keeps the output the target's own."""

from __future__ import annotations

from specdec_cli.engine.decode.session import Session
from specdec_cli.engine.drafters.ngram import NgramDrafter
from specdec_cli.engine.llama.context import Context, ContextParams
from specdec_cli.engine.llama.model import Model
from specdec_cli.engine.verify.verifiers import GreedyVerifier

EXACT = dict(flash_attn="off", cache_type_k="f32", cache_type_v="f32")


def test_proposes_what_followed_the_last_occurrence():
    d = NgramDrafter(n_min=2, n_max_match=3)
    hist = [1, 2, 3, 4, 5, 9, 9, 2, 3]
    d.begin(hist)
    assert d.draft(hist, 3) == [4, 5, 9]  # "2 3" was followed by "4 5 9"
    assert d.draft(hist + [7], 3) == []  # "3 7" never occurred


def test_prefers_the_longest_and_most_recent_match():
    d = NgramDrafter(n_min=1, n_max_match=3)
    hist = [5, 1, 2, 6, 0, 1, 2, 7, 3, 1, 2]
    d.begin(hist)
    assert d.draft(hist, 2) == [7, 3]  # the latest "1 2" (then "0 1 2" does not recur)
    hist2 = [8, 1, 2, 6, 0, 8, 1, 2]
    d.begin(hist2)
    assert d.draft(hist2, 1) == [6]  # "8 1 2" (3 tokens) wins


def test_index_follows_a_growing_history():
    d = NgramDrafter(n_min=2, n_max_match=2)
    hist = [1, 2, 3]
    d.begin(hist)
    assert d.draft(hist, 4) == []
    hist += [1, 2]
    assert d.draft(hist, 4) == [3, 1, 2]


def test_lossless_on_the_tiny_target(tiny_target):
    model = Model(tiny_target)
    ctx = Context(model, ContextParams(n_ctx=512, n_outputs_max=7, **EXACT))
    try:
        for text in ("hello world hello world hello world", "the and of to in the and of to in the and"):
            tokens = model.tokenize(text)
            plain = [t for step in Session(ctx, GreedyVerifier()).run(tokens, 48) for t in step.tokens]
            session = Session(ctx, GreedyVerifier(), NgramDrafter(), draft_max=6)
            out = [t for step in session.run(tokens, 48) for t in step.tokens]
            assert out == plain
            assert session.stats.n_drafted > 0
    finally:
        ctx.close()
        model.close()

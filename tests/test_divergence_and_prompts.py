"""The near-tie proof on hand-made traces, and the prompt sources."""

from __future__ import annotations

import io

import pytest

from specdec_cli.engine.result import TracePoint
from specdec_cli.engine.verify.divergence import argmax_violations, first_divergence
from specdec_cli.errors import UsageError
from specdec_cli.terminal.prompts import read_batch, read_prompt


def point(i, token, cands):
    ids, logits = zip(*cands)
    return TracePoint(i, token, list(ids), list(logits))


def test_identical_outputs_have_no_divergence():
    trace = [point(0, 5, [(5, 3.0), (6, 1.0)])]
    assert first_divergence([5], trace, [5]) is None


def test_a_near_tie_divergence_is_recognised():
    trace = [point(0, 5, [(5, 3.0), (6, 1.0)]), point(1, 7, [(7, 2.50), (8, 2.45)])]
    div = first_divergence([5, 7], trace, [5, 8])
    assert div.index == 1 and div.near_tie and abs(div.margin - 0.05) < 1e-9


def test_a_wide_divergence_is_not_a_tie():
    trace = [point(0, 5, [(5, 4.0), (6, 1.0)])]
    div = first_divergence([5], trace, [6])
    assert not div.near_tie and div.margin == 3.0


def test_a_token_outside_the_traced_candidates_is_not_a_tie():
    trace = [point(0, 5, [(5, 4.0), (6, 1.0)])]
    div = first_divergence([5], trace, [99])
    assert div.margin is None and not div.near_tie


def test_argmax_violations():
    good = point(0, 5, [(5, 3.0), (6, 1.0)])
    tie = point(1, 6, [(5, 3.0), (6, 3.0)])  # equal logits: either is the argmax
    bad = point(2, 6, [(5, 3.0), (6, 1.0)])
    assert argmax_violations([good, tie, bad]) == [bad]


class FakeStdin(io.StringIO):
    def __init__(self, text, tty):
        super().__init__(text)
        self._tty = tty

    def isatty(self):
        return self._tty


def test_prompt_sources(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("from a file")
    assert read_prompt("arg", None, FakeStdin("", False)) == "arg"
    assert read_prompt(None, f, FakeStdin("", False)) == "from a file"
    assert read_prompt(None, None, FakeStdin("piped", False)) == "piped"
    with pytest.raises(UsageError, match="no prompt"):
        read_prompt(None, None, FakeStdin("", True))
    with pytest.raises(UsageError, match="not both"):
        read_prompt("arg", f, FakeStdin("", False))
    with pytest.raises(UsageError, match="no such file"):
        read_prompt(None, tmp_path / "missing.txt", FakeStdin("", False))


def test_batch_file_forms_and_errors(tmp_path):
    f = tmp_path / "b.jsonl"
    f.write_text('{"prompt": "a", "id": 1}\n\n{"messages": [{"role": "user", "content": "b"}]}\nplain c\n')
    items = read_batch(f)
    assert [i.text for i in items] == ["a", None, "plain c"]
    assert items[0].id == 1 and items[1].messages[0]["content"] == "b"
    assert items[2].as_messages("sys") == [{"role": "system", "content": "sys"}, {"role": "user", "content": "plain c"}]
    f.write_text('{"prompt": 3}\n')
    with pytest.raises(UsageError, match=":1: needs"):
        read_batch(f)
    f.write_text('{"prompt": "x"\n')
    with pytest.raises(UsageError, match="invalid JSON"):
        read_batch(f)
    f.write_text('{"messages": "hi"}\n')
    with pytest.raises(UsageError, match="messages"):
        read_batch(f)


def test_blank_prompts_and_bad_batch_lines_are_reported_with_their_source(tmp_path):
    # a whitespace-only prompt is empty from every source, and a blank JSON prompt is a bad line
    with pytest.raises(UsageError, match="the prompt is empty"):
        read_prompt("  \n ", None, FakeStdin("", False))
    with pytest.raises(UsageError, match="the prompt is empty"):
        read_prompt(None, None, FakeStdin(" \t\n", False))
    f = tmp_path / "b.jsonl"
    f.write_text('{"prompt": "ok"}\n{"prompt": " "}\n{"prompt": 3}\n')
    with pytest.raises(UsageError, match=r"2 bad lines: .*b\.jsonl:2: the prompt is empty; .*b\.jsonl:3: needs"):
        read_batch(f)
    # undecodable bytes that reach a text stdin (as surrogate escapes) are refused, not passed on
    with pytest.raises(UsageError, match=r"stdin is not UTF-8 text \(first bad byte at offset 0\)"):
        read_prompt(None, None, FakeStdin("\udcff\udcfe hi", False))

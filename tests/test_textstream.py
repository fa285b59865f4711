"""Streaming text: characters split across tokens, stop strings split across tokens."""

from __future__ import annotations

from specdec_cli.terminal.textstream import TextStream

PIECES = {
    1: "Hel".encode(),
    2: "lo ".encode(),
    3: "wor".encode(),
    4: "ld".encode(),
    5: "é".encode()[:1],  # first byte of a two-byte character
    6: "é".encode()[1:],  # its second byte
    7: "<".encode(),
    8: "/s".encode(),
    9: ">".encode(),
    10: "!".encode(),
}


def feed(stream: TextStream, tokens, drafted=None):
    out = []
    for i, t in enumerate(tokens):
        out += stream.push([t], [bool(drafted and drafted[i])])
    out += stream.finish()
    return out


def text(segments) -> str:
    return "".join(t for t, _ in segments)


def test_plain_concatenation():
    s = TextStream(PIECES.__getitem__)
    assert text(feed(s, [1, 2, 3, 4])) == "Hello world"
    assert s.text == "Hello world"


def test_a_character_split_across_tokens_waits_for_its_second_byte():
    s = TextStream(PIECES.__getitem__)
    assert s.push([5], [False]) == []  # half a character: nothing to print yet
    assert text(s.push([6], [False])) == "é"


def test_dangling_half_character_becomes_replacement_at_the_end():
    s = TextStream(PIECES.__getitem__)
    assert text(feed(s, [1, 5])) == "Hel\ufffd"


def test_stop_string_across_tokens_is_cut_and_never_shown():
    s = TextStream(PIECES.__getitem__, stops=["</s>"])
    shown = []
    for t in [1, 2, 7, 8]:
        shown.append(text(s.push([t], [False])))
    assert "".join(shown) == "Hello "  # "<" and "/s" are held back: they may start the stop string
    assert text(s.push([9], [False])) == ""
    assert s.stopped
    assert s.text == "Hello "
    assert s.push([10], [False]) == []


def test_held_text_is_released_when_the_stop_string_does_not_follow():
    s = TextStream(PIECES.__getitem__, stops=["</s>"])
    assert text(s.push([7], [False])) == ""
    assert text(s.push([10], [False])) == "<!"
    assert not s.stopped


def test_segments_carry_whether_the_draft_proposed_them():
    s = TextStream(PIECES.__getitem__)
    segs = feed(s, [1, 2, 3], drafted=[False, True, True])
    assert segs == [("Hel", False), ("lo ", True), ("wor", True)]

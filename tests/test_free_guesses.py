"""The free-drafting bound's pieces (scripts/_shared/free_guesses.py): where passes end, and the text-level copy."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from _shared import free_guesses  # noqa: E402


class CharModel:
    """One token per character (its code point): enough to check lookups at the text level."""

    def tokenize(self, text, *, add_special=True, parse_special=True):
        return [ord(c) for c in text]

    def piece(self, token):
        return chr(token).encode()


def test_passes_end_at_the_first_token_no_source_names():
    # guessable tokens ride ahead; each pass ends with one the target computes itself
    assert free_guesses.passes([False, True, True, False, False, True], cap=32) == [1, 3, 1, 1]
    assert free_guesses.passes([True, True, True], cap=32) == [3]  # the last token always ends a pass
    assert free_guesses.passes([True] * 5, cap=2) == [2, 2, 1]  # a pass is at most cap tokens


def test_text_copy_follows_the_longest_match_across_a_token_boundary():
    m = CharModel()
    source = 'Invoice INV-2024-0381 from Larkspur'
    # the JSON value starts without the document's space: tokens differ, the text matches
    assert free_guesses._text_copy(m, source, '{"invoice": "INV-20') == ord("2")
    assert free_guesses._text_copy(m, source, '{"seller": "Lark') == ord("s")
    assert free_guesses._text_copy(m, source, "") is None
    assert free_guesses._text_copy(m, "abc", "xyz") is None
    # an earlier stretch of the output itself is a source too
    assert free_guesses._text_copy(m, "", "qwerty and qwer") == ord("t")


def test_guessable_counts_grammar_index_and_text_sources():
    m = CharModel()
    prompt_text = "say hello hello"
    prompt = m.tokenize(prompt_text)
    output = m.tokenize("hello!")
    guessed, decided = free_guesses.guessable(m, prompt_text, prompt, output)
    assert decided == [False] * 6  # no grammar
    assert guessed[1:5] == [True] * 4  # "ello" follows "h" in the prompt
    assert guessed[5] is False  # "!" was never seen

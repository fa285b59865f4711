"""Which tokens of an output a drafter that costs nothing could have guessed, and the passes that gives.

Used by ``speculation_ceiling.py --free-drafts`` and ``ceilings/loop_passes.py --free-drafts``. A
drafter whose proposals cost nothing (no model step) can only know a token from what it has
already seen. Here a token counts as guessable where any of these would have named it, given the
true output before it:

- the grammar: its mask allows that token alone (a forced token; ``constraint.only_allowed``);
- the project's suffix index over the prompt and the output so far (``SuffixIndex``, the
  n-gram proposer auto uses), its first proposed token;
- a copy at the text level: the longest end of the output text (up to ``TEXT_WINDOW``
  characters) found earlier in the prompt or the output, its continuation tokenized by the
  model. This catches what token lookups miss, such as a JSON value copied from a document,
  whose first token lacks the document's leading space.

The union is generous on purpose: where several sources disagree the one that was right counts,
and no source is ever charged for a wrong guess. Reading the output in passes that each end at
the first token none of them names (the target's own token of that pass) is then the best any
free drafter can do, with no row wasted on a rejected draft.
"""

from __future__ import annotations

import numpy as np

TEXT_WINDOW = 64  # the longest output ending looked up at the text level, in characters
CONTINUATION = 48  # characters of the source taken after a text match, to tokenize


def guessable(model, prompt_text: str, prompt: list[int], output: list[int], constraint=None
              ) -> tuple[list[bool], list[bool]]:
    """Per output token: (any free source names it, the grammar allows it alone). ``constraint``
    (a fresh ``constraint.Constraint``) is advanced through ``output``."""
    from specdec_cli.engine.drafters.suffix import SuffixIndex
    from specdec_cli.engine.structured.pass_masks import only_allowed

    index = SuffixIndex()
    index.begin(prompt)
    history = list(prompt)  # grown a token at a time: the index takes in only what is new
    text = ""
    guessed, alone = [], []
    for token in output:
        only = False
        if constraint is not None:
            only = only_allowed(constraint.allowed_mask()[np.newaxis])[0] == token
            constraint.consume([token])
        named = only or index.propose(history, 1)[0][:1] == [token] \
            or _text_copy(model, prompt_text, text) == token
        guessed.append(bool(named))
        alone.append(bool(only))
        history.append(token)
        text += model.piece(token).decode("utf-8", errors="replace")
    return guessed, alone


def _text_copy(model, source: str, text: str) -> int | None:
    """The first token of what followed the longest end of ``text`` found in ``source`` or earlier
    in ``text`` itself, or None."""
    if not text:
        return None
    hit, length = -1, 0
    while length < min(TEXT_WINDOW, len(text)):  # a longer end is only found where a shorter one is
        tail = text[-(length + 1):]
        at = source.rfind(tail)
        where = source
        if at < 0:
            at = text.rfind(tail, 0, len(text) - 1)
            where = text
        if at < 0:
            break
        hit, length, found_in = at, length + 1, where
    if hit < 0:
        return None
    after = found_in[hit + length : hit + length + CONTINUATION]
    tokens = model.tokenize(after, add_special=False, parse_special=False) if after else []
    return tokens[0] if tokens else None


def passes(guessed: list[bool], cap: int) -> list[int]:
    """The lengths of the passes that read the output: each takes the guessable tokens ahead (at
    most ``cap`` - 1) and ends with the next token, which the target computes itself."""
    out, i = [], 0
    while i < len(guessed):
        k = 0
        while i + k < len(guessed) - 1 and guessed[i + k] and k < cap - 1:
            k += 1
        out.append(k + 1)
        i += k + 1
    return out

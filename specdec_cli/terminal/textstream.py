"""Turning emitted tokens into printable text as they arrive.

Two things make this more than ``b"".join(pieces).decode()``:
- a character can be split across tokens (UTF-8 multi-byte sequences, byte-fallback
  tokens), so bytes go through an incremental decoder and half characters wait;
- a ``--stop`` string can span several tokens, so any tail of the text that could still
  become a stop string is held back until it is ruled out, and nothing after a stop is shown.

Each released segment carries whether the draft proposed it, for ``--show-accept``.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable

Segment = tuple[str, bool]  # (text, came from the draft)


class TextStream:
    def __init__(self, piece: Callable[[int], bytes], stops: list[str] | None = None):
        self._piece = piece
        self._stops = [s for s in (stops or []) if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""  # decoded text not yet released
        self._held_flags: list[bool] = []  # one per character of _held
        self.text = ""  # everything released so far
        self.stopped = False  # a stop string was found
        self.matched: str | None = None  # which one (the first in the text)

    def push(self, tokens: list[int], from_draft: list[bool]) -> list[Segment]:
        """Add emitted tokens; return the segments that are now safe to print."""
        if self.stopped:
            return []
        for tok, drafted in zip(tokens, from_draft):
            chars = self._decoder.decode(self._piece(tok))
            self._held += chars
            self._held_flags.extend([drafted] * len(chars))
        return self._release(final=False)

    def finish(self) -> list[Segment]:
        """The generation ended: flush what is held (a dangling partial character becomes U+FFFD)."""
        if not self.stopped:
            tail = self._decoder.decode(b"", final=True)
            self._held += tail
            self._held_flags.extend([False] * len(tail))
        return self._release(final=True)

    def _release(self, final: bool) -> list[Segment]:
        held = self._held
        cut = len(held)
        found = [(i, s) for s, i in ((s, held.find(s)) for s in self._stops) if i >= 0]
        if found:
            cut, self.matched = min(found)
            self.stopped = True
        elif not final:
            cut -= self._stop_prefix_len(held)
        out = _segments(held[:cut], self._held_flags[:cut])
        self.text += held[:cut]
        if self.stopped:
            self._held, self._held_flags = "", []
        else:
            self._held, self._held_flags = held[cut:], self._held_flags[cut:]
        return out

    def _stop_prefix_len(self, text: str) -> int:
        """Length of the longest tail of ``text`` that is the start of some stop string."""
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best


def _segments(text: str, flags: list[bool]) -> list[Segment]:
    out: list[Segment] = []
    start = 0
    for i in range(1, len(text) + 1):
        if i == len(text) or flags[i] != flags[start]:
            out.append((text[start:i], flags[start]))
            start = i
    return out

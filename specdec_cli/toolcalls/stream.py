"""A reply's text in, its content and calls out, as it streams and whole: one path for both.

``ReplyStream`` runs the family's ``ToolParser`` and, under ``auto``, the fenced-JSON fallback
(``fenced.py``): a reply that may still be nothing but such an object is held back until it
ends, then given as a call or as the content it was. ``read`` feeds a whole text through the
same stream, so a non-streaming response and the assembled deltas of a streaming one are the
same calls.
"""

from __future__ import annotations

from .fenced import fenced_call
from .parse import ArgsDelta, CallStart, Content, Event, ParsedCall, Reply, ToolParser
from .request import ToolRequest
from .syntax import CallSyntax


class ReplyStream:
    def __init__(self, syntax: CallSyntax | None, req: ToolRequest | None, *, fenced: bool = True):
        """``syntax`` None (no tools offered): the text is all content."""
        self.req = req
        self.parser = ToolParser(syntax) if syntax is not None and req is not None and req.active else None
        self.hold = fenced and self.parser is not None and req.choice.mode == "auto"
        self.held: list[str] = []  # content that may yet be a fenced call
        self.fallback: ParsedCall | None = None

    def feed(self, text: str) -> list[Event]:
        if self.parser is None:
            return [Content(text)] if text else []
        return self._filter(self.parser.feed(text), final=False)

    def finish(self) -> list[Event]:
        if self.parser is None:
            return []
        return self._filter(self.parser.finish(), final=True)

    def reply(self, text: str = "") -> Reply:
        """What the whole reply said (after ``finish``); ``text``: the reply, when there is no parser."""
        if self.parser is None:
            return Reply(text)
        if self.fallback is not None:
            return Reply(None, [self.fallback])
        return self.parser.reply()

    def _filter(self, events: list[Event], final: bool) -> list[Event]:
        if not self.hold:
            return events
        out: list[Event] = []
        for e in events:
            if isinstance(e, Content) and self.hold:
                self.held.append(e.text)
                if not _may_be_fenced("".join(self.held)):
                    out += self._release()
            else:
                out += self._release()
                out.append(e)
        if final and self.hold:
            text = "".join(self.held)
            call = fenced_call(text, self.req) if text else None
            if call is not None:
                self.fallback = call
                self.held, self.hold = [], False
                out += [CallStart(0, call.name), ArgsDelta(0, call.arguments)]
            else:
                out += self._release()
        return out

    def _release(self) -> list[Event]:
        """Give up holding: what was held is content, and so is everything after it."""
        self.hold = False
        held, self.held = "".join(self.held), []
        return [Content(held)] if held else []


def _may_be_fenced(text: str) -> bool:
    head = text.lstrip()
    return head.startswith(("```", "{")) or "```".startswith(head)


def read(syntax: CallSyntax | None, req: ToolRequest | None, text: str) -> Reply:
    """A whole reply, read as its stream would be."""
    stream = ReplyStream(syntax, req)
    stream.feed(text)
    stream.finish()
    return stream.reply(text)

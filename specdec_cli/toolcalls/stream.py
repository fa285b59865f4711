"""A reply's text in, its content and calls out, as it streams and whole: one path for both.

``ReplyStream`` runs the family's ``ToolParser`` and, under ``auto``, the fenced-JSON fallback
(``fenced.py``): a reply that may still be nothing but such an object is held back until it
ends, then given as a call or as the content it was. ``read`` feeds a whole text through the
same stream, so a non-streaming response and the assembled deltas of a streaming one are the
same calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..terminal import console
from .fenced import fenced_call
from .parse import ArgsDelta, CallStart, Content, Event, ParsedCall, Reply, ToolParser
from .request import ToolRequest
from .syntax import CallSyntax


class ReplyStream:
    def __init__(self, syntax: CallSyntax | None, req: ToolRequest | None, *, fenced: bool = True,
                 loose: Mapping[str, dict] | None = None):
        """``syntax`` None (no tools offered): the text is all content. ``loose``: tools whose
        schemas the grammar held only in part (name -> schema), their calls checked at the end."""
        self.req = req
        self.loose = loose or {}
        self.parser = ToolParser(syntax) if syntax is not None and req is not None and req.active else None
        self.hold = fenced and self.parser is not None and req is not None and req.choice.mode == "auto"
        self.held: list[str] = []  # content that may yet be a fenced call
        self.fallback: ParsedCall | None = None

    def feed(self, text: str) -> list[Event]:
        if self.parser is None:
            return [Content(text)] if text else []
        return self._filter(self.parser.feed(text), final=False)

    def finish(self) -> list[Event]:
        if self.parser is None:
            return []
        events = self._filter(self.parser.finish(), final=True)
        if self.loose:
            for call in self.reply().calls:
                _check(call, self.loose.get(call.name))
        return events

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
            call = fenced_call(text, self.req) if text and self.req is not None else None
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


def _check(call: ParsedCall, schema: dict | None) -> None:
    """Say on stderr where a call breaks the part of its schema the grammar could not hold.
    The call is still returned: its JSON parses and the client, which wrote the schema, is the
    one to judge it (Claude Code answers a bad input with an error result the model reads)."""
    if schema is None or not call.complete:
        return
    import jsonschema

    try:
        jsonschema.validate(json.loads(call.arguments), schema)
    except ValueError:
        return  # not whole JSON: the grammar stopped it early (the token budget), said elsewhere
    except jsonschema.ValidationError as exc:
        console.warn(f"a call of {call.name!r} breaks its schema where the grammar could not hold it: {exc.message}")


def _may_be_fenced(text: str) -> bool:
    head = text.lstrip()
    return head.startswith(("```", "{")) or "```".startswith(head)


def read(syntax: CallSyntax | None, req: ToolRequest | None, text: str,
         loose: Mapping[str, dict] | None = None) -> Reply:
    """A whole reply, read as its stream would be."""
    stream = ReplyStream(syntax, req, loose=loose)
    stream.feed(text)
    stream.finish()
    return stream.reply(text)

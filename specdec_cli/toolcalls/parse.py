"""Reading tool calls out of a reply, as it streams and whole, by one family's ``CallSyntax``.

One parser serves both: a whole reply is the stream fed at once and finished. So the
streamed deltas assemble to exactly the calls a non-streaming request gets: the arguments
are the JSON text the model wrote (under the grammar, compact and valid), never re-encoded.

While streaming, text that may still turn out to be the start of a call (a tail that begins
like the trigger, whitespace a call would drop) is held back, so a half-written marker never
reaches a client as content. Past the trigger everything is read against the syntax: the
name once complete, then the arguments as they grow, each as an event for the server's
deltas. A reply cut short by the token budget keeps its last call as far as it got; one that
leaves the syntax (only possible without the grammar) is all content, the rest ``malformed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .syntax import NAME_CHARS, CallSyntax, Lit, Slot


@dataclass
class ParsedCall:
    name: str = ""
    arguments: str = ""
    complete: bool = False


@dataclass
class Reply:
    """What a reply said: its text (None when it only called) and its calls."""

    content: str | None
    calls: list[ParsedCall] = field(default_factory=list)
    malformed: str = ""  # text after the point where the reply left the syntax

    @property
    def called(self) -> bool:
        return bool(self.calls)


@dataclass(frozen=True)
class Content:
    text: str


@dataclass(frozen=True)
class CallStart:
    index: int
    name: str


@dataclass(frozen=True)
class ArgsDelta:
    index: int
    text: str


Event = Content | CallStart | ArgsDelta


class _JsonObject:
    """Where a JSON object written a piece at a time ends: depth, strings and escapes tracked."""

    def __init__(self):
        self.depth = 0
        self.in_str = False
        self.esc = False
        self.started = False

    def feed(self, text: str) -> int:
        """How much of ``text`` belongs to the object: ``len(text)`` while it is still open,
        else the index just past its closing brace; -1 if it does not start with ``{``."""
        for i, c in enumerate(text):
            if not self.started:
                if c != "{":
                    return -1
                self.started = True
                self.depth = 1
                continue
            if self.in_str:
                if self.esc:
                    self.esc = False
                elif c == "\\":
                    self.esc = True
                elif c == '"':
                    self.in_str = False
            elif c == '"':
                self.in_str = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth == 0:
                    return i + 1
        return len(text)


class ToolParser:
    """Feed a reply's text as it comes (``feed``), then ``finish``; each returns events."""

    def __init__(self, syntax: CallSyntax):
        self.syntax = syntax
        self.buf = ""  # text not yet decided
        self.content: list[str] = []
        self.held_space = ""  # trailing whitespace of the content: dropped if a call follows
        self.calls: list[ParsedCall] = []
        self.state = "content"  # content, plain (text only, for good), calls, done, cut, malformed
        self.plan: list = []  # the parts still expected, when in calls
        self.json: _JsonObject | None = None
        self.malformed = ""
        self.trigger = syntax.trigger
        self.raw: list[str] = []  # everything fed

    # --- the interface ---------------------------------------------------------------------
    def feed(self, text: str) -> list[Event]:
        self.raw.append(text)
        self.buf += text
        return self._run(final=False)

    def finish(self) -> list[Event]:
        events = self._run(final=True)
        if self.state in ("content", "plain"):
            events += self._content(self.held_space + self.buf)
            self.held_space = self.buf = ""
        elif self.state == "calls":  # the reply ended inside a call: the budget ran out
            self.state = "cut"
        return events

    def reply(self) -> Reply:
        """What was read (after ``finish``: the whole reply). A reply that left the syntax is
        all content, as written: no call of it is sure. One cut short by the budget keeps its
        last call as far as it was written, as OpenAI's API does (the finish reason says
        "length")."""
        if self.state == "malformed":
            return Reply("".join(self.raw), [], self.malformed)
        calls = [c for c in self.calls if c.name]  # a call cut before its name said nothing
        text = "".join(self.content)
        return Reply(text if text.strip() or not calls else None, calls)

    # --- the states ------------------------------------------------------------------------
    def _run(self, final: bool) -> list[Event]:
        events: list[Event] = []
        while True:
            before = (self.state, len(self.buf), len(self.plan))
            if self.state == "content":
                events += self._in_content(final)
            elif self.state == "plain":
                events += self._content(self.held_space + self.buf)
                self.held_space = self.buf = ""
            elif self.state == "calls":
                events += self._in_calls(final)
            elif self.state == "done" and self.buf:
                self._fail()
            if (self.state, len(self.buf), len(self.plan)) == before:
                return events

    def _content(self, text: str) -> list[Event]:
        if not text:
            return []
        self.content.append(text)
        return [Content(text)]

    def _in_content(self, final: bool) -> list[Event]:
        buf, trig = self.buf, self.trigger
        if not self.syntax.text_before:
            head = buf.lstrip()
            if head.startswith(trig):
                self.buf = head[len(trig):]
                return self._begin_calls()
            if trig.startswith(head) and not final:
                return []  # still may become a call
            self.state = "plain"
            return []
        at = buf.find(trig)
        if at >= 0:
            events = self._text(buf[:at], hold=True)
            self.buf = buf[at + len(trig):]
            return events + self._begin_calls()
        keep = 0 if final else _tail_prefix(buf, trig)
        self.buf = buf[len(buf) - keep:]
        return self._text(buf[:len(buf) - keep], hold=not final)

    def _text(self, text: str, hold: bool) -> list[Event]:
        """Content, with its trailing whitespace held back (a call after it would drop it)."""
        text = self.held_space + text
        cut = len(text.rstrip()) if hold else len(text)
        self.held_space = text[cut:]
        return self._content(text[:cut])

    def _begin_calls(self) -> list[Event]:
        self.held_space = ""
        s = self.syntax
        first = list(s.open + s.call)
        self.plan = first[1:]  # the trigger was read
        self.state = "calls"
        if not s.open:
            self.calls.append(ParsedCall())
        else:
            self.plan = first[1:len(s.open)] + [_NEXT_CALL]
        return []

    def _in_calls(self, final: bool) -> list[Event]:
        if not self.plan:
            return self._after_call(final)
        part = self.plan[0]
        if part is _NEXT_CALL:
            self.plan = list(self.syntax.call)
            self.calls.append(ParsedCall())
            return []
        if isinstance(part, Lit):
            return self._literal(part.text)
        if part.kind == "args":
            return self._args()
        return self._word(part)

    def _literal(self, text: str) -> list[Event]:
        if self.buf.startswith(text):
            self.buf = self.buf[len(text):]
            self.plan.pop(0)
        elif not text.startswith(self.buf):
            self._fail()
        return []  # else the literal may still come (or the reply was cut inside it)

    def _word(self, part: Slot) -> list[Event]:
        n = 0
        while n < len(self.buf) and self.buf[n] in NAME_CHARS:
            n += 1
        if n == len(self.buf):
            return []  # the word may go on
        word, self.buf = self.buf[:n], self.buf[n:]
        self.plan.pop(0)
        if not word:
            self._fail()
            return []
        if part.kind == "name":
            call = self.calls[-1]
            call.name = word
            return [CallStart(len(self.calls) - 1, word)]
        return []  # an id the model wrote: the server gives its own

    def _args(self) -> list[Event]:
        if self.json is None:
            self.json = _JsonObject()
        n = self.json.feed(self.buf)
        if n < 0:
            self._fail()
            return []
        piece, self.buf = self.buf[:n], self.buf[n:]
        call = self.calls[-1]
        call.arguments += piece
        if self.json.started and self.json.depth == 0:
            self.json = None
            self.plan.pop(0)
        return [ArgsDelta(len(self.calls) - 1, piece)] if piece else []

    def _after_call(self, final: bool) -> list[Event]:
        """Between calls: another call (the separator and the next call's opening), the close,
        or (with no close) the end."""
        s = self.syntax
        sep = s.sep or ()
        self.calls[-1].complete = True
        options = []
        if s.sep is not None:
            lead = [p for p in s.call if isinstance(p, Lit)][:1]
            options.append(("next", "".join(p.text for p in s.sep + tuple(lead))))
        options.append(("close", "".join(p.text for p in s.close)))
        for kind, text in options:
            if text and self.buf.startswith(text):
                if kind == "next":
                    self.buf = self.buf[len("".join(p.text for p in sep)):]
                    self.plan = [_NEXT_CALL]
                else:
                    self.buf = self.buf[len(text):]
                    self.state = "done"
                return []
        if not self.buf:
            if final and not s.close:
                self.state = "done"
            return []
        if not any(text.startswith(self.buf) for _, text in options):
            self._fail()
        return []  # else what comes next may still tell (or the reply was cut there)

    def _fail(self) -> None:
        self.malformed += self.buf
        self.buf = ""
        self.plan = []
        self.state = "malformed"


_NEXT_CALL = object()  # a plan step: the next call's parts


def _tail_prefix(text: str, marker: str) -> int:
    """The length of the longest tail of ``text`` that ``marker`` begins with."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def parse_reply(syntax: CallSyntax, text: str) -> Reply:
    """A whole reply's content and calls (the stream, fed at once)."""
    parser = ToolParser(syntax)
    parser.feed(text)
    parser.finish()
    return parser.reply()

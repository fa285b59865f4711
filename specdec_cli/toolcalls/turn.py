"""A chat request made ready to run: its prompt tokens, the grammar its reply must follow, the
marker tokens its text must show, and how its reply is read. The server and ``--batch`` both
go through here, so a conversation renders, constrains and parses the same way in each.

One ``ChatPrompter`` per loaded target: the tool-call family is the template's, fixed for the
model's life; which of the family's markers are single special tokens of the vocabulary (so
the grammar names them by id and the text shows them) is looked up once. Compiled grammars
are kept for the tool sets seen lately, since an agent sends the same tools every turn.
Everything here may run off the engine's thread (the server prepares requests on its HTTP
side): it reads the vocabulary and renders text, and never decodes.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from ..engine.chat.prompt import checked, render
from ..engine.chat.template import TemplateRefused
from ..engine.structured.constraint import Grammar, compile_constraint, tokenizer_for
from ..errors import UsageError
from ..terminal import console
from ..terminal.constraint_args import ConstraintSpec
from .formats import ToolFormat, format_for
from .grammar import call_grammar
from .request import ToolRequest, ToolsError
from .stream import ReplyStream, read

GRAMMARS_KEPT = 32  # compiled tool grammars kept (an agent's tools, across its turns)
TRANSCRIPTS_KEPT = 64  # answered conversations whose tokens are kept for their next turn
SOURCE_MIN = 64  # characters of a message worth offering in its JSON spelling
SOURCES_MAX = 32_768  # tokens of such spellings indexed per request
# llguidance's words for a schema keyword or format it does not implement
_UNSUPPORTED = re.compile(r"Unimplemented keys|Unknown format")


@dataclass
class Turn:
    """One request, ready: the tokens to decode and what its reply is held to."""

    tokens: list[int]
    grammar: Grammar | None
    shown: frozenset[int]  # control tokens its text renders (the family's markers)
    tools: ToolRequest | None  # None, or tools the model is offered
    format: ToolFormat
    sources: tuple[list[int], ...] = ()  # the conversation's texts as a JSON string spells them
    text: str = ""  # the prompt as the template wrote it
    controls: tuple[int, ...] = ()  # where in ``text`` the template's control tokens start
    loose: dict = field(default_factory=dict)  # tools the grammar holds only in part: name -> schema

    def stream(self) -> ReplyStream:
        return ReplyStream(self.format.syntax if self.tools else None, self.tools, loose=self.loose)

    def read(self, text: str):
        """The whole reply's content and calls, read as its stream would be."""
        return read(self.format.syntax if self.tools else None, self.tools, text, loose=self.loose)


class ChatPrompter:
    def __init__(self, model, n_ctx: int):
        self.model = model
        self.n_ctx = n_ctx
        self.format = format_for(model.chat_template())
        self._specials: dict[str, int] | None = None
        self._grammars: OrderedDict[str, Grammar] = OrderedDict()
        self._said: set[Grammar] = set()  # lenient tool schemas already named on stderr
        # prompt + reply text -> (their tokens, where the prompt's control tokens are)
        self._transcripts: OrderedDict[str, tuple[list[int], tuple[int, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def specials(self) -> dict[str, int]:
        """The family's literal texts that are one special token here, by id."""
        if self._specials is None:
            tok = tokenizer_for(self.model)
            found = {}
            for text in set(self.format.syntax.literals()):
                ids = self.model.tokenize(text, add_special=False, parse_special=True)
                if len(ids) == 1 and tok.is_special_token(ids[0]):
                    found[text] = ids[0]
            self._specials = found
        return self._specials

    def turn(self, messages: list[dict], tools: ToolRequest | None = None,
             text: ConstraintSpec | None = None) -> Turn:
        """``messages`` (already checked) with ``tools`` offered; ``text``: the constraint on a
        reply's text (``response_format``), which under tools holds where no call is made."""
        offered = tools if tools is not None and tools.active else None
        convo, template_tools = self.format.prepare(messages, offered)
        try:
            rendered = render(self.model, convo, template_tools)
        except TemplateRefused:
            if offered is None or template_tools is not None:
                raise
            # the tools went into a system message that this template refuses (Gemma's): the first user turn
            convo, _ = self.format.prepare(messages, offered, system=False)
            rendered = render(self.model, convo, None)
        tokens = self._tokens(rendered)
        json_out = offered is not None or (text is not None and text.kind == "json_schema")
        sources = self._escaped(messages) if json_out else ()
        if offered is None:
            grammar = self.constraint(text) if text is not None else None
            return Turn(tokens, grammar, frozenset(), None, self.format, sources, rendered.text,
                        rendered.controls_before(len(rendered.text)))
        loose = {}  # tools whose schemas use keywords the grammar cannot hold: name -> schema
        for i, t in enumerate(offered.tools):  # each schema alone first: an error names its tool
            if self._tool_schema(i, t):
                loose[t.name] = t.argument_schema()
        schema = None
        if text is not None:
            if text.kind != "json_schema":
                raise ToolsError(f"{text.origin} cannot be combined with tools", "response_format")
            schema = json.loads(text.source_text)
        lark = call_grammar(self.format.syntax, offered, self.specials(), schema, lenient=frozenset(loose))
        grammar = self._compiled(ConstraintSpec("grammar", lark, "tools"))
        return Turn(tokens, grammar, frozenset(self.specials().values()), offered, self.format, sources,
                    rendered.text, rendered.controls_before(len(rendered.text)), loose)

    def _tool_schema(self, i: int, tool) -> bool:
        """Compile ``tool``'s argument schema alone (an error names the tool); True where the
        grammar had to ignore keywords llguidance does not implement (``propertyNames``,
        ``if``/``then``, an unknown ``format``: Claude Code's tools use the first). Such a
        schema is compiled leniently, as llguidance offers, rather than refused: the agent
        could not run at all otherwise. The ignored keywords are said once on stderr, and the
        calls' arguments are validated against the whole schema after generation
        (``ReplyStream``), so a call that breaks them is named, not passed on unseen."""
        schema = tool.argument_schema()
        origin = f"tools[{i}].function.parameters"
        try:
            self._compiled(ConstraintSpec("json_schema", json.dumps(schema), origin))
            return False
        except ToolsError as exc:
            if not _UNSUPPORTED.search(str(exc)):
                raise
            strict = exc
        lenient = {**schema, "x-guidance": {**schema.get("x-guidance", {}), "lenient": True}}
        try:
            grammar = self._compiled(ConstraintSpec("json_schema", json.dumps(lenient), origin))
        except ToolsError:
            raise strict from None
        if grammar not in self._said:
            self._said.add(grammar)
            ignored = "; ".join(dict.fromkeys(grammar.warnings)) or str(strict)
            console.warn(f"tool {tool.name!r}: the grammar cannot hold part of its schema ({ignored}); "
                         "its calls' arguments are checked after they are written")
        return True

    def _tokens(self, rendered) -> list[int]:
        """The prompt's tokens. Where it begins with the text of a conversation this server
        answered (its prompt and its reply, as the client sends them back), those are the
        very tokens it generated, and only the rest is tokenized: a reply's tokens are not
        always the ones its text tokenizes to (``\\n`` then ``def`` where the tokenizer makes
        ``\\`` then ``ndef``), and a prompt tokenized afresh would leave the cache at the
        first such place and read the rest of the reply again. The prefix must hold the
        template's control tokens where the answered prompt held them: text that merely spells
        an answered conversation (markers and all) inside a message gets no tokens of it."""
        with self._lock:
            best = None
            for text, (_, controls) in self._transcripts.items():
                if (best is None or len(text) > len(best)) and rendered.text.startswith(text) \
                        and rendered.controls_before(len(text)) == controls:
                    best = text
            if best is None:
                head = None
            else:
                head = self._transcripts[best][0]
                self._transcripts.move_to_end(best)
        if head is None or best is None:
            return checked(rendered.tokens(self.model), self.n_ctx)
        return checked(head + rendered.tokens(self.model, start=len(best)), self.n_ctx)

    def remember(self, turn: Turn, result) -> None:
        """A finished reply to ``turn``: its text and tokens, for the turn that sends it back."""
        if not turn.text or result.stats.stop_reason not in ("eog", "grammar") or not result.tokens:
            return
        controls = list(turn.controls)  # and the control tokens the reply showed (a family's markers)
        if turn.shown:
            ids = set(self.model.control_tokens().values())
            piece = self.model.piece_showing(turn.shown)
            written = b""
            for t in result.tokens:
                if t in ids and t in turn.shown:
                    controls.append(len(turn.text) + len(written.decode("utf-8", errors="replace")))
                written += piece(t)
        with self._lock:
            self._transcripts[turn.text + result.text] = (turn.tokens + result.tokens, tuple(controls))
            while len(self._transcripts) > TRANSCRIPTS_KEPT:
                self._transcripts.popitem(last=False)

    def _escaped(self, messages: list[dict]) -> tuple[list[int], ...]:
        """The messages' texts as they read inside a JSON string, where that differs (newlines,
        quotes, backslashes), as tokens: a tool call's arguments or a JSON reply copy a file the
        user gave or a tool returned in that spelling, which the prompt's own tokens never
        match after the first line."""
        out = []
        budget = SOURCES_MAX
        for m in messages:
            text = m.get("content")
            if not isinstance(text, str) or len(text) < SOURCE_MIN:
                continue
            escaped = json.dumps(text, ensure_ascii=False)[1:-1]
            if escaped == text:
                continue
            tokens = self.model.tokenize(escaped, add_special=False, parse_special=False)
            out.append(tokens[:budget])
            budget -= len(out[-1])
            if budget <= 0:
                break
        return tuple(out)

    def constraint(self, spec: ConstraintSpec) -> Grammar:
        """A text constraint (``response_format``, a ``--batch`` line's schema), compiled for
        this vocabulary; a ``ToolsError`` naming its parameter where it does not compile."""
        return self._compiled(spec)

    def _compiled(self, spec: ConstraintSpec) -> Grammar:
        key = f"{spec.kind}\0{spec.origin}\0{spec.source_text}"
        with self._lock:
            hit = self._grammars.get(key)
            if hit is not None:
                self._grammars.move_to_end(key)
                return hit
        try:
            grammar = compile_constraint(spec, tokenizer_for(self.model))
        except UsageError as exc:
            param = "tools" if spec.origin.startswith("tools") else "response_format"
            raise ToolsError(exc.one_line(), param) from None
        with self._lock:
            self._grammars[key] = grammar
            while len(self._grammars) > GRAMMARS_KEPT:
                self._grammars.popitem(last=False)
        return grammar

"""Structured output: a JSON Schema, a grammar or a regex, enforced token by token.

Why llguidance: it is the engine llama.cpp (LLAMA_LLGUIDANCE builds), vLLM and SGLang use;
it compiles JSON Schema, GBNF, Lark and regexes into one Earley parser over a lazily built
lexer, computes a token mask for a 150k vocabulary in tens of microseconds, and has what a
speculative loop needs beyond masks: ``validate_tokens`` (how much of a draft the grammar
allows), ``rollback`` (undo tokens, so the masks along a draft cost no copies) and
``compute_ff_tokens`` (the tokens the grammar forces). Writing a grammar engine here would
repeat all of that, worse.

How it is used: ``compile_constraint(spec)`` checks a ``ConstraintSpec`` before any model
loads (with no tokenizer, then against a 257-token byte vocabulary, which catches a grammar
that matches nothing); once the target is loaded, ``tokenizer_for(model)`` builds llguidance's
tokenizer from the llama.cpp vocabulary (once per model) and ``Constraint(grammar, tokenizer)``
is the matcher one generation drives: ``mask`` the logits, ``consume`` what the target
accepted, ``masks_along`` a draft for the rows of a verify pass, stop when ``is_stopped``. What a
speculative pass adds on top (the draft cut, the rows masked, each kept token checked) is
``pass_masks.py``'s.

The tokenizer keeps the model's vocabulary pointer (llguidance tokenizes forced bytes through
llama.cpp's ``llama_tokenize``), so a ``Constraint`` must not outlive its model.
"""

from __future__ import annotations

import re
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import llguidance
import llguidance.numpy as llg_np
import numpy as np
from llguidance import LLMatcher, LLTokenizer

from ...errors import UsageError
from ...terminal.constraint_args import ConstraintSpec

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

# JSON comes out as Python's json.dumps writes it: no free whitespace (a small model can
# otherwise loop on newlines), so the structure between values is forced and costs no
# decode steps. A schema's own "x-guidance" object overrides these.
JSON_DEFAULTS: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

_HINTS = {
    "json_schema": "llguidance supports most of JSON Schema 2020-12; see its docs/json_schema.md",
    "grammar": "write GBNF as in llama.cpp's grammars/README.md, or Lark as in llguidance's docs/syntax.md",
    "regex": "use Rust regex syntax (no lookarounds, no ^ or $ anchors: the pattern matches the whole output)",
}
_AT = re.compile(r"^at (\d+)\((\d+)\): ")
_NEG_INF = np.float32(-np.inf)


@dataclass(frozen=True)
class Grammar:
    """A checked constraint: llguidance's grammar text and where it came from."""

    kind: str
    origin: str
    text: str  # llguidance's grammar (JSON), what LLMatcher takes
    warnings: tuple[str, ...] = ()


class ConstraintViolation(RuntimeError):
    """A token the grammar does not allow was consumed: a bug in the loop, not a user error."""


# --- tokenizers ------------------------------------------------------------------------------

_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_TOKENIZERS_LOCK = threading.Lock()  # the server builds one off the engine's thread


def tokenizer_for(model) -> LLTokenizer:
    """llguidance's tokenizer for a loaded ``Model`` (built once per model, ~1-3 s for 150k tokens).

    Built with ``llguidance.llamacpp.lltokenizer_from_vocab``: every token's bytes with special
    tokens rendered (control tokens marked special), and llama.cpp's ``llama_tokenize`` for the
    forced bytes. Its end-of-sequence tokens are all of the vocabulary's end-of-generation
    tokens, as ``Model.is_eog`` (the loop's stop rule) sees them, so the grammar allows exactly
    those, and only where the output is complete.
    """
    if not getattr(model, "_ptr", None):
        raise ValueError("tokenizer_for: the model is closed")
    with _TOKENIZERS_LOCK:
        return _tokenizer_for(model)


def _tokenizer_for(model) -> LLTokenizer:
    tok = _TOKENIZERS.get(model)
    if tok is None:
        from llguidance.llamacpp import lltokenizer_from_vocab

        eog = [t for t in range(model.n_vocab) if model.is_eog(t)]
        with warnings.catch_warnings():  # the helper calls the deprecated llama_token_get_attr per token
            warnings.simplefilter("ignore", DeprecationWarning)
            tok = lltokenizer_from_vocab(model._vocab, n_vocab=model.n_vocab, eos_token=eog or None)
        _TOKENIZERS[model] = tok
    return tok


class _ByteVocab:
    """256 byte tokens and an end-of-sequence token: enough to check a grammar before a model loads."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([b]) for b in range(256)] + [b"\xff<|eos|>"]
    special_token_ids = [256]

    def __call__(self, text):
        return list(text.encode("utf-8") if isinstance(text, str) else text)


_BYTE_TOKENIZER: list[LLTokenizer] = []


def _byte_tokenizer() -> LLTokenizer:
    if not _BYTE_TOKENIZER:
        _BYTE_TOKENIZER.append(LLTokenizer(llguidance.TokenizerWrapper(_ByteVocab()), slices=[]))
    return _BYTE_TOKENIZER[0]


# --- compiling -------------------------------------------------------------------------------


def compile_constraint(spec: ConstraintSpec, tokenizer: LLTokenizer | None = None) -> Grammar:
    """Compile and check ``spec``; a ``UsageError`` (exit code 2) names its origin and what is wrong.

    Without a tokenizer (before a model loads) a grammar that names the model's special tokens
    cannot be fully checked; it is checked again by ``Constraint`` against the real vocabulary.
    """
    what = {"json_schema": "JSON schema", "grammar": "grammar", "regex": "regex"}.get(spec.kind)
    if what is None:
        raise ValueError(f"unknown constraint kind {spec.kind!r}")
    if not spec.source_text.strip():
        raise _usage(spec, f"empty {what}")
    translated = False
    try:
        if spec.kind == "json_schema":
            schema = {"true": "{}", "false": None}.get(spec.source_text.strip(), spec.source_text)
            if schema is None:
                raise _usage(spec, "the schema is false: nothing satisfies it")
            text = LLMatcher.grammar_from_json_schema(schema, defaults=JSON_DEFAULTS)
        elif spec.kind == "regex":
            text = LLMatcher.grammar_from_regex(spec.source_text)
        else:
            from llguidance.gbnf_to_lark import any_to_lark, is_lark_syntax

            translated = not is_lark_syntax(spec.source_text)
            text = LLMatcher.grammar_from_lark(any_to_lark(spec.source_text))
    except UsageError:
        raise
    except Exception as exc:  # ValueError from the JSON reader, GbnfToLarkError from the converter
        raise _usage(spec, _invalid(what, _describe(str(exc), spec.kind, translated))) from None
    is_error, messages = LLMatcher.validate_grammar_with_warnings(text, tokenizer)
    if is_error:
        raise _usage(spec, _invalid(what, _describe(messages[0], spec.kind, translated)))
    grammar = Grammar(spec.kind, spec.origin, text, tuple(" ".join(m.split()) for m in messages))
    # a grammar can be well formed and still match nothing: the first mask says so
    matcher = LLMatcher(tokenizer or _byte_tokenizer(), text, log_level=0)
    if not matcher.is_error():  # an error here, with the byte vocabulary, is a special-token name
        _first_mask(matcher, grammar, matcher.compute_bitmask)
    elif tokenizer is not None:
        raise _usage(spec, _invalid(what, _describe(matcher.get_error(), spec.kind, translated)))
    return grammar


def _first_mask(matcher: LLMatcher, grammar: Grammar, compute) -> None:
    compute()
    if matcher.is_error():
        err = matcher.get_error()
        detail = "no text matches it" if "NoExtension" in err else _describe(err, grammar.kind, False)
        raise UsageError(f"{grammar.origin}: {detail}", hint=_HINTS[grammar.kind])


def _usage(spec: ConstraintSpec, detail: str) -> UsageError:
    return UsageError(f"{spec.origin}: {detail}", hint=_HINTS[spec.kind])


def _invalid(what: str, detail: str) -> str:
    return detail if detail.startswith("invalid ") else f"invalid {what}: {detail}"


def _describe(msg: str, kind: str, translated: bool) -> str:
    """llguidance's (multi-line) message as one line, with the position in the user's terms."""
    lines = msg.strip().splitlines() or ["unknown error"]
    head = lines[0].strip()
    head = head.removeprefix("Failed to convert the grammar from GBNF to Lark: ")
    at = _AT.match(head)
    if at:
        head = head[at.end():]
    if head.endswith("regex parse error:") and len(lines) >= 4 and "^" in lines[2]:
        # the Rust regex crate: the pattern, a caret line under it, then "error: ..."
        pattern, caret = lines[1], lines[2]
        column = caret.index("^") - (len(pattern) - len(pattern.lstrip())) + 1
        reason = next((x.strip()[7:] for x in lines[3:] if x.strip().startswith("error: ")), "")
        head = f"{head[: -len(' regex parse error:')].rstrip(':')}: {reason} at column {column}"
        at = None if kind == "regex" or translated else at
    if at and kind == "grammar":
        where = f"line {at[1]}, column {at[2]}"
        if translated:
            shown = next((x.split("|", 1)[1].strip() for x in lines[1:] if x.strip().startswith(f"{at[1]} |")), "")
            where += " of its Lark translation" + (f" `{shown}`" if shown else "")
        head += f" ({where})"
    head = " ".join(head.replace(" (in regex)", "").split())
    return head if len(head) <= 300 else head[:297] + "..."


# --- one generation --------------------------------------------------------------------------


class Constraint:
    """The grammar's state for one generation: the masks, the forced tokens, the checks of a draft.

    ``n_vocab`` is the width of the logits rows (the model's), which may differ from the
    tokenizer's vocabulary: tokens past the tokenizer's are never allowed, bits past the
    row are dropped.
    """

    def __init__(self, grammar: Grammar, tokenizer: LLTokenizer, n_vocab: int | None = None):
        self.grammar = grammar
        self.tokenizer = tokenizer
        self.n_vocab = int(n_vocab if n_vocab is not None else tokenizer.vocab_size)
        self._matcher = LLMatcher(tokenizer, grammar.text, log_level=0)
        if self._matcher.is_error():
            detail = _describe(self._matcher.get_error(), grammar.kind, False)
            raise UsageError(f"{grammar.origin}: {detail}", hint=_HINTS[grammar.kind])
        self._bitmask = llg_np.allocate_token_bitmask(1, tokenizer.vocab_size)
        self._width = min(self.n_vocab, tokenizer.vocab_size)
        self._eos = frozenset(tokenizer.eos_tokens)
        _first_mask(self._matcher, grammar, self._fill)

    # --- masks ---------------------------------------------------------------------------
    def _fill(self) -> np.ndarray:
        llg_np.fill_next_token_bitmask(self._matcher, self._bitmask)
        return self._bitmask[0]

    def _unpack(self, row: np.ndarray, out: np.ndarray) -> np.ndarray:
        bits = np.unpackbits(row.view(np.uint8), bitorder="little", count=self._width)
        out[: self._width] = bits.view(np.bool_)
        out[self._width:] = False
        return out

    def allowed_mask(self) -> np.ndarray:
        """The tokens allowed next, as ``n_vocab`` booleans."""
        return self._unpack(self._fill(), np.empty(self.n_vocab, dtype=np.bool_))

    def mask(self, logits: np.ndarray) -> None:
        """Set the logits of disallowed tokens to -inf, in place (a 1-D float row, any width)."""
        apply_mask(logits, self.allowed_mask())

    def masks_along(self, draft: list[int]) -> np.ndarray:
        """The masks for the rows of a verify pass over [last token, d1, d2, ...]: row 0 is the
        current state's, row i the state's after d1..di. Only the rows up to the first token
        the grammar rejects (which the verifier can never accept): ``validate_draft(draft) + 1``
        rows of ``n_vocab`` booleans. The state is left as it was."""
        n = self.validate_draft(draft)
        out = np.empty((n + 1, self.n_vocab), dtype=np.bool_)
        self._unpack(self._fill(), out[0])
        recorded = 0
        try:
            for i, token in enumerate(draft[:n]):
                recorded += self._advance(token)
                self._unpack(self._fill(), out[i + 1])
        finally:
            if recorded and not self._matcher.rollback(recorded):
                raise ConstraintViolation(f"rollback of {recorded} tokens failed: {self.error()}")
        return out

    # --- tokens --------------------------------------------------------------------------
    def validate_draft(self, tokens: list[int]) -> int:
        """How many of ``tokens``, in order from the current state, the grammar allows (nothing consumed)."""
        tokens = list(tokens)
        if tokens and self._matcher.is_stopped():  # validate_tokens rejects the EOS a stopped matcher takes
            return int(tokens[0] in self._eos)
        return int(self._matcher.validate_tokens(tokens)) if tokens else 0

    def consume(self, tokens: list[int]) -> None:
        """Advance past tokens the target accepted; a token the grammar rejects is a bug."""
        tokens = list(tokens)
        if self._matcher.is_error():
            raise ConstraintViolation(f"the matcher failed earlier: {self.error()}")
        n = self.validate_draft(tokens)
        if n < len(tokens):
            shown = self.tokenizer.dbg_tokens(tokens[n:n + 1])
            raise ConstraintViolation(f"token {tokens[n]} {shown} (position {n}) is not allowed by {self.grammar.origin}")
        for token in tokens:
            self._advance(token)

    def _advance(self, token: int) -> bool:
        """Consume one validated token; False when it was the end of sequence after the matcher
        stopped, which llguidance neither needs nor records (nor rolls back)."""
        if self._matcher.is_stopped():
            return False
        if not self._matcher.consume_token(token):
            raise ConstraintViolation(f"token {token} rejected after validation: {self.error()}")
        return True

    def forced_tokens(self) -> list[int]:
        """The tokens that must come next whatever the model does (llguidance's fast-forward
        tokens: the forced bytes, tokenized as llama.cpp would)."""
        return list(self._matcher.compute_ff_tokens())

    # --- state ---------------------------------------------------------------------------
    def is_accepting(self) -> bool:
        """The output so far is complete: stopping now (end of sequence) satisfies the grammar."""
        return bool(self._matcher.is_accepting())

    def is_stopped(self) -> bool:
        """Nothing but end of sequence may follow: stop generating (reason "grammar")."""
        return bool(self._matcher.is_stopped())

    def stop_reason(self) -> str:
        return str(self._matcher.stop_reason())

    def error(self) -> str:
        """llguidance's error, as one line ("" when there is none)."""
        err = self._matcher.get_error()
        return _describe(err, self.grammar.kind, False) if err else ""

    def reset(self) -> None:
        """Back to the start, for a new prompt."""
        if not self._matcher.reset():
            raise ConstraintViolation(f"reset failed: {self.error()}")


def apply_mask(logits: np.ndarray, allowed: np.ndarray) -> None:
    """Set ``logits[..., t]`` to -inf wherever ``allowed[..., t]`` is false, in place (a row, or
    rows with a mask each); logits wider than the mask are disallowed past it, a wider mask is
    cut to the logits. ~50-150 us for a 150k row: index lists beat a masked copy here."""
    if logits.ndim > 1:
        for row, ok in zip(logits, allowed):
            apply_mask(row, ok)
        return
    width = min(logits.shape[-1], allowed.shape[-1])
    row, ok = logits[:width], allowed[:width]
    if np.count_nonzero(ok) * 2 < width:  # few allowed (JSON structure): keep those
        keep = np.flatnonzero(ok)
        values = row[keep]
        row.fill(_NEG_INF)
        row[keep] = values
    else:  # most allowed (free text): drop the others
        row[np.flatnonzero(~ok)] = _NEG_INF
    logits[width:] = _NEG_INF

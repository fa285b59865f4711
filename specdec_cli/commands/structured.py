"""What ``--json-schema``, ``--grammar-file`` and ``--regex`` (and a ``--batch`` line's own
``json_schema``) need from the commands: every constraint compiled before a model loads, the
drafting methods that can honour one, the grammars compiled again for the target's
vocabulary once it is loaded, and the output checked at the end.

The decoding itself (masked rows, forced tokens as drafts, drafts cut at the first rejected
token, the stop when the grammar is complete) is the engine's: ``engine/structured/constraint.py``.
"""

from __future__ import annotations

import json

from ..errors import UsageError
from ..terminal.constraint_args import ConstraintSpec

# a draft head or MTP reads the target's hidden states for the tokens it drafts after, which a
# forced token has not been through: they run unconstrained only
CONSTRAINABLE = (None, "auto", "ngram", "draft")


def item_specs(items) -> list[ConstraintSpec | None]:
    """Each ``--batch`` line's own JSON Schema, as a spec (None where it has none)."""
    return [ConstraintSpec("json_schema", it.json_schema, f"--batch prompt {i + 1} json_schema")
            if getattr(it, "json_schema", None) else None for i, it in enumerate(items)]


def item_tools(items, chat: bool) -> list:
    """Each ``--batch`` line's tools (``ToolRequest``, None where it offers none), checked: a line
    whose tools are malformed, or that is not rendered as a chat, is a one-line error."""
    from ..toolcalls.request import ToolsError, read_tools

    out = []
    for i, it in enumerate(items):
        raw = getattr(it, "tools", None)
        if not raw:
            out.append(None)
            continue
        if it.messages is None and not chat:
            raise UsageError(f"--batch prompt {i + 1} offers tools but is not a chat",
                             hint="give it 'messages', or pass --chat")
        try:
            out.append(read_tools(raw.get("tools"), raw.get("tool_choice"), raw.get("parallel_tool_calls")))
        except ToolsError as exc:
            raise UsageError(f"--batch prompt {i + 1}: {exc}") from None
    return out


def check_before_load(spec: ConstraintSpec | None, items, method: str | None, chat: bool = False) -> list:
    """Every constraint compiled (one line and exit 2 for a broken one), every line's tools
    read, and both refused where the drafting method cannot honour a grammar, before any
    model loads; each line's tools (``item_tools``)."""
    from ..engine.structured.constraint import compile_constraint

    specs = [s for s in [spec, *item_specs(items)] if s is not None]
    per_line = item_tools(items, chat)
    if any(t is not None and t.active for t in per_line) and method not in CONSTRAINABLE:
        raise UsageError(f"tools cannot be combined with --method {method}: its drafts are made "
                         "from hidden states a forced token never went through",
                         hint="use --method auto (the default), draft or ngram, or --no-draft")
    if not specs:
        return per_line
    if method not in CONSTRAINABLE:
        raise UsageError(f"{specs[0].origin} cannot be combined with --method {method}: its drafts are made "
                         "from hidden states a forced token never went through",
                         hint="use --method auto (the default), draft or ngram, or --no-draft")
    for s in specs:
        compile_constraint(s)
    return per_line


def grammars_for(engine, spec: ConstraintSpec | None, items) -> tuple[object | None, list[object | None]]:
    """The run's grammar and each line's, compiled for the loaded target's vocabulary."""
    from ..engine.structured.constraint import compile_constraint, tokenizer_for

    if spec is None and not any(item_specs(items)):
        return None, [None] * len(items)
    tok = tokenizer_for(engine.target_model)
    run = compile_constraint(spec, tok) if spec is not None else None
    return run, [compile_constraint(s, tok) if s is not None else run for s in item_specs(items)]


def unmet(result, grammar) -> str | None:
    """Why ``result`` does not satisfy ``grammar`` (None when it does, or there is none): the token
    budget or the context ran out first, or (a bug) JSON that does not parse."""
    if grammar is None:
        return None
    reason = result.stats.stop_reason
    if reason in ("length", "context"):
        ran_out = "the token budget (-n)" if reason == "length" else "the context (--ctx)"
        return f"the output does not satisfy {grammar.origin}: {ran_out} ran out first; raise it"
    if grammar.kind == "json_schema" and reason in ("grammar", "eog"):
        try:
            json.loads(result.text)
        except ValueError as exc:
            return f"the output of {grammar.origin} does not parse as JSON ({exc}); please report this"
    return None

"""What ``--json-schema``, ``--grammar-file`` and ``--regex`` ask for, read into a ``ConstraintSpec``.

Only reading happens here (files, UTF-8, JSON syntax); compiling and checking the constraint
is ``engine/structured/constraint.py``'s job, with llguidance, which this bottom-layer module must not
import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .prompts import _read_file, decode_text

KINDS = ("json_schema", "grammar", "regex")


@dataclass(frozen=True)
class ConstraintSpec:
    """``kind``: "json_schema", "grammar" (GBNF or Lark) or "regex"; ``source_text``: the
    schema, grammar or pattern as written; ``origin``: where it came from, for messages
    ("--json-schema", "--grammar-file expr.gbnf", "--regex")."""

    kind: str
    source_text: str
    origin: str


def read_constraint(
    json_schema: str | None = None, grammar_file: str | Path | None = None, regex: str | None = None
) -> ConstraintSpec | None:
    """The constraint the options ask for (None when none is given); at most one may be given.

    ``json_schema`` is inline JSON or ``@file.json``. An unreadable file or invalid JSON is a
    ``UsageError`` naming the file and the position.
    """
    given = [name for name, value in (("--json-schema", json_schema), ("--grammar-file", grammar_file),
                                      ("--regex", regex)) if value is not None]
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)} cannot be combined", hint="pass one constraint")
    if json_schema is not None:
        if json_schema.startswith("@"):
            origin = f"--json-schema {json_schema[1:]}"
            text = _read_file(Path(json_schema[1:]), "--json-schema")
        else:
            origin = "--json-schema"
            text = decode_text(json_schema, origin)
        _check_json(text, origin)
        return ConstraintSpec("json_schema", text, origin)
    if grammar_file is not None:
        text = _read_file(Path(grammar_file), "--grammar-file")
        return ConstraintSpec("grammar", text, f"--grammar-file {grammar_file}")
    if regex is not None:
        return ConstraintSpec("regex", decode_text(regex, "--regex"), "--regex")
    return None


def _check_json(text: str, origin: str) -> None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{origin}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            hint="a JSON Schema is a JSON object, e.g. '{\"type\": \"object\"}'",
        ) from None
    if not isinstance(value, (dict, bool)):
        shown = {list: "an array", str: "a string", type(None): "null"}.get(type(value), "a number")
        raise UsageError(f"{origin}: a JSON Schema is an object (or true/false), not {shown}",
                         hint="e.g. '{\"type\": \"object\"}'")

"""Prompt sets by name: the bench scenarios (``edit``, ``code``, ...) and JSONL files, read as
``specdec bench --prompts-file`` reads them.

``--sets edit,scripts/data/copy_holdout.jsonl`` in ``compare/edit_check.py``,
``checks/flash_attn_compare.py`` and ``speculation_ceiling.py``: a scenario's name is its set's
name, a file's stem is its set's.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from specdec_cli.bench.scenarios import SCENARIOS, load_scenarios  # noqa: E402
from specdec_cli.terminal.prompts import PromptItem  # noqa: E402


def load_sets(spec: str) -> list[tuple[str, str, list[dict]]]:
    """(set name, prompt id, messages) for every prompt of the named scenarios and files."""
    return [(name, item.id, item.as_messages(None)) for name, item in load_items(spec)]


def load_items(spec: str) -> list[tuple[str, PromptItem]]:
    """(set name, prompt) for every prompt of the named scenarios and files, as the project's
    prompt reader parsed them (a line's own ``json_schema`` included); a line without an id
    gets its number in its file."""
    out = []
    for name in [x.strip() for x in spec.split(",") if x.strip()]:
        if name in SCENARIOS:
            items = load_scenarios([name])[name]
        else:
            path = Path(name)
            if not path.is_file():
                sys.exit(f"error: {name!r} is neither a bench scenario ({', '.join(SCENARIOS)}) nor a file.")
            items = load_scenarios(prompts_file=path)["custom"]
            name = path.stem
        out += [(name, item if item.id is not None else replace(item, id=str(k))) for k, item in enumerate(items, 1)]
    return out

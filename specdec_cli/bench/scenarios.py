"""The prompt sets ``bench`` ships, one JSONL file per use case, and user-supplied sets."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ..errors import UsageError
from ..terminal.prompts import PromptItem, read_batch

# The article's use cases, in the order reports show them.
SCENARIOS = {
    "edit": "copy-heavy edits of a long input: whole files, tables, documents, JSON/YAML",
    "documents": "batch document processing: long transformations of a given text",
    "code": "code generation",
    "agent": "agent loops and tool scripts",
    "json": "structured output: JSON, tables, CSV, YAML",
    "qa": "short questions and answers",
    "creative": "creative writing",
}


def load_scenarios(names: list[str] | None = None, prompts_file: Path | None = None) -> dict[str, list[PromptItem]]:
    """The chosen shipped scenarios, or a user's JSONL file as the scenario ``custom``."""
    if prompts_file is not None:
        return {"custom": read_batch(prompts_file, flag="--prompts")}
    chosen = names or list(SCENARIOS)
    unknown = [n for n in chosen if n not in SCENARIOS]
    if unknown:
        raise UsageError(
            f"unknown scenario {unknown[0]!r}",
            hint=f"choose from {', '.join(SCENARIOS)}, or pass your own set with --prompts FILE",
        )
    folder = resources.files("specdec_cli.bench") / "prompts"
    out = {}
    for name in chosen:
        with resources.as_file(folder / f"{name}.jsonl") as path:
            out[name] = read_batch(Path(path), flag=None)
    return out

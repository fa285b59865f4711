"""What an export takes and gives: :class:`ExportSpec`, :class:`Export`, and the checks on a spec.

Why apart from the engines: every engine reads the same resolved settings and returns the
same result, and a malformed spec is refused (a UsageError naming the setting) before any
engine looks at it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..models.methods import Method

METHODS = Method.values()  # draft | eagle3 | dflash | dspark | ngram | mtp

__all__ = ["ENGINES", "METHODS", "NGRAM_MATCH", "ExportSpec", "Export"]

ENGINES = ("llama-server", "vllm", "sglang")

# The n-gram sizes specdec run's prompt lookup matches, longest first, before copying what
# followed (engine/drafters/ngram.py, NgramDrafter(n_min=2, n_max_match=4)).
NGRAM_MATCH = (2, 4)

_ENGINE_NAMES = {"llama-server": "llama-server", "vllm": "vLLM", "sglang": "SGLang"}
_METHOD_NAMES = {
    "draft": "a classic draft model",
    "eagle3": "EAGLE-3",
    "dflash": "DFlash",
    "dspark": "DSpark",
    "ngram": "n-gram lookup",
    "mtp": "multi-token prediction (MTP)",
}


@dataclass
class ExportSpec:
    """Everything an export needs, resolved by the caller (registry, bench store, flags).

    ``target``/``draft`` are what ``specdec run`` loads: GGUF paths (or, for vLLM/SGLang
    only, a Hugging Face repo id or checkpoint folder). ``target_repo``/``draft_repo`` name
    the Hugging Face checkpoints vLLM and SGLang load; pass the registry entry's
    ``draft_repo`` as is (a GGUF repo is recognised and not used for those engines).

    ``gpu_layers``/``gpu_layers_draft``: None leaves the engine's default, a negative
    number means all layers (specdec's -1); ``gpu_layers_draft`` None follows
    ``gpu_layers``, as in ``specdec run``.

    The optional facts below let the export refuse or adjust what would otherwise fail;
    read them from the GGUFs when at hand (``read_gguf(p).n_vocab``, and for a DFlash/DSpark
    draft its ``kv["dflash.block_size"]`` and ``kv["dflash.has_confidence_head"]``; for MTP
    the target's ``read_gguf(p).has_mtp``).

    ``ngram`` and ``mtp`` take no draft: a ``draft`` given with them is dropped with a note.
    """

    method: str  # draft | eagle3 | dflash | dspark | ngram | mtp
    target: str
    draft: str | None
    draft_max: int
    draft_min: int
    p_min: float
    ctx: int | None = None
    gpu_layers: int | None = None
    gpu_layers_draft: int | None = None
    tensor_parallel: int | None = None
    settings_source: str = "defaults"  # "bench", "registry", "defaults", "flags"
    target_repo: str | None = None  # HF checkpoint of the target (vLLM/SGLang)
    draft_repo: str | None = None  # HF checkpoint of the draft (vLLM/SGLang)
    target_n_vocab: int | None = None  # vocabulary sizes: vLLM/SGLang need them equal
    draft_n_vocab: int | None = None  # for a classic draft (llama.cpp allows 128 apart)
    draft_block_size: int | None = None  # DFlash/DSpark trained block size
    draft_has_confidence_head: bool | None = None  # DSpark: p-min needs the head
    ngram_min: int | None = None  # n-gram sizes matched, None = run's (NGRAM_MATCH)
    ngram_max: int | None = None
    target_has_mtp: bool | None = None  # MTP: the target GGUF keeps its nextn layers (None: unknown)


@dataclass
class Export:
    """A command line for one engine, and what did not carry over (``notes``)."""

    engine: str
    argv: list[str]
    notes: list[str] = field(default_factory=list)
    method: str = ""
    speculative_config: dict[str, Any] | None = None  # vLLM: the --speculative-config object

    def command_line(self) -> str:
        """The command, shell-quoted, ready to paste."""
        return shlex.join(self.argv)

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "method": self.method,
            "command": self.command_line(),
            "argv": list(self.argv),
            "speculative_config": dict(self.speculative_config) if self.speculative_config else None,
            "notes": list(self.notes),
        }


def _validate(spec: ExportSpec) -> None:
    if spec.method not in METHODS:
        raise UsageError(f"unknown method '{spec.method}'", hint=f"use one of: {', '.join(METHODS)}")
    if not spec.target or not str(spec.target).strip():
        raise UsageError("no target model to export", hint="pass --pair NAME or --target")
    checks = [
        (_is_int(spec.draft_max) and spec.draft_max >= 1, f"draft-max must be at least 1, not {spec.draft_max}",
         "pass --draft-max 1 or more"),
        (_is_int(spec.draft_min) and 0 <= spec.draft_min <= max(spec.draft_max, 0),
         f"draft-min must be between 0 and draft-max ({spec.draft_max}), not {spec.draft_min}",
         "lower --draft-min"),
        (isinstance(spec.p_min, (int, float)) and not isinstance(spec.p_min, bool) and 0.0 <= spec.p_min <= 1.0,
         f"p-min must be between 0 and 1, not {spec.p_min}", "pass --draft-p-min in [0, 1]"),
        (spec.ctx is None or (_is_int(spec.ctx) and spec.ctx >= 1), f"context must be at least 1, not {spec.ctx}",
         "pass --ctx 1 or more"),
        (spec.tensor_parallel is None or (_is_int(spec.tensor_parallel) and spec.tensor_parallel >= 1),
         f"tensor parallel size must be at least 1, not {spec.tensor_parallel}", "pass a GPU count of 1 or more"),
        (spec.gpu_layers is None or _is_int(spec.gpu_layers), f"bad GPU layer count {spec.gpu_layers}",
         "pass a whole number (-1 = all)"),
        (spec.gpu_layers_draft is None or _is_int(spec.gpu_layers_draft),
         f"bad draft GPU layer count {spec.gpu_layers_draft}", "pass a whole number (-1 = all)"),
        (all(v is None or (_is_int(v) and v >= 1) for v in (spec.ngram_min, spec.ngram_max))
         and _ngram_sizes(spec)[0] <= _ngram_sizes(spec)[1],
         f"n-gram sizes must be 1 or more, the smallest first, not {spec.ngram_min} and {spec.ngram_max}",
         "use 1 <= ngram-min <= ngram-max"),
        (spec.draft_block_size is None or (_is_int(spec.draft_block_size) and spec.draft_block_size >= 2),
         f"bad draft block size {spec.draft_block_size}", "read it from the draft's dflash.block_size"),
    ]
    for ok, problem, hint in checks:
        if not ok:
            raise UsageError(problem, hint=hint)
    if Method(spec.method).needs_draft_file and not (spec.draft or spec.draft_repo):
        raise UsageError(f"{_METHOD_NAMES[spec.method]} needs a draft model and none was given",
                         hint="pass --draft (or a --pair whose entry names one)")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ngram_sizes(spec: ExportSpec) -> tuple[int, int]:
    lo = spec.ngram_min if spec.ngram_min is not None else NGRAM_MATCH[0]
    hi = spec.ngram_max if spec.ngram_max is not None else max(NGRAM_MATCH[1], lo)
    return lo, hi

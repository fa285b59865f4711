"""``specdec bench --costs``: what the cost cache holds and what it decides, without loading a
model; ``--reset-costs`` empties it.

The cache (``engine/policy/cost_cache.py``) decides whether auto loads a draft model at all and
how far it drafts, so its figures are shown as the engine reads them back: per entry (a target
file, thread count, offload, sequences per pass, the draft beside it) the samples behind it and
how many were quiet, a pass's cost in decode steps at a few sizes, a draft token's cost in
steps, and the verdict on the draft with the figure it was compared with.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..engine.decode.engine import AUTO_DRAFT_MAX
from ..engine.drafters.auto import break_even, could_pay
from ..engine.policy import cost_cache
from ..errors import EXIT_OK
from ..terminal import console
from ..terminal.outputs import write_atomic

SHOWN_SIZES = (2, 4, 8, 16, 32)


@dataclass
class CostRow:
    target: str
    setting: str  # threads, offload, sequences per pass
    draft: str | None
    samples: str  # "quiet/all"
    age_s: float | None
    step_ms: float
    pass_steps: dict[int, float]
    draft_steps: dict[str, float]
    verdict: str



def rows() -> list[CostRow]:
    entries = cost_cache.read_entries(console.warn) or {}
    out = []
    for key in sorted(entries):
        model = cost_cache.load_cached(key, console.warn)
        if model is None:
            continue
        out.append(_row(key, model))
    return out


def _row(key: str, model) -> CostRow:
    head, _, rest = key.partition("|")
    target = re.sub(r":\d+:\d+$", "", head).rsplit("/", 1)[-1]
    fields = rest.split("|")
    threads = next((f[1:] for f in fields if re.fullmatch(r"t\d+", f)), "?")
    ngl = next((f[3:] for f in fields if re.fullmatch(r"ngl-?\d+", f)), "0")
    seqs = next((f[4:] for f in fields if re.fullmatch(r"seqs\d+", f)), "1")
    draft = next((f[6:].split(":")[0] for f in fields if f.startswith("draft-")), None)
    step = model.step_seconds()
    passes = {b: model.pass_seconds(b) / step for b in SHOWN_SIZES if b <= max(model.sizes())}
    drafts = {k: v / step for k, v in model.drafts.items()}
    quiet, total = model.samples
    return CostRow(target, f"{threads} threads, ngl {ngl}, {seqs} seq", draft, f"{quiet}/{total}",
                   time.time() - model.checked_at if model.checked_at else None, step * 1e3, passes, drafts,
                   _verdict(model, draft))


def _verdict(model, draft: str | None) -> str:
    if draft is None:
        return "no draft model beside it"
    if "draft" not in model.drafts:
        return "draft not measured yet: loaded and measured at the next run"
    if not model.quiet:
        return "only busy samples: the draft is loaded and measured again at the next run"
    edge = break_even(model, AUTO_DRAFT_MAX) / model.step_seconds()
    if could_pay(model, "draft", AUTO_DRAFT_MAX):
        return f"draft loaded (pays below {edge:.2f} of a step)"
    return f"draft left out: it pays only below {edge:.2f} of a step"


def show(json_out: Path | None = None) -> int:
    """The entries on stdout as text; with ``json_out``, every figure in that file too."""
    found = rows()
    if json_out is not None:
        write_atomic(json_out, json.dumps({"cache": str(cost_cache.cache_path()),
                                           "entries": [asdict(r) for r in found]}, indent=1) + "\n", "the costs")
    console.note(f"cost cache: {cost_cache.cache_path()} ({len(found)} entr{'y' if len(found) == 1 else 'ies'})")
    for i, r in enumerate(found):
        if i:
            console.write_text("\n")  # a blank line between entries
        age = "never checked" if r.age_s is None or r.age_s > 1e8 else f"checked {ago(r.age_s)} ago"
        sizes = ", ".join(f"{b}: {s:.2f}" for b, s in r.pass_steps.items())
        drafts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r.draft_steps.items())) or "none"
        console.write_text(
            f"{r.target} ({r.setting}{', draft ' + r.draft if r.draft else ''})\n"
            f"  samples {r.samples} quiet, {age}; a step {r.step_ms:.1f} ms\n"
            f"  a pass in steps by size: {sizes}\n"
            f"  a draft token in steps: {drafts}\n"
            f"  {r.verdict}\n")
    return EXIT_OK


def reset() -> int:
    n = cost_cache.reset()
    console.note(f"cost cache {cost_cache.cache_path()} emptied ({n} entr{'y' if n == 1 else 'ies'}); "
                 "the next run measures again")
    return EXIT_OK


def ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

"""Draft settings that ``bench --save`` measured for a target+draft pair on this machine.

Stored in ``$XDG_CONFIG_HOME/specdec/tuned.json`` (default ``~/.config/specdec``), keyed by
the two files' names and sizes, so a re-downloaded file of the same build still matches
while another quant does not. ``run`` and ``export`` use them unless flags say otherwise.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import UsageError


@dataclass
class Tuned:
    use_draft: bool
    method: str  # draft | ngram
    draft_max: int
    p_min: float
    speedup: float  # geometric mean over the scenarios measured
    scenarios: dict = field(default_factory=dict)  # scenario -> speedup of this setting
    saved_at: str = ""
    machine: str = ""


def tuned_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "specdec" / "tuned.json"


def pair_key(target: Path, draft: Path) -> str:
    t, d = Path(target), Path(draft)
    return f"{t.name}:{t.stat().st_size}+{d.name}:{d.stat().st_size}"


def _load_all() -> dict:
    path = tuned_path()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}", hint="fix or delete the file, then run `specdec bench --save` again") from None
    return data if isinstance(data, dict) else {}


def load_tuned(target: Path, draft: Path) -> Tuned | None:
    raw = _load_all().get(pair_key(target, draft))
    if not raw:
        return None
    try:
        return Tuned(**raw)
    except TypeError:
        return None  # written by another version: ignore rather than fail a run


def save_tuned(target: Path, draft: Path, tuned: Tuned) -> Path:
    data = _load_all()
    tuned.saved_at = tuned.saved_at or time.strftime("%Y-%m-%dT%H:%M:%S")
    data[pair_key(target, draft)] = asdict(tuned)
    path = tuned_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    return path

"""Draft settings that ``bench --save`` measured for a target+draft pair on this machine.

Stored in ``$XDG_CONFIG_HOME/specdec/tuned.json`` (default ``~/.config/specdec``), keyed by
the two files' names and sizes, so a re-downloaded file of the same build still matches
while another quant does not. ``run`` and ``export`` use them unless flags say otherwise.
The file is the tool's own: one that cannot be read or parsed (bytes that are not UTF-8, a
truncated write, an entry of the wrong shape) is a warning and is ignored, and the next
``bench --save`` rebuilds it, keeping the unreadable one beside it as ``tuned.json.bad``.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import OutputError
from ..paths import config_home
from ..terminal.outputs import write_atomic

Warn = Callable[[str], None]


@dataclass
class Tuned:
    use_draft: bool
    method: str  # draft | ngram | auto
    draft_max: int
    p_min: float
    speedup: float  # geometric mean over the scenarios measured
    scenarios: dict = field(default_factory=dict)  # scenario -> speedup of this setting
    saved_at: str = ""
    machine: str = ""

    @classmethod
    def from_dict(cls, raw) -> Tuned | None:
        """An entry as stored, or None when it has not the shape this version writes."""
        types = {"use_draft": bool, "method": str, "draft_max": int, "p_min": (int, float), "speedup": (int, float),
                 "scenarios": dict, "saved_at": str, "machine": str}
        if not isinstance(raw, dict) or set(raw) - set(types):
            return None
        if not {"use_draft", "method", "draft_max", "p_min", "speedup"} <= set(raw):
            return None
        for key, value in raw.items():
            if not isinstance(value, types[key]) or (key != "use_draft" and isinstance(value, bool)):
                return None
        if not 0 <= raw["draft_max"] <= 64 or not 0.0 <= raw["p_min"] <= 1.0:
            return None
        return cls(**raw)


def tuned_path() -> Path:
    return config_home() / "tuned.json"


def pair_key(target: Path, draft: Path) -> str:
    t, d = Path(target), Path(draft)
    return f"{t.name}:{t.stat().st_size}+{d.name}:{d.stat().st_size}"


def _load_all(warn: Warn | None) -> tuple[dict, bool]:
    """The stored entries, and whether the file was unusable (so that saving sets it aside)."""
    path = tuned_path()
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return {}, False
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not JSON
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc.__class__.__name__
        _warn(warn, f"ignoring the settings stored by `bench --save` in {path}: unreadable ({reason}); "
                    "the next `specdec bench --save` rebuilds it")
        return {}, True
    if not isinstance(data, dict):
        _warn(warn, f"ignoring {path}: not the object `bench --save` writes")
        return {}, True
    return data, False


def load_tuned(target: Path, draft: Path, warn: Warn | None = None) -> Tuned | None:
    data, _ = _load_all(warn)
    raw = data.get(pair_key(target, draft))
    if raw is None:
        return None
    tuned = Tuned.from_dict(raw)
    if tuned is None:
        _warn(warn, f"ignoring the stored setting for this pair in {tuned_path()}: written by another version "
                    "or edited by hand; `specdec bench --save` measures it again")
    return tuned


def save_tuned(target: Path, draft: Path, tuned: Tuned, warn: Warn | None = None) -> Path:
    """Store ``tuned`` for the pair; raises OutputError (naming the file) when it cannot be written."""
    data, unusable = _load_all(warn)
    path = tuned_path()
    if unusable:
        with contextlib.suppress(OSError):  # overwritten below
            path.replace(path.with_name(path.name + ".bad"))
    tuned.saved_at = tuned.saved_at or time.strftime("%Y-%m-%dT%H:%M:%S")
    data[pair_key(target, draft)] = asdict(tuned)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {path.parent} for the tuned settings ({exc.strerror or exc})",
                          hint="set XDG_CONFIG_HOME to a folder you may write to") from None
    return write_atomic(path, json.dumps(data, indent=2) + "\n", "the tuned settings")


def _warn(warn: Warn | None, message: str) -> None:
    if warn is not None:
        warn(message)

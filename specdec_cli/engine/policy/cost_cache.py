"""The per-machine cost cache, and why its figures can be trusted: each is kept with how busy the
machine was when it was measured, and the curve a run starts from is the median of the quiet ones.

The cache decides what loads and how far to draft, so a figure measured while something else
ran (a build beside a first ``specdec serve``) must not become the machine's truth: on this
project's machine such a start recorded a draft token at 3.26 target steps and later quiet
ones 0.5-0.6, and the draft was left out on the busy figure. So every save adds a *sample*:
the run's curve and draft costs in multiples of its decode step, its step in milliseconds,
and ``busy``, the share of the machine's CPU time other processes used meanwhile (psutil:
the system's busy time less this process's own, over the run). The last ``SAMPLES_KEPT``
samples are kept; the figures read back are per size the median over the quiet samples
(``busy`` at most ``BUSY_MAX``), or over all of them where none is quiet, in which case the
model read back is marked not ``quiet`` and the engine measures again instead of trusting
it. A median of three or more also drops the one sample far from its neighbours.

The file: ``$SPECDEC_COST_CACHE``, else ``$XDG_CACHE_HOME/specdec/costs.json``; a corrupt or
unwritable one is a note and a recalibration, never a failure. ``specdec bench --costs``
shows what it holds and what it decides, and ``--reset`` empties it.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from ...paths import write_whole
from .costmodel import CostModel

CACHE_VERSION = 2  # 2: samples with their busy share (version 1 had one curve, of unknown load)
SAMPLES_KEPT = 5
BUSY_MAX = 0.25  # other processes' share of the machine's CPU time under which a sample counts as quiet


class BusyMeter:
    """How much of the machine other processes used from its creation to ``share()``: the
    system's busy CPU time less this process's own, over the wall time times the CPUs."""

    def __init__(self):
        self._start = _times()

    def share(self) -> float:
        end = _times()
        if self._start is None or end is None:
            return 0.0
        (wall0, sys0, own0), (wall1, sys1, own1) = self._start, end
        span = (wall1 - wall0) * (os.cpu_count() or 1)
        if span <= 0:
            return 0.0
        return min(1.0, max(0.0, ((sys1 - sys0) - (own1 - own0)) / span))


def _times() -> tuple[float, float, float] | None:
    try:
        import psutil

        t = psutil.cpu_times()
        busy = t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
        own = psutil.Process().cpu_times()
        return time.monotonic(), busy, own.user + own.system
    except Exception:  # noqa: BLE001 - a platform psutil cannot read: every sample counts as quiet
        return None


# --- where it lives, and under which key -----------------------------------------------------
def cache_path() -> Path:
    """$SPECDEC_COST_CACHE, else $XDG_CACHE_HOME/specdec/costs.json, else ~/.cache/specdec/costs.json."""
    override = os.environ.get("SPECDEC_COST_CACHE")
    if override:
        return Path(override)
    from ...paths import cache_home

    return cache_home() / "costs.json"


def device_name(gpu_layers: int) -> str:
    """What the passes run on: the CPU model and core count, and whether layers are offloaded."""
    import platform

    cpu = platform.processor() or platform.machine()
    return f"{cpu}x{os.cpu_count()}" + ("+gpu" if gpu_layers else "")


def cache_key(model_path: Path, *, threads: int, gpu_layers: int, device: str, extra: str = "") -> str:
    p = Path(model_path).resolve()
    st = p.stat()
    return f"{p}:{st.st_size}:{st.st_mtime_ns}|t{threads}|ngl{gpu_layers}|{device}|{extra}"


# --- samples ---------------------------------------------------------------------------------
def sample_of(model: CostModel, busy: float) -> dict:
    """One measurement of ``model``'s figures, in multiples of its decode step; ``at`` is when its
    curve was last calibrated or checked (0 for one never checked: checked when next read)."""
    step = model.step_seconds()
    return {
        "at": round(model.checked_at or 0),
        "busy": round(busy, 3),
        "step_ms": round(step * 1e3, 4),
        "pass_steps": {str(b): round(s / step, 4) for b, s, _ in model.curve()},
        "draft_steps": {k: round(v / step, 4) for k, v in model.drafts.items()},
    }


def settled(samples: list[dict]) -> CostModel:
    """The model the samples agree on (``quiet``: whether it rests on quiet ones): per pass size
    and per drafter the median of the quiet samples that measured it (all samples where none is
    quiet), scaled by the newest of their steps."""
    quiet = [s for s in samples if s["busy"] <= BUSY_MAX]
    use = quiet or samples
    step = use[-1]["step_ms"] / 1e3

    def medians(field: str) -> dict:
        keys = {k for s in use for k in s[field]}
        return {k: statistics.median(s[field][k] for s in use if k in s[field]) for k in keys}

    passes = {int(b): v * step for b, v in medians("pass_steps").items()}
    drafts = {k: v * step for k, v in medians("draft_steps").items()}
    model = CostModel(passes, drafts)
    model.quiet = bool(quiet)
    model.samples = (len(quiet), len(samples))
    return model


def _checked(samples: object) -> dict:
    if not samples or not isinstance(samples, list):
        raise ValueError("no samples")
    for s in samples:
        if not (isinstance(s, dict) and float(s["step_ms"]) > 0 and 0 <= float(s["busy"]) <= 1
                and isinstance(s["pass_steps"], dict) and isinstance(s["draft_steps"], dict)):
            raise ValueError("a malformed sample")
        if any(int(b) < 1 or not float(v) > 0 for b, v in s["pass_steps"].items()) or \
                any(not float(v) >= 0 for v in s["draft_steps"].values()) or not s["pass_steps"]:
            raise ValueError("non-positive or empty cost table")
    return {"samples": samples}


# --- reading and writing ---------------------------------------------------------------------
def read_entries(warn: Callable[[str], None] | None = None) -> dict[str, dict] | None:
    """The cache's entries by key ({} when there is no file); None (after a note) when unusable."""
    path = cache_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        _note(warn, f"cannot read the cost cache {path} ({exc.strerror}); calibrating again")
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
        if isinstance(data, dict) and data.get("version") == 1 and isinstance(data.get("entries"), dict):
            return {k: _from_version_1(e) for k, e in data["entries"].items()}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("entries"), dict):
            raise ValueError("another version")
        return data["entries"]
    except (ValueError, UnicodeDecodeError) as exc:
        _note(warn, f"the cost cache {path} is unusable ({exc.__class__.__name__}); calibrating again")
        return None


def _from_version_1(entry) -> dict:
    """A version-1 entry (one curve, of unknown load) as one sample counted busy: kept for what
    it knows, trusted by nothing until a quiet run has measured beside it."""
    try:
        step = float(entry["pass_ms"]["1"])
        return {"samples": [{
            "at": entry.get("checked_at", 0), "busy": 1.0, "step_ms": step,
            "pass_steps": {b: float(ms) / step for b, ms in entry["pass_ms"].items()},
            "draft_steps": {k: float(ms) / step for k, ms in entry.get("draft_ms_per_token", {}).items()}}]}
    except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError):
        return {}  # unusable: read as no samples, a recalibration


def load_cached(key: str, warn: Callable[[str], None] | None = None) -> CostModel | None:
    """The model the samples under ``key`` settle on (``quiet``: whether any sample was quiet;
    ``checked_at``: the newest sample's time); None when there is none or the file is unusable."""
    entries = read_entries(warn)
    if entries is None or key not in entries:
        return None
    try:
        samples = _checked(entries[key].get("samples") if isinstance(entries[key], dict) else None)["samples"]
        model = settled(samples)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        _note(warn, f"the cost cache {cache_path()} is unusable ({exc.__class__.__name__}); calibrating again")
        return None
    model.checked_at = float(samples[-1]["at"])
    model.source = "cached"
    return model


def save_cached(key: str, model: CostModel, warn: Callable[[str], None] | None = None, *, busy: float = 0.0) -> None:
    """Add ``model``'s figures, measured with the machine ``busy`` (``BusyMeter.share``), as a
    sample under ``key``; a cache that cannot be written is only a note."""
    path = cache_path()
    entries = read_entries() or {}  # missing or corrupt: rewritten whole
    try:
        old = _checked(entries[key]["samples"])["samples"] if key in entries else []
    except (ValueError, KeyError, TypeError, AttributeError):
        old = []
    samples = (old + [sample_of(model, busy)])[-SAMPLES_KEPT:]
    entries[key] = {"samples": samples}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=1) + "\n")
    except OSError as exc:
        _note(warn, f"cannot write the cost cache {path} ({exc.strerror}); the next run calibrates again")


def reset() -> int:
    """Empty the cache; the number of entries it held."""
    entries = read_entries() or {}
    with contextlib.suppress(FileNotFoundError):
        cache_path().unlink()
    return len(entries)


def _note(warn, msg: str) -> None:
    if warn is not None:
        warn(msg)

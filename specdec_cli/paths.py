"""Where the tool keeps its own files: one reading of the XDG base directories for all of them.

The XDG spec says a relative ``XDG_CONFIG_HOME``/``XDG_CACHE_HOME`` is invalid and must be
ignored; every module that stores something asks here, so they cannot disagree about it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _xdg(var: str, default: str) -> Path:
    base = os.environ.get(var, "").strip()
    return Path(base) if base and os.path.isabs(base) else Path.home() / default


def config_home() -> Path:
    """``$XDG_CONFIG_HOME/specdec`` (absolute only), else ``~/.config/specdec``: pairs.toml, tuned.json."""
    return _xdg("XDG_CONFIG_HOME", ".config") / "specdec"


def cache_home() -> Path:
    """``$XDG_CACHE_HOME/specdec`` (absolute only), else ``~/.cache/specdec``: cost curves, fetched models."""
    return _xdg("XDG_CACHE_HOME", ".cache") / "specdec"


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it, replaced into place, so a
    reader (another run, or this one after a crash) finds the old file or the new one, never half
    of one. Raises OSError (the temporary file removed); callers decide what a failure means."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise

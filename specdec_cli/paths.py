"""Where the tool keeps its own files: one reading of the XDG base directories for all of them.

The XDG spec says a relative ``XDG_CONFIG_HOME``/``XDG_CACHE_HOME`` is invalid and must be
ignored; every module that stores something asks here, so they cannot disagree about it.
"""

from __future__ import annotations

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

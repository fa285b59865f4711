"""Byte counts as people read them, for download prompts, progress notes and ``specdec models``."""

from __future__ import annotations

__all__ = ["human_size"]


def human_size(n: int | None) -> str:
    """Bytes in decimal units, as download sizes are usually quoted: ``4.68 GB``."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1000
    return f"{n} B"  # pragma: no cover

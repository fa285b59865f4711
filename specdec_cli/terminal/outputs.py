"""Files a command writes for the user (``bench --json``, ``--plot``, ``--save``): checked before
the work that fills them, written whole or not at all, and never lost when writing fails late.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from ..errors import OutputError, UsageError
from ..paths import write_whole


def check_writable(path: Path, flag: str) -> None:
    """Refuse, before any measuring, a path that cannot take a file: a directory, a missing or
    read-only folder. Creates nothing that is not removed again."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a directory", hint=f"give {flag} a file name, e.g. {path / 'bench.json'}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"{flag} {path}: the folder {folder} does not exist", hint="create it first, or choose another path")
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as exc:
        raise UsageError(f"{flag} {path} cannot be written ({exc.strerror or exc})",
                         hint="choose a path you may write to") from None
    if not existed:
        path.unlink(missing_ok=True)


def check_folder(folder: Path, what: str, hint: str) -> None:
    """Refuse a folder the tool keeps its own files in (config, caches) that cannot be created or written."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".specdec-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"{what}: {folder} cannot be written ({exc.strerror or exc})", hint=hint) from None


def write_atomic(path: Path, text: str, what: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file beside it, so a failure leaves the old
    file (or none), never half of the new one; raises one ``OutputError`` naming the file."""
    path = Path(path)
    try:
        write_whole(path, text)
    except OSError as exc:
        raise OutputError(f"cannot write {what} to {path} ({exc.strerror or exc})",
                          hint="free some space or choose another path") from None
    return path


def fallback_path(stem: str, suffix: str = ".json") -> Path:
    """Where results go when the place asked for failed late: the temporary folder, timestamped."""
    return Path(tempfile.gettempdir()) / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}{suffix}"

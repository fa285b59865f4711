"""``specdec cache``: what the prompt cache holds on disk, without loading a model; ``--clear``
empties it.

Each saved prompt is a file (``engine/promptcache/entry_file.py``) under a folder per cache key
(a model file, a llama.cpp build, the cache's types); the listing reads each file's header
only, so it is quick for gigabytes. A file that fails its header checks is listed as damaged
(a server refuses and deletes it when it meets it).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from ..engine.promptcache.cache import default_folder
from ..engine.promptcache.disk import cache_files, scan
from ..errors import EXIT_OK
from ..terminal import console
from ..terminal.console import human_bytes
from .costs import ago


def show(folder: Path | None, as_json: bool) -> int:
    """The saved prompts in ``folder`` (default: the default folder), newest use first, on stdout."""
    root = folder or default_folder()
    found = scan(root) if root.is_dir() else []
    rows = [{"file": str(p), "model": h.model if h else None, "tokens": h.n_tokens if h else None,
             "bytes": size, "last_used": round(used, 3), "damaged": h is None}
            for p, h, used, size in sorted(found, key=lambda f: -f[2])]
    total = sum(r["bytes"] for r in rows)
    if as_json:
        console.write_json({"folder": str(root), "bytes": total, "entries": rows})
        return EXIT_OK
    console.note(f"prompt cache: {root} ({len(rows)} prompt{'' if len(rows) == 1 else 's'}, {human_bytes(total)})")
    now = time.time()
    for r in rows:
        what = "damaged: refused when met" if r["damaged"] else f"{r['model']}, {r['tokens']:,} tokens"
        console.write_text(f"{human_bytes(r['bytes']):>10}  used {ago(now - r['last_used'])} ago  {what}\n")
    return EXIT_OK


def clear(folder: Path | None) -> int:
    """Delete every saved prompt (and any write a dead process left) in ``folder``."""
    root = folder or default_folder()
    n, freed = 0, 0
    if root.is_dir():
        files = cache_files(root) + cache_files(root, temporary=True)
        for path in files:
            with contextlib.suppress(OSError):
                size = path.stat().st_size
                path.unlink()
                n, freed = n + 1, freed + size
        for sub in {path.parent for path in files}:
            with contextlib.suppress(OSError):
                sub.rmdir()  # only an empty one goes
    console.note(f"prompt cache {root} emptied ({n} file{'' if n == 1 else 's'}, {human_bytes(freed)})")
    return EXIT_OK

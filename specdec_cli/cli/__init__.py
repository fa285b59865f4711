"""The command line: the Typer app (``app.py``, one thin function per command over
``commands/``) and its entry point (``entry.py``). The top layer: it may use every package."""

from .app import app
from .entry import main

__all__ = ["app", "main"]

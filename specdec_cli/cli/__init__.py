"""The command line: the Typer app (``app.py``), its commands (``model_commands.py``,
``run_commands.py``: one thin function per command over ``commands/``) and its entry point
(``entry.py``). The top layer: it may use every package."""

from . import model_commands, run_commands  # noqa: F401 - registers the commands on the app
from .app import app
from .entry import main

__all__ = ["app", "main"]

"""How the CLI agrees to downloads: ask on a terminal, go ahead with ``--yes``, refuse in a script.

The hub package downloads only with consent, and names no CLI flag itself; the answers made here
carry the CLI's words for how to agree another time, which a refusal's message then offers.
"""

from __future__ import annotations

import sys

from ..hub import Decline, PlannedFile

__all__ = ["YES_HINT", "decline", "ask", "confirm_downloads"]

YES_HINT = "pass --yes to download without asking"

decline = Decline(hint=YES_HINT)
"""The answer of a run that cannot ask (a script without --yes): no, known before the Hub is
asked anything, so a missing file is reported without listing repos over the network."""


class _Ask:
    """Lists the files and asks on stderr whether to download them (a terminal's answer)."""

    hint = YES_HINT

    def __call__(self, files: list[PlannedFile]) -> bool:
        import typer

        for f in files:
            typer.echo(f"  {f.describe()}", err=True)
        return typer.confirm("download these into the Hugging Face cache?", default=True, err=True)


ask = _Ask()


def confirm_downloads(yes: bool):
    """The ``confirm`` callback for ``hub.pull`` / ``hub.resolve_model_arg``: None (go ahead) with
    ``yes``; :data:`ask` on a terminal; :data:`decline` in a script."""
    if yes:
        return None
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return decline
    return ask

"""What the measuring programs in scripts/ share; importing it is their bootstrap.

A program in a folder of scripts/ (``scripts/compare/native_compare.py``) starts with the one line
that lets it find this package, whatever the working directory::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

and then imports from ``_shared``. This package puts the checkout that holds it first on
``sys.path``, so ``specdec_cli`` is the one beside the scripts even where another is installed,
and names the folders the programs read from (``DATA``: the prompt sets; ``TESTS``: the test
suite's model writers).
"""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent
ROOT = SCRIPTS.parent
DATA = SCRIPTS / "data"
TESTS = ROOT / "tests"

sys.path.insert(0, str(ROOT))

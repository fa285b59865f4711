"""``python -m specdec_cli`` is the same as ``specdec``."""

import sys

from .cli import main

sys.exit(main())

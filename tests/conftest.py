"""Shared pytest fixtures: synthetic GGUFs made on the fly, and the real pinned models."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from tiny_models import *  # noqa: E402,F401,F403  (tiny_target, tiny_draft, ...)
from real_models import *  # noqa: E402,F401,F403  (real_target, real_draft, real_smollm)

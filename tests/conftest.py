"""Shared pytest fixtures: synthetic GGUFs made on the fly, and the real pinned models."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402

from real_models import *  # noqa: E402,F401,F403  (real_target, real_draft, real_smollm)
from tiny_memory_models import *  # noqa: E402,F401,F403  (tiny_mamba2, tiny_qwen35, tiny_gemma3, ...)
from tiny_models import *  # noqa: E402,F401,F403  (tiny_target, tiny_draft, ...)


@pytest.fixture(autouse=True, scope="session")
def _private_cost_cache(tmp_path_factory):
    """Keep the measured cost curves of test runs out of the user's cache."""
    import os

    path = tmp_path_factory.mktemp("costs") / "costs.json"
    old = os.environ.get("SPECDEC_COST_CACHE")
    os.environ["SPECDEC_COST_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("SPECDEC_COST_CACHE", None)
    else:
        os.environ["SPECDEC_COST_CACHE"] = old

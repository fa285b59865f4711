"""What a user may write to name a GGUF on the Hub, and how it is read.

``--target``/``--draft`` and ``specdec pull`` take either a local path or a reference; this module
alone decides which, so the rules (``hf://`` URIs, ``org/repo:QUANT``, huggingface.co URLs, and
"anything that exists on disk is a path") live in one place.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import quote, unquote

from ..errors import UsageError

__all__ = ["ModelRef", "parse_ref", "check_repo_id"]

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_REPO_RE = re.compile(rf"^{_NAME}/{_NAME}$")
_SHORT_RE = re.compile(rf"^(?P<repo>{_NAME}/{_NAME})(?:@(?P<rev>[^:@\s]+))?(?::(?P<quant>[A-Za-z0-9_.+-]+))?$")
_URL_RE = re.compile(
    rf"^https?://(?:www\.)?(?:huggingface\.co|hf\.co)/(?P<repo>{_NAME}/{_NAME})"
    r"(?:/(?:resolve|blob)/(?P<rev>[^/]+)/(?P<file>[^?#]+))?/?(?:[?#].*)?$"
)
_QUANT_OK = re.compile(r"^[A-Za-z0-9_.+-]+$")


@dataclass(frozen=True)
class ModelRef:
    """A GGUF on the Hub: a repo and either one file, a quant, or neither (the repo's only GGUF)."""

    repo: str
    filename: str | None = None
    quant: str | None = None
    revision: str | None = None

    def __str__(self) -> str:
        rev = f"@{quote(self.revision, safe='')}" if self.revision else ""
        if self.filename:
            return f"hf://{self.repo}{rev}/{self.filename}"
        return f"{self.repo}{rev}{':' + self.quant if self.quant else ''}"

    @property
    def pull_command(self) -> str:
        """The ``specdec pull`` command that fetches this reference."""
        return f"specdec pull {self}"


def parse_ref(text: str) -> ModelRef | None:
    """Parse a model reference; ``None`` means ``text`` is a local path.

    Accepted: ``hf://org/repo/path/file.gguf``, ``hf://org/repo@rev/file.gguf`` (a revision with
    ``/`` is URL-encoded, ``refs%2Fpr%2F1``), ``hf://org/repo[@rev][:QUANT]``, ``org/repo:QUANT``,
    ``org/repo@rev:QUANT``, ``org/repo`` and ``https://huggingface.co/org/repo/(resolve|blob)/rev/file``.
    Anything that exists on disk, or ends in ``.gguf`` without ``hf://``, is a local path.
    A malformed ``hf://`` reference raises UsageError.
    """
    s = text.strip()
    if not s:
        return None
    if s.lower().startswith("hf://"):
        return _parse_hf_uri(s, text)
    m = _URL_RE.match(s)
    if m:
        rev = unquote(m["rev"]) if m["rev"] else None
        filename = unquote(m["file"]) if m["file"] else None
        if filename is not None:
            _check_gguf_name(filename, text)
        return ModelRef(repo=m["repo"], filename=filename, revision=None if rev == "main" else rev)
    if os.path.exists(os.path.expanduser(s)) or s.lower().endswith(".gguf"):
        return None
    m = _SHORT_RE.match(s)
    if m:
        return ModelRef(repo=m["repo"], quant=m["quant"], revision=unquote(m["rev"]) if m["rev"] else None)
    return None


def _parse_hf_uri(s: str, original: str) -> ModelRef:
    rest = s[5:].strip("/")
    head = rest.split("/", 1)[0]
    if head in ("datasets", "spaces", "buckets", "kernels"):
        raise UsageError(f"'{original}' is not a model repository", hint="pass hf://org/repo/file.gguf of a model repo")
    if head == "models":
        rest = rest.split("/", 1)[1] if "/" in rest else ""
    parts = rest.split("/")
    bad = UsageError(
        f"'{original}' is not a model reference",
        hint="write hf://org/repo/file.gguf, hf://org/repo@revision/file.gguf or org/repo:Q4_K_M",
    )
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise bad
    org, name = parts[0], parts[1]
    path = "/".join(parts[2:])
    quant = rev = None
    if ":" in name:
        name, quant = name.split(":", 1)
    if "@" in name:
        name, rev = name.split("@", 1)
        rev = unquote(rev)
        if not rev:
            raise bad
    repo = f"{org}/{name}"
    if not _REPO_RE.match(repo) or (quant is not None and not _QUANT_OK.match(quant)):
        raise bad
    if path and quant:
        raise UsageError(f"'{original}' names both a file and a quant", hint="give one of them")
    if path:
        _check_gguf_name(path, original)
    return ModelRef(repo=repo, filename=path or None, quant=quant or None, revision=rev)


def _check_gguf_name(path: str, original: str) -> None:
    if not path.lower().endswith(".gguf") or ".." in PurePosixPath(path).parts:
        raise UsageError(f"'{original}' does not name a .gguf file", hint="llama.cpp loads GGUF files only")


def check_repo_id(repo: str) -> None:
    """UsageError unless ``repo`` looks like ``org/name``."""
    if not _REPO_RE.match(repo):
        raise UsageError(f"'{repo}' is not a Hugging Face repo id", hint="write it as org/name")

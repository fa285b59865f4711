"""The pair registry: which draft goes with which target, and how to drive it.

Speculative decoding only pays off with a draft that shares the target's vocabulary
(or was trained against it), and each pairing has settings that work. Rather than
make users remember repo names and numbers, specdec ships ``pairs.toml`` with known
pairings; users can add or override entries in ``~/.config/specdec/pairs.toml`` or a
file passed with ``--registry``. This module parses, validates (one clear error per
mistake) and merges those files, and nothing more: finding an entry's files on disk
or in the Hugging Face cache is ``pairing.local``'s job (``resolve_local``).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import tomllib

from ..errors import UsageError
from ..models.methods import Method

METHODS = Method.values()  # what an entry's method may say (specdec_cli.models.methods defines them)
WILDCARD = "any"  # target_family / target_size value that matches every target

_SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9._+-]*$")  # names, families and sizes


class RegistryError(UsageError):
    """A registry file is malformed; the message names the file, the entry and the field."""


@dataclass(frozen=True)
class PairEntry:
    """One draft (or draft-free method) for one target model, with recommended settings.

    ``ngram`` and ``mtp`` entries name no draft (``draft_repo``/``draft_path`` are None): the
    first looks tokens up in the text so far, the second runs the target GGUF's own
    multi-token-prediction (nextn) layers.
    """

    name: str
    method: str
    target_family: str
    target_size: str
    draft_repo: str | None = None
    draft_file: str = "*.gguf"
    draft_path: str | None = None
    target_repos: tuple[str, ...] = ()
    target_file: str | None = None
    target_quant: str | None = None
    target_path: str | None = None
    # recommended settings; None = specdec's own default (see engine.options.DraftOptions)
    draft_max: int | None = None
    draft_min: int | None = None
    draft_p_min: float | None = None
    notes: str = ""
    source: str = ""  # the file the entry came from (for messages)

    def to_dict(self) -> dict:
        """A JSON-friendly dict of every field."""
        d = asdict(self)
        d["target_repos"] = list(self.target_repos)
        return d

    def matches_target(self, family: str, size: str | None) -> bool:
        """True if this entry is meant for ``family``/``size`` (case-insensitive, ``any`` matches all).

        ``size=None`` compares the family only.
        """
        if not _token_matches(self.target_family, family):
            return False
        return size is None or _token_matches(self.target_size, size)


def _token_matches(ours: str, theirs: str) -> bool:
    ours, theirs = ours.strip().lower(), theirs.strip().lower()
    return ours in (WILDCARD, theirs)


@dataclass
class Registry:
    """Entries by name, in load order (built-in first; an override keeps the overridden slot)."""

    entries: dict[str, PairEntry] = field(default_factory=dict)
    sources: list[Path] = field(default_factory=list)  # files loaded, in order

    def __iter__(self) -> Iterator[PairEntry]:
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.strip().lower() in self.entries

    def get(self, name: str) -> PairEntry:
        """The entry called ``name``; an unknown name raises UsageError with close suggestions."""
        key = name.strip().lower()
        if key in self.entries:
            return self.entries[key]
        close = difflib.get_close_matches(key, list(self.entries), n=3, cutoff=0.5)
        if close:
            hint = f"did you mean: {', '.join(close)}? (specdec pairs lists them)"
        else:
            hint = "specdec pairs lists the known pairs"
        raise UsageError(f"unknown pair '{name}'", hint=hint)

    def filter(self, method: str | None = None, target: str | None = None) -> list[PairEntry]:
        """Entries with this method and whose family, size or name contains ``target`` (case-insensitive)."""
        if method is not None:
            method = method.strip().lower()
            if method not in METHODS:
                raise UsageError(f"unknown method '{method}'", hint=f"use one of: {', '.join(METHODS)}")
        needle = target.strip().lower() if target else None
        out = []
        for e in self.entries.values():
            if method is not None and e.method != method:
                continue
            if needle:
                hay = (e.target_family, e.target_size, e.name, f"{e.target_family}-{e.target_size}")
                if not any(needle in h.lower() for h in hay):
                    continue
            out.append(e)
        return out

    def for_target(self, family: str, size: str | None) -> list[PairEntry]:
        """Entries that apply to this target (see ``PairEntry.matches_target``)."""
        return [e for e in self.entries.values() if e.matches_target(family, size)]


# --------------------------------------------------------------------------- locations


def builtin_registry_path() -> Path:
    """The packaged ``specdec_cli/pairs.toml`` (wheel install), else the checkout's top-level one."""
    package = Path(__file__).resolve().parents[1]  # specdec_cli/
    packaged = package / "pairs.toml"
    if packaged.is_file():
        return packaged
    return package.parent / "pairs.toml"


def user_registry_path() -> Path:
    """``$XDG_CONFIG_HOME/specdec/pairs.toml``, by default ``~/.config/specdec/pairs.toml``."""
    from ..paths import config_home

    return config_home() / "pairs.toml"


def _display(path: Path | str) -> str:
    """The path as users think of it: ``~/...`` under the home directory."""
    p = Path(path)
    try:
        return "~/" + p.relative_to(Path.home()).as_posix()
    except ValueError:
        return str(p)


# --------------------------------------------------------------------------- loading


def load_registry(extra: str | Path | None = None) -> Registry:
    """The built-in registry, then the user file if it exists, then ``extra`` (must exist).

    A name repeated in a later file replaces the earlier entry; within one file it is an error.
    """
    builtin = builtin_registry_path()
    if not builtin.is_file():
        raise RegistryError(
            f"built-in pair registry not found at {_display(builtin)}",
            hint="the installation is incomplete; reinstall specdec",
        )
    files = [builtin]
    user = user_registry_path()
    if user.is_file():
        files.append(user)
    if extra is not None:
        extra_path = Path(extra).expanduser()
        if extra_path.is_dir():
            raise UsageError(
                f"--registry {_display(extra_path)} is a directory",
                hint=f"pass the pairs.toml file itself, e.g. --registry {_display(extra_path / 'pairs.toml')}",
            )
        if not extra_path.is_file():
            raise UsageError(
                f"registry file {_display(extra_path)} does not exist",
                hint="pass an existing pairs.toml to --registry",
            )
        files.append(extra_path)

    reg = Registry()
    for path in files:
        for entry in parse_registry_file(path):
            reg.entries[entry.name] = entry
        reg.sources.append(path)
    return reg


def parse_registry_file(path: Path) -> list[PairEntry]:
    """Parse and validate one pairs.toml; any problem raises one RegistryError."""
    path = Path(path)
    where = _display(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(f"{where}: invalid TOML: {exc}", hint="fix the syntax at that line") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"{where}: cannot read: {exc}", hint="check the file exists and is UTF-8 text") from None

    for key in data:
        if key != "pair":
            raise RegistryError(
                f"{where}: unknown top-level key '{key}'",
                hint="a registry holds only [[pair]] tables",
            )
    raw_pairs = data.get("pair", [])
    if not isinstance(raw_pairs, list) or not all(isinstance(p, dict) for p in raw_pairs):
        raise RegistryError(f"{where}: 'pair' must be a list of [[pair]] tables", hint="start each entry with [[pair]]")

    entries: list[PairEntry] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raw_pairs, start=1):
        entry = _build_entry(raw, index, where)
        if entry.name in seen:
            raise RegistryError(
                f"{where}: pair '{entry.name}': duplicate 'name' (pair #{seen[entry.name]} has it too)",
                hint="give each [[pair]] in a file its own name",
            )
        seen[entry.name] = index
        entries.append(entry)
    return entries


# Field name -> (accepted TOML types, required). Method-dependent rules live in _build_entry.
_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), True),
    "method": ((str,), True),
    "target_family": ((str,), True),
    "target_size": ((str,), True),
    "draft_repo": ((str,), False),
    "draft_file": ((str,), False),
    "draft_path": ((str,), False),
    "target_repos": ((list,), False),
    "target_file": ((str,), False),
    "target_quant": ((str,), False),
    "target_path": ((str,), False),
    "draft_max": ((int,), False),
    "draft_min": ((int,), False),
    "draft_p_min": ((float, int), False),
    "notes": ((str,), False),
}
_TYPE_NAMES = {str: "a string", list: "a list of strings", int: "an integer", float: "a number"}

# Methods that draft without a draft file: (why draft_* fields do not apply, what to do instead).
_NO_DRAFT_FILE: dict[str, tuple[str, str]] = {
    Method.NGRAM.value: ("it uses no draft model", ""),
    Method.MTP.value: ("it drafts with the target's own MTP layers",
                       "; point target_path or target_repos at a GGUF that keeps its nextn (MTP) layers"),
}


def _build_entry(raw: dict[str, Any], index: int, where: str) -> PairEntry:
    """Validate one [[pair]] table and turn it into a PairEntry."""
    name = raw.get("name")
    label = f"pair '{name}'" if isinstance(name, str) and name else f"pair #{index}"

    def fail(problem: str, hint: str) -> RegistryError:
        return RegistryError(f"{where}: {label}: {problem}", hint=hint)

    for key in raw:
        if key not in _FIELDS:
            close = difflib.get_close_matches(key, list(_FIELDS), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known fields: {', '.join(_FIELDS)}"
            raise fail(f"unknown field '{key}'", hint)

    for key, (types, required) in _FIELDS.items():
        if key not in raw:
            if required:
                raise fail(f"missing field '{key}'", f"add {key} = ... to this [[pair]]")
            continue
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise fail(f"field '{key}' must be {_TYPE_NAMES[types[0]]}, not {type(value).__name__}",
                       f"fix {key} in this [[pair]]")
        if key == "target_repos" and not all(isinstance(r, str) and r.strip() for r in value):
            raise fail(f"field '{key}' must be a list of non-empty strings", 'write target_repos = ["org/repo-GGUF"]')
        if isinstance(value, str) and not value.strip() and key != "notes":
            raise fail(f"field '{key}' is empty", f"give {key} a value or leave it out")

    if not _SLUG_RE.match(raw["name"]):
        raise fail("field 'name' must be a lowercase slug (a-z, 0-9, '.', '_', '+', '-')",
                   "e.g. name = \"qwen3-8b+0.6b\"")
    method = raw["method"]
    if method not in METHODS:
        raise fail(f"field 'method' is '{method}', not one of {', '.join(METHODS)}",
                   f"use one of: {', '.join(METHODS)}")
    for key, example in (("target_family", "qwen3"), ("target_size", "8b")):
        if not _SLUG_RE.match(raw[key]):
            raise fail(f"field '{key}' must be lowercase without spaces", f'e.g. {key} = "{example}"')

    if not Method(method).needs_draft_file:
        for key in ("draft_repo", "draft_file", "draft_path"):
            if key in raw:
                why, hint = _NO_DRAFT_FILE[method]
                raise fail(f"field '{key}' does not apply to method '{method}' ({why})", f"remove {key}{hint}")
    elif "draft_repo" not in raw and "draft_path" not in raw:
        raise fail("missing field 'draft_repo' (or 'draft_path')",
                   "say where the draft comes from: draft_repo = \"org/repo\" or draft_path = \"/path/to/draft.gguf\"")

    if raw.get("target_repos") and "target_file" not in raw:
        raise fail("missing field 'target_file' (needed with target_repos)",
                   "add target_file = \"name-{quant}.gguf\"")
    if "target_file" in raw and re.search(r"\{(?!quant\})", raw["target_file"]):
        raise fail("field 'target_file' may only contain the placeholder {quant}", "e.g. \"Qwen3-8B-{quant}.gguf\"")

    draft_max = raw.get("draft_max")
    draft_min = raw.get("draft_min")
    p_min = float(raw["draft_p_min"]) if "draft_p_min" in raw else None
    if draft_max is not None and draft_max < 1:
        raise fail(f"field 'draft_max' must be at least 1, not {draft_max}", "e.g. draft_max = 8")
    if draft_min is not None and draft_min < 0:
        raise fail(f"field 'draft_min' must be 0 or more, not {draft_min}", "e.g. draft_min = 0")
    if draft_min is not None and draft_max is None:
        raise fail("field 'draft_min' needs draft_max in the same entry", "add draft_max = N (N >= draft_min)")
    if draft_min is not None and draft_min > draft_max:
        raise fail(f"field 'draft_min' ({draft_min}) is larger than draft_max ({draft_max})",
                   "lower draft_min or raise draft_max")
    if p_min is not None and not 0.0 <= p_min <= 1.0:
        raise fail(f"field 'draft_p_min' must be between 0 and 1, not {p_min}", "e.g. draft_p_min = 0.75")

    return PairEntry(
        name=raw["name"],
        method=method,
        target_family=raw["target_family"],
        target_size=raw["target_size"],
        draft_repo=raw.get("draft_repo"),
        draft_file=raw.get("draft_file", PairEntry.draft_file),
        draft_path=raw.get("draft_path"),
        target_repos=tuple(r.strip() for r in raw.get("target_repos", ())),
        target_file=raw.get("target_file"),
        target_quant=raw.get("target_quant"),
        target_path=raw.get("target_path"),
        draft_max=draft_max,
        draft_min=draft_min,
        draft_p_min=p_min,
        notes=raw.get("notes", "").strip(),
        source=where,
    )


# --------------------------------------------------------------------------- moved names

"""The pair registry: which draft goes with which target, and how to drive it.

Speculative decoding only pays off with a draft that shares the target's vocabulary
(or was trained against it), and each pairing has settings that work. Rather than
make users remember repo names and numbers, specdec ships ``pairs.toml`` with known
pairings; users can add or override entries in ``~/.config/specdec/pairs.toml`` or a
file passed with ``--registry``. This module parses and validates those files (one
clear error per mistake) and finds the files of an entry that are already on disk,
without downloading anything.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from specdec_cli.errors import UsageError

METHODS = ("draft", "eagle3", "dflash", "dspark", "ngram")
WILDCARD = "any"  # target_family / target_size value that matches every target

_SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9._+-]*$")  # names, families and sizes
_SHARD_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_GLOB_CHARS = set("*?[")


class RegistryError(UsageError):
    """A registry file is malformed; the message names the file, the entry and the field."""


@dataclass(frozen=True)
class PairEntry:
    """One draft (or draft-free method) for one target model, with recommended settings."""

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
    # recommended settings; None = specdec's own default (see engine.runner.DraftOptions)
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
    return ours == WILDCARD or ours == theirs


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
    packaged = Path(__file__).with_name("pairs.toml")
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parent.parent / "pairs.toml"


def user_registry_path() -> Path:
    """``$XDG_CONFIG_HOME/specdec/pairs.toml``, by default ``~/.config/specdec/pairs.toml``."""
    from .paths import config_home

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

    if method == "ngram":
        for key in ("draft_repo", "draft_file", "draft_path"):
            if key in raw:
                raise fail(f"field '{key}' does not apply to method 'ngram' (it uses no draft model)",
                           f"remove {key}")
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


# --------------------------------------------------------------------------- local files


@dataclass
class ResolvedFiles:
    """What of an entry is already on disk; ``missing`` says, in words, what is not."""

    target: Path | None
    draft: Path | None
    missing: list[str] = field(default_factory=list)


def resolve_local(entry: PairEntry, quant: str | None = None) -> ResolvedFiles:
    """Find the entry's target and draft GGUFs locally (``*_path`` first, then the HF cache). Never downloads."""
    missing: list[str] = []

    target: Path | None = None
    if entry.target_path:
        target = _local_path("target", entry.target_path, missing)
    elif entry.target_repos and entry.target_file:
        q = quant or entry.target_quant or "*"
        pattern = entry.target_file.replace("{quant}", q)
        for repo in entry.target_repos:
            target = _find_in_hf_cache(repo, pattern)
            if target:
                break
        else:
            also = f"; also looked in {', '.join(entry.target_repos[1:])}" if len(entry.target_repos) > 1 else ""
            missing.append(f"target {entry.target_repos[0]}/{pattern} (not in the Hugging Face cache{also})")
    else:
        missing.append(f"target {entry.target_family} {entry.target_size} (the entry names no target_path or target_repos)")

    draft: Path | None = None
    if entry.method != "ngram":
        if entry.draft_path:
            draft = _local_path("draft", entry.draft_path, missing)
        elif entry.draft_repo:
            draft = _find_in_hf_cache(entry.draft_repo, entry.draft_file)
            if draft is None:
                missing.append(f"draft {entry.draft_repo}/{entry.draft_file} (not in the Hugging Face cache)")
        else:  # a validated entry always has one of the two
            missing.append("draft (the entry names no draft_path or draft_repo)")
    return ResolvedFiles(target=target, draft=draft, missing=missing)


def _local_path(side: str, value: str, missing: list[str]) -> Path | None:
    path = Path(value).expanduser()
    if path.is_file():
        return path
    missing.append(f"{side} {value} (the {side}_path does not exist)")
    return None


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache directory, as huggingface_hub sees it (HF_HOME / HF_HUB_CACHE)."""
    try:
        from huggingface_hub import constants

        return Path(constants.HF_HUB_CACHE)
    except ImportError:  # same rules as huggingface_hub, for environments without it
        env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
        if env:
            return Path(env).expanduser()
        home = os.environ.get("HF_HOME") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
        )
        return Path(home).expanduser() / "hub"


def _find_in_hf_cache(repo: str, pattern: str) -> Path | None:
    """A cached file of ``repo`` matching ``pattern`` (exact name or glob, case-insensitive).

    For a split GGUF (``-00001-of-0000N.gguf``) the first shard stands for the whole.
    """
    cache = hf_hub_cache()
    if not _GLOB_CHARS & set(pattern):
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(repo, pattern, cache_dir=cache)
            if isinstance(hit, str) and os.path.isfile(hit):
                return Path(hit)
        except Exception:  # no huggingface_hub, or a name it rejects: the walk below still applies
            pass

    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    for snapshot in _snapshots(repo_dir):
        hits = sorted(p for p in snapshot.rglob("*") if _cached_file_matches(p, snapshot, pattern))
        if hits:
            return hits[0]
    return None


def _snapshots(repo_dir: Path) -> list[Path]:
    """The repo's snapshot folders: the one ``refs/main`` points at first, then newest first."""
    snap_root = repo_dir / "snapshots"
    if not snap_root.is_dir():
        return []
    snaps = sorted((p for p in snap_root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    try:
        main = (repo_dir / "refs" / "main").read_text().strip()
    except OSError:
        main = ""
    snaps.sort(key=lambda p: p.name != main)  # stable: keeps mtime order among the rest
    return snaps


def _cached_file_matches(path: Path, snapshot: Path, pattern: str) -> bool:
    if not path.is_file():  # also skips links to blobs that are not fully downloaded
        return False
    pat = pattern.lower()
    rel = path.relative_to(snapshot).as_posix().lower()
    candidate = rel if "/" in pat else path.name.lower()
    if fnmatch.fnmatchcase(candidate, pat):
        later_shard = not _first_shard_or_single(candidate) and not _SHARD_RE.search(pat)
        return not later_shard and not _is_projector(candidate, pat)
    shard = _SHARD_RE.search(candidate)
    if shard and int(shard.group(1)) == 1:  # match "x-00001-of-00003.gguf" against "x.gguf"
        whole = candidate[: shard.start()] + ".gguf"
        return fnmatch.fnmatchcase(whole, pat) and not _is_projector(whole, pat)
    return False


def _first_shard_or_single(name: str) -> bool:
    shard = _SHARD_RE.search(name)
    return shard is None or int(shard.group(1)) == 1


def _is_projector(name: str, pattern: str) -> bool:
    """Multimodal projector GGUFs sit next to the model; a broad glob must not pick one."""
    return Path(name).name.startswith("mmproj") and not Path(pattern).name.startswith("mmproj")

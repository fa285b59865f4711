"""The measuring scripts in scripts/ say a bad argument in one line, as the CLI says bad input."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted(p for p in (Path(__file__).resolve().parent.parent / "scripts").glob("*.py")
                 if "Parser(" in p.read_text() and p.name != "script_io.py")


def test_every_script_with_options_uses_the_one_line_parser():
    assert len(SCRIPTS) >= 13
    for p in SCRIPTS:
        assert "argparse.ArgumentParser(" not in p.read_text(), p.name


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_an_unknown_option_is_one_line_and_exit_2(script, tmp_path):
    run = subprocess.run([sys.executable, str(script), "--no-such-option"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert run.returncode == 2
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    assert f"See {script.name}" in lines[0]

"""The measuring programs in scripts/ say a bad argument in one line, as the CLI says bad input, and
start from any working directory."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# a program: a .py file under scripts/ that runs as a script, outside a package (_shared/, compare/native/)
PROGRAMS = sorted(p for p in (ROOT / "scripts").rglob("*.py")
                  if 'if __name__ == "__main__":' in p.read_text() and not (p.parent / "__init__.py").exists())


def test_every_script_with_options_uses_the_one_line_parser():
    assert len(PROGRAMS) >= 15
    for p in (ROOT / "scripts").rglob("*.py"):
        assert "argparse.ArgumentParser(" not in p.read_text(), p.relative_to(ROOT)


@pytest.mark.parametrize("script", PROGRAMS, ids=lambda p: str(p.relative_to(ROOT / "scripts")))
def test_an_unknown_option_is_one_line_and_exit_2(script, tmp_path):
    run = subprocess.run([sys.executable, str(script), "--no-such-option"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert run.returncode == 2
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    assert f"See {script.name}" in lines[0]

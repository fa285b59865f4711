"""The built wheel carries the registry, so a plain `pip install` finds pairs.toml."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_pairs_toml(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-w", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next(tmp_path.glob("specdec-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "specdec_cli/pairs.toml" in names
        assert zf.read("specdec_cli/pairs.toml") == (ROOT / "pairs.toml").read_bytes()
        assert "specdec_cli/engine/decode/session.py" in names
        for scenario in ("documents", "code", "agent", "json", "qa", "creative"):
            assert f"specdec_cli/bench/prompts/{scenario}.jsonl" in names
        entry_points = zf.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
        assert "specdec = specdec_cli.cli:main" in entry_points

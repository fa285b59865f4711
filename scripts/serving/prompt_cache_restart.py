"""A long agent prompt after a server restart: its time to first token read cold, then restored
from the prompt cache on disk, and whether the answers are the same.

The prompt is what a coding agent opens a session with: a system prompt of instructions and
project files (this repository's own docs and sources, in a fixed order, cut to ``--tokens``
as the served model counts them), then a short task. The script starts ``--system`` (a
``specdec serve`` command with ``{port}`` and ``{cache}``: an empty folder it makes), sends the
request once (greedy, ``-n`` tokens), stops the server (SIGINT: its writes finish), empties the
OS page cache where it may (``/proc/sys/vm/drop_caches``, so the restore reads the disk), starts
it again on the same folder and sends the same request.

    python3 scripts/serving/prompt_cache_restart.py --tokens 6000 \\
        --system "specdec::python3 -m specdec_cli serve -t T --ctx 8192 --parallel 1 --port {port} --prompt-cache {cache}"

Reported: the prompt's tokens, each start's time to first token and total, the tokens the
second start restored (``usage.prompt_tokens_details.cached_tokens``), whether the page cache
was emptied, and whether the two answers are identical.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared.script_io import Parser  # noqa: E402
from _shared.systems import Server, stream_turn, systems_of  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TASK = "Add a docstring to the function `ago` in specdec_cli/commands/costs.py. Reply with the new function only."


def project_text() -> str:
    """The agent's system prompt before cutting: instructions, then the project's files."""
    parts = ["You are a coding agent working in the repository below. Read the files, then make the "
             "change the user asks for, as a careful senior engineer would.\n"]
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
             *sorted((REPO / "specdec_cli").rglob("*.py"))]
    for f in files:
        parts.append(f"\n<file path=\"{f.relative_to(REPO)}\">\n{f.read_text(encoding='utf-8')}\n</file>\n")
    return "".join(parts)


def count(url: str, system: str) -> int:
    """The request's tokens as the server counts them (more than it holds: a 400, counted as too many)."""
    body = {"model": "local", "system": system, "messages": [{"role": "user", "content": TASK}]}
    r = httpx.post(f"{url}/v1/messages/count_tokens", json=body, timeout=600)
    return int(r.json()["input_tokens"]) if r.status_code == 200 else sys.maxsize


def cut_to(url: str, text: str, tokens: int) -> str:
    """The longest head of ``text`` whose request counts at most ``tokens`` (a bisection)."""
    lo, hi = 0, len(text)
    while hi - lo > 200:
        mid = (lo + hi) // 2
        if count(url, text[:mid]) <= tokens:
            lo = mid
        else:
            hi = mid
    return text[:lo]


def drop_page_cache() -> bool:
    """Empty the OS page cache (root on Linux), so that a restore reads the disk."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    return False


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", required=True, help="LABEL::command line with {port} and {cache}")
    ap.add_argument("--tokens", type=int, default=6000, help="the prompt's length in the served model's tokens")
    ap.add_argument("-n", "--max-tokens", type=int, default=48)
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--log", default="/tmp/prompt_cache_restart.log", help="the servers' output")
    args = ap.parse_args()
    if args.tokens < 300 or args.max_tokens < 1:
        ap.error("--tokens takes at least 300, -n at least 1")
    ((label, cmd),) = systems_of(ap, [args.system])
    cache = tempfile.mkdtemp(prefix="specdec-prompts-")
    cmd = cmd.replace("{cache}", cache)
    runs = []
    with open(args.log, "w") as log:
        for start in ("cold", "restarted"):
            dropped = drop_page_cache() if start == "restarted" else None
            server = Server(label, cmd, log)
            try:
                if start == "cold":
                    system = cut_to(server.url, project_text(), args.tokens)
                messages = [{"role": "system", "content": system}, {"role": "user", "content": TASK}]
                res = stream_turn(server.url, messages, args.max_tokens)
            finally:
                server.stop()
            res.update(start=start, page_cache_dropped=dropped)
            runs.append(res)
            print(f"{start:<10} prompt {res['n_prompt']:6d} tok  cached {res['cached'] or 0:6d}  "
                  f"ttft {res['ttft']:8.2f} s  total {res['total']:8.2f} s"
                  + ("" if dropped is None else f"  page cache {'emptied' if dropped else 'kept'}"), flush=True)
    same = runs[0]["text"] == runs[1]["text"]
    print(f"answers identical: {same}; ttft {runs[0]['ttft']:.2f} s cold, {runs[1]['ttft']:.2f} s after the restart "
          f"({runs[0]['ttft'] / runs[1]['ttft']:.1f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs, "identical": same}, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

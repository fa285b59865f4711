"""llama.cpp's own programs: finding the native build, and one llama-server per configuration.

``find_native`` gives ``llama-speculative-simple`` or ``llama-server`` (built once by
``scripts/build_native.sh``); ``Server`` runs llama-server on a free local port with the settings
a comparison gives both sides (threads, context, batch, flash attention, KV types) and one
speculation setting (``ServerConfig.spec``: none, ngramK, ngram-simple or draft), waits for it,
warms it up and stops it. ``common_server_args`` are the options of every program that starts one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from _shared import SCRIPTS
from _shared.machine import free_port
from _shared.script_io import demo_models
from specdec_cli.engine.llama.library import default_threads  # noqa: E402

SPEC_RE = re.compile(r"^(none|draft|ngram(\d+)|ngram-simple)$")
PROBE_PROMPT = "Hello"  # specdec's load probe: one prompt of one token, -n 1


def find_native(explicit: str | None, binary: str = "llama-speculative-simple") -> str:
    """The native binary: ``explicit``, else $SPECDEC_NATIVE_BIN (llama-speculative-simple) or
    $SPECDEC_NATIVE_SERVER (llama-server), else what scripts/build_native.sh prints (it builds once)."""
    if explicit:
        return explicit
    env = os.environ.get("SPECDEC_NATIVE_SERVER" if binary == "llama-server" else "SPECDEC_NATIVE_BIN")
    if env:
        return env
    proc = subprocess.run(["bash", str(SCRIPTS / "build_native.sh"), binary],
                          stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        sys.exit(f"error: scripts/build_native.sh {binary} failed. run it by hand to see why.")
    return proc.stdout.strip().splitlines()[-1]


@dataclass
class ServerConfig:
    n_slots: int
    spec: str  # "none", "draft" or "ngram<n-max>"

    @property
    def label(self) -> str:
        return f"server np={self.n_slots}" + ("" if self.spec == "none" else f" {self.spec}")


def spec_list(text: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    for x in out:
        if not SPEC_RE.match(x) or x == "ngram0":
            sys.exit(f"error: speculation {x!r}: use none, draft, ngramK (ngram-mod with n-max K, e.g. ngram16) "
                     "or ngram-simple.")
    return out or ["none"]


def server_cmd(args, cfg: ServerConfig, port: int) -> list[str]:
    """llama-server's command line: the per-prompt mode's settings, with -c = slots * per-slot context
    (llama-server splits -c across its slots) and one spec setting."""
    t = str(args.threads)
    cmd = [
        args.server_bin, "-m", str(args.target), "--host", "127.0.0.1", "--port", str(port),
        "-np", str(cfg.n_slots), "-cb", "-c", str(cfg.n_slots * args.ctx),
        "-b", str(args.batch), "-ub", str(args.batch), "-t", t, "-tb", t,
        "-fa", args.flash_attn, "-ctk", args.cache_type_k, "-ctv", args.cache_type_v, "-ngl", str(args.gpu_layers),
        "--cache-prompt" if args.cache_prompt == "on" else "--no-cache-prompt",
        "--metrics", "--no-webui", "-fit", "off",
    ]
    if cfg.spec == "ngram-simple":  # llama.cpp's own defaults (size-n 12, size-m 48, min-hits 1)
        cmd += ["--spec-type", "ngram-simple"]
    elif cfg.spec.startswith("ngram"):
        cmd += ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", str(args.ngram_match),
                "--spec-ngram-mod-n-max", cfg.spec[5:], "--spec-ngram-mod-n-min", str(args.ngram_min)]
    elif cfg.spec == "draft":
        cmd += ["-md", str(args.draft), "--spec-type", "draft-simple",
                "--spec-draft-n-max", str(args.draft_max), "--spec-draft-n-min", str(args.draft_min),
                "--spec-draft-p-min", str(args.p_min), "-td", t, "-tbd", t,
                "-ctkd", args.cache_type_k, "-ctvd", args.cache_type_v, "-ngld", str(args.gpu_layers)]
    return cmd + shlex.split(args.server_args or "")


def _http(url: str, payload: dict | None = None, timeout: float = 3600) -> tuple[int, dict | str]:
    """(status, JSON body or text) of a GET (no payload) or a JSON POST."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, body = r.status, r.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read().decode("utf-8", errors="replace")
    try:
        return status, json.loads(body)
    except json.JSONDecodeError:
        return status, body


class Server:
    """One llama-server process on a free local port, for one configuration and one round:
    started, waited for (/health ok: the model is loaded), warmed up, stopped."""

    def __init__(self, args, cfg: ServerConfig, log_path: Path):
        self.args, self.cfg, self.log_path = args, cfg, log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = server_cmd(args, cfg, self.port)
        self.proc: subprocess.Popen | None = None
        self.props: dict = {}

    def __enter__(self) -> Server:
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.args.server_timeout
        while True:
            if self.proc.poll() is not None:
                self._fail(f"llama-server exited with {self.proc.returncode} while starting")
            try:
                status, body = _http(self.url + "/health", timeout=5)
                if status == 200 and isinstance(body, dict) and body.get("status") == "ok":
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                self._fail(f"llama-server was not ready after {self.args.server_timeout} s")
            time.sleep(0.25)
        status, props = _http(self.url + "/props", timeout=30)
        self.props = props if status == 200 and isinstance(props, dict) else {}
        # warm-up: one short request (pages in the weights, builds the graphs); not measured
        status, body = _http(self.url + "/completion", {"prompt": PROBE_PROMPT, "n_predict": 4, "temperature": 0,
                                                        "cache_prompt": False, "seed": self.args.seed}, timeout=600)
        if status != 200:
            self._fail(f"the warm-up request failed ({status}): {str(body)[:300]}")
        return self

    def n_ctx_slot(self) -> int | None:
        gen = self.props.get("default_generation_settings") or {}
        return gen.get("n_ctx") or self.props.get("n_ctx")

    def _fail(self, why: str) -> None:
        self.__exit__(None, None, None)
        tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-25:])
        sys.exit(f"error: {why}.\n{' '.join(self.cmd)}\n{tail}")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._log.closed:
            self._log.close()


def completion(url: str, payload: dict) -> dict:
    t_send = time.perf_counter()
    status, body = _http(url + "/completion", payload)
    t_recv = time.perf_counter()
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"/completion answered {status}: {str(body)[:300]}")
    return {"t_send": t_send, "t_recv": t_recv, "body": body}


def common_server_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--target")
    ap.add_argument("--draft", help="draft model for the 'draft' server setting (default: the pinned pair's)")
    ap.add_argument("--draft-max", type=int, default=3, help="the 'draft' setting's --spec-draft-n-max")
    ap.add_argument("--draft-min", type=int, default=0)
    ap.add_argument("--p-min", type=float, default=0.0)
    ap.add_argument("--ngram-match", type=int, default=8, help="ngram-mod's n-match (--spec-ngram-mod-n-match)")
    ap.add_argument("--ngram-min", type=int, default=1,
                    help="ngram-mod's n-min (llama.cpp's default 48 exceeds a small n-max and would never draft)")
    ap.add_argument("-n", "--max-tokens", type=int, default=128, help="n_predict per request")
    ap.add_argument("--prompts-file", help="JSONL with prompt or messages, JSON strings or plain lines")
    ap.add_argument("--ctx", type=int, default=2048, help="context per slot (the server gets slots * this)")
    ap.add_argument("--batch", type=int, default=512, help="n_batch = n_ubatch")
    ap.add_argument("--threads", type=int, default=default_threads(), help="default: physical cores")
    ap.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--cache-type-k", default="f16")
    ap.add_argument("--cache-type-v", default="f16")
    ap.add_argument("-ngl", "--gpu-layers", type=int, default=0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--cache-prompt", choices=["on", "off"], default="on",
                    help="the server's prompt cache (--cache-prompt/--no-cache-prompt and each request's cache_prompt)")
    ap.add_argument("--server-bin", help="llama-server (default: $SPECDEC_NATIVE_SERVER, else build_native.sh)")
    ap.add_argument("--server-args", help="extra llama-server arguments, appended last (one shell-quoted string)")
    ap.add_argument("--server-timeout", type=float, default=600, help="seconds to wait for /health")
    ap.add_argument("--logs", help="keep the server logs and the specdec outputs in this folder")
    ap.add_argument("--json", help="write every figure to this file")


def resolve_models(args, need_draft: bool) -> None:
    demo_models(args, draft=need_draft)
    args.server_bin = find_native(args.server_bin, "llama-server")


def logs_folder(args) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    if args.logs:
        Path(args.logs).mkdir(parents=True, exist_ok=True)
        return Path(args.logs), None
    tmp = tempfile.TemporaryDirectory(prefix="specdec-native-")
    return Path(tmp.name), tmp

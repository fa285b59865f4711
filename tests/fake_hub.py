"""A small fake Hugging Face Hub on 127.0.0.1, for download tests without a network.

``huggingface_hub`` talks to ``HF_ENDPOINT``; point it here and it downloads from repos held in
memory. Only what ``huggingface_hub`` 2.x (and specdec's hub module) actually calls is served:

- ``GET /api/models/{org}/{name}/tree/{revision}[/{path}]`` (``?recursive=true``): the file listing,
  as ``HfApi.list_repo_tree`` reads it (``type``, ``path``, ``size``, ``oid``, and ``lfs`` with
  ``size``/``oid``/``pointerSize`` for LFS files);
- ``GET /api/models/{org}/{name}[/revision/{revision}]``: model info (``id``, ``sha``, ``siblings``);
- ``HEAD`` and ``GET /{org}/{name}/resolve/{revision}/{path}``: the file, with the headers
  ``hf_hub_download`` / ``get_hf_file_metadata`` read: ``X-Repo-Commit``, ``ETag`` (git blob sha1),
  and for LFS files (``.gguf`` here) ``X-Linked-Etag`` (sha256) and ``X-Linked-Size``;
  ``Content-Length``, ``Accept-Ranges: bytes``; ``Range: bytes=N-`` / ``bytes=N-M`` answered with
  ``206`` and ``Content-Range``. No ``X-Xet-*`` header is ever sent, so clients use plain HTTP.

Errors carry the Hub's ``X-Error-Code`` header (``RepoNotFound``, ``RevisionNotFound``,
``EntryNotFound``, ``GatedRepo``), which ``huggingface_hub`` turns into its typed errors.

Test controls: :meth:`FakeHub.drop_once` closes the connection part-way through a file once (a
network drop); :meth:`FakeHub.stall` sends part of a file and then hangs until released (for
killing a client mid-download); :attr:`FakeHub.log` records every request (method, path, Range,
Authorization) to assert what did or did not reach the server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["FakeHub", "FakeRepo", "LoggedRequest", "sha256", "git_sha1", "split_bytes", "write_split_gguf"]

# huggingface_hub's own once-a-day fetch (agent detection for its User-Agent); not a model request.
TELEMETRY_PATHS = ("/api/agent-harnesses",)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git_sha1(data: bytes) -> str:
    """The git blob id of ``data`` (the ETag the Hub gives non-LFS files)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def split_bytes(data: bytes, n: int) -> list[bytes]:
    """``data`` cut into ``n`` nearly equal slices (stand-ins for split-GGUF shards)."""
    step = -(-len(data) // n)
    return [data[i * step:(i + 1) * step] for i in range(n)]


def write_split_gguf(path: str | Path, *, n_shards: int = 3, tensor_elems: int = 4096,
                     arch: str = "llama", name: str = "split-test") -> list[Path]:
    """A real split GGUF as llama.cpp's gguf-split writes it (``<stem>-00001-of-0000N.gguf`` ...,
    ``split.*`` keys, one tensor per shard), via gguf-py's writer. Returns the shard paths."""
    import gguf
    import numpy as np

    path = Path(path)
    w = gguf.GGUFWriter(path, arch, split_max_tensors=1)
    try:
        w.add_name(name)
        w.add_block_count(1)
        for i in range(n_shards):
            w.add_tensor(f"blk.0.t{i}.weight", np.full(tensor_elems, i, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
    finally:
        w.close()
    return [path.with_name(f"{path.stem}-{i:05d}-of-{n_shards:05d}.gguf") for i in range(1, n_shards + 1)]


@dataclass
class FakeRepo:
    repo_id: str
    files: dict[str, bytes]
    commit: str
    branches: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit
    gated: bool = False

    def resolve(self, revision: str) -> str | None:
        if revision == self.commit:
            return self.commit
        return self.branches.get(revision)

    @staticmethod
    def is_lfs(path: str) -> bool:
        return path.lower().endswith((".gguf", ".safetensors", ".bin"))


@dataclass(frozen=True)
class LoggedRequest:
    method: str
    path: str  # unquoted, without the query
    range: str | None
    authorization: str | None

    @property
    def is_file_get(self) -> bool:
        return self.method == "GET" and "/resolve/" in self.path


class FakeHub:
    """Start with ``with FakeHub() as hub:`` (or start()/stop()); ``hub.url`` is the endpoint."""

    def __init__(self, token: str | None = None):
        self.repos: dict[str, FakeRepo] = {}
        self.log: list[LoggedRequest] = []
        self.token = token  # the token gated repos accept ("Authorization: Bearer <token>")
        self.ignore_range = False  # answer Range requests with the whole file (200), as some CDNs do
        self._lock = threading.Lock()
        self._drops: dict[str, int] = {}  # file path -> byte offset at which to drop, once
        self._stalls: dict[str, tuple[int, threading.Event]] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- setup ---------------------------------------------------------------------------

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes | str | Path],
        *,
        gated: bool = False,
        branches: dict[str, str] | None = None,
    ) -> FakeRepo:
        """Serve ``files`` (path in repo -> bytes, text or a local file to read) as ``repo_id``.

        The commit id is derived from the content; ``main`` points at it, as do ``branches``
        (name -> commit, e.g. a tag on an older FakeRepo's commit)."""
        data = {p: (Path(v).read_bytes() if isinstance(v, Path) else v.encode() if isinstance(v, str) else v)
                for p, v in files.items()}
        h = hashlib.sha1(repo_id.encode())
        for p in sorted(data):
            h.update(p.encode() + sha256(data[p]).encode())
        commit = h.hexdigest()
        repo = FakeRepo(repo_id, data, commit, {"main": commit, **(branches or {})}, gated)
        self.repos[repo_id] = repo
        return repo

    def drop_once(self, path: str, after: int) -> None:
        """The next GET of ``path`` that would send byte ``after`` closes the connection there instead."""
        with self._lock:
            self._drops[path] = after

    def stall(self, path: str, after: int) -> threading.Event:
        """GETs of ``path`` send bytes up to ``after``, then hang until the returned event is set
        (then the connection is closed). Cleared with :meth:`unstall`."""
        event = threading.Event()
        with self._lock:
            self._stalls[path] = (after, event)
        return event

    def unstall(self, path: str) -> None:
        with self._lock:
            entry = self._stalls.pop(path, None)
        if entry:
            entry[1].set()

    # --- inspection ----------------------------------------------------------------------

    def requests(self, method: str | None = None, contains: str | None = None, *,
                 telemetry: bool = False) -> list[LoggedRequest]:
        """Logged requests, filtered; huggingface_hub's telemetry fetch is left out unless asked for."""
        with self._lock:
            log = list(self.log)
        return [r for r in log
                if (method is None or r.method == method) and (contains is None or contains in r.path)
                and (telemetry or r.path not in TELEMETRY_PATHS)]

    def file_gets(self, contains: str | None = None) -> list[LoggedRequest]:
        return [r for r in self.requests("GET", contains) if r.is_file_get]

    def clear_log(self) -> None:
        with self._lock:
            self.log.clear()

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None, "start the hub first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> "FakeHub":
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            stalls = list(self._stalls.values())
            self._stalls.clear()
        for _, event in stalls:
            event.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # keep pytest output clean
        pass

    # --- plumbing ------------------------------------------------------------------------

    def _record(self) -> tuple[str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        with self.hub._lock:
            self.hub.log.append(LoggedRequest(self.command, path, self.headers.get("Range"),
                                              self.headers.get("Authorization")))
        return parts.path, parse_qs(parts.query)

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str, extra: dict[str, str] | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(status, body, {"Content-Type": "application/json", "X-Error-Code": code,
                                  "X-Error-Message": message, **(extra or {})})

    def _repo(self, repo_id: str) -> FakeRepo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
        return repo

    def _commit(self, repo: FakeRepo, revision: str) -> str | None:
        commit = repo.resolve(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    # --- routes --------------------------------------------------------------------------

    def do_HEAD(self):
        self._route()

    def do_GET(self):
        self._route()

    def _route(self) -> None:
        raw_path, query = self._record()
        segs = raw_path.strip("/").split("/")
        try:
            if len(segs) >= 5 and segs[0] == "api" and segs[1] == "models" and segs[4] == "tree" and len(segs) >= 6:
                return self._tree(f"{segs[2]}/{segs[3]}", unquote(segs[5]), "/".join(unquote(s) for s in segs[6:]),
                                  query)
            if len(segs) >= 4 and segs[0] == "api" and segs[1] == "models":
                rev = unquote(segs[5]) if len(segs) >= 6 and segs[4] == "revision" else "main"
                return self._info(f"{segs[2]}/{segs[3]}", rev)
            if len(segs) >= 5 and segs[2] == "resolve":
                return self._resolve(f"{segs[0]}/{segs[1]}", unquote(segs[3]), "/".join(unquote(s) for s in segs[4:]))
            self._error(404, "NotFound", "no such route")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _tree(self, repo_id: str, revision: str, sub: str, query: dict[str, list[str]]) -> None:
        repo = self._repo(repo_id)
        if repo is None or self._commit(repo, revision) is None:
            return
        recursive = query.get("recursive", ["false"])[0].lower() in ("true", "1")
        prefix = sub.rstrip("/") + "/" if sub else ""
        entries, folders = [], set()
        for path in sorted(repo.files):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix):]
            if "/" in rest and not recursive:
                folders.add(prefix + rest.split("/", 1)[0])
                continue
            if recursive:  # every folder on the way, as the Hub lists them
                parts = rest.split("/")[:-1]
                for i in range(len(parts)):
                    folders.add(prefix + "/".join(parts[: i + 1]))
            data = repo.files[path]
            entry = {"type": "file", "oid": git_sha1(data), "size": len(data), "path": path}
            if repo.is_lfs(path):
                entry["lfs"] = {"oid": sha256(data), "size": len(data), "pointerSize": 134}
                entry["size"] = len(data)
            entries.append(entry)
        entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f} for f in sorted(folders)]
        self._send(200, json.dumps(entries).encode(), {"Content-Type": "application/json"})

    def _info(self, repo_id: str, revision: str) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        commit = self._commit(repo, revision)
        if commit is None:
            return
        body = {"id": repo_id, "modelId": repo_id, "sha": commit, "private": False, "gated": repo.gated,
                "siblings": [{"rfilename": p} for p in sorted(repo.files)]}
        self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _resolve(self, repo_id: str, revision: str, path: str) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        commit = self._commit(repo, revision)
        if commit is None:
            return
        if repo.gated and self.headers.get("Authorization") != f"Bearer {self.hub.token}":
            return self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted.",
                               {"X-Repo-Commit": commit})
        data = repo.files.get(path)
        if data is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist on \"{revision}\"",
                               {"X-Repo-Commit": commit})
        size = len(data)
        headers = {
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
            "X-Repo-Commit": commit,
            "ETag": f'"{git_sha1(data)}"',
            "Content-Disposition": f'attachment; filename="{quote(path.rsplit("/", 1)[-1])}"',
        }
        if repo.is_lfs(path):
            headers["X-Linked-Etag"] = f'"{sha256(data)}"'
            headers["X-Linked-Size"] = str(size)
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and self.command == "GET" and rng.startswith("bytes=") and not self.hub.ignore_range:
            first, _, last = rng[6:].partition("-")
            start = int(first) if first else 0
            end = min(int(last), size - 1) if last else size - 1
            if start >= size:
                return self._send(416, b"", {"Content-Range": f"bytes */{size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        if self.command == "HEAD":
            return
        self._send_body(path, data, start, end + 1)

    def _send_body(self, path: str, data: bytes, start: int, stop: int) -> None:
        with self.hub._lock:
            drop_at = self.hub._drops.get(path)
            if drop_at is not None and start <= drop_at < stop:
                del self.hub._drops[path]
            else:
                drop_at = None
            stall = self.hub._stalls.get(path)
        cut = drop_at
        if stall is not None and start <= stall[0] < stop:
            cut = stall[0] if cut is None else min(cut, stall[0])
        pos = start
        limit = cut if cut is not None else stop
        while pos < limit:
            n = min(64 * 1024, limit - pos)
            self.wfile.write(data[pos:pos + n])
            pos += n
        if cut is None:
            return
        self.wfile.flush()
        if stall is not None and cut == stall[0]:
            stall[1].wait(timeout=60)
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

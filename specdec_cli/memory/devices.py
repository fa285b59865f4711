"""Which devices llama.cpp can use here, and how much memory each has free.

The first source is ggml itself, through the ``ggml_backend_dev_*`` functions of the
libraries llama-cpp-python ships: they cover CUDA, Metal, Vulkan, SYCL and the CPU alike,
and they list exactly the devices this build can offload to. When ggml sees no GPU but
``nvidia-smi`` does, the GPU is reported with a note: this llama-cpp-python was built
without CUDA and cannot use it. Host memory comes from psutil.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

# enum ggml_backend_dev_type
_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


@dataclass
class Device:
    name: str  # ggml's name: "CPU", "CUDA0", "Metal", "Vulkan0", ...
    kind: str  # cpu | gpu | igpu | accel
    free: int
    total: int
    description: str = ""
    source: str = "ggml"  # ggml | nvidia-smi | psutil
    usable: bool = True  # False: seen by the system but not by this llama.cpp build

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("gpu", "igpu") and self.usable

    def to_dict(self) -> dict:
        return asdict(self)


def host_device() -> Device:
    vm = psutil.virtual_memory()
    return Device("CPU", "cpu", int(vm.available), int(vm.total), "host memory", "psutil")


def probe_devices() -> list[Device]:
    """Host first, then every accelerator ggml can use (and any GPU it cannot, flagged)."""
    devices = [host_device()]
    gpus = _ggml_devices()
    devices += gpus
    if not gpus:
        devices += _nvidia_smi_devices()
    return devices


def _ggml_devices() -> list[Device]:
    try:
        from ..engine.llama.library import init_backend

        init_backend()
        import llama_cpp

        libdir = Path(llama_cpp.__file__).parent / "lib"
        ggml = ctypes.CDLL(str(_find_lib(libdir, "libggml")))
        base = ctypes.CDLL(str(_find_lib(libdir, "libggml-base")))
    except Exception:
        return []
    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(base, fn).restype = ctypes.c_char_p
        getattr(base, fn).argtypes = [ctypes.c_void_p]
    base.ggml_backend_dev_type.restype = ctypes.c_int
    base.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    base.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    out = []
    for i in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(i)
        kind = _KINDS.get(base.ggml_backend_dev_type(dev), "accel")
        if kind == "cpu":
            continue  # the host is measured with psutil
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        base.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        name = (base.ggml_backend_dev_name(dev) or b"?").decode()
        desc = (base.ggml_backend_dev_description(dev) or b"").decode()
        out.append(Device(name, kind, int(free.value), int(total.value), desc))
    return out


def _find_lib(libdir: Path, stem: str) -> Path:
    for suffix in (".so", ".dylib", ".dll"):
        p = libdir / f"{stem}{suffix}"
        if p.exists():
            return p
    matches = sorted(libdir.glob(f"{stem}.*"))
    if not matches:
        raise FileNotFoundError(stem)
    return matches[0]


def _nvidia_smi_devices() -> list[Device]:
    """GPUs the driver reports; only used to explain that this build cannot reach them."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name,memory.free,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    devices = []
    for line in out.strip().splitlines():
        try:
            idx, name, free, total = (x.strip() for x in line.split(","))
            devices.append(Device(f"CUDA{idx}", "gpu", int(free) * 2**20, int(total) * 2**20, name, "nvidia-smi", usable=False))
        except ValueError:
            continue
    return devices


def cpu_features() -> set[str]:
    """The CPU features ggml was built for and detected, e.g. {"AVX2", "AVX512", "NEON"}."""
    try:
        import llama_cpp

        info = llama_cpp.llama_print_system_info().decode()
    except Exception:
        return set()
    feats = set()
    for part in info.replace("\n", "|").split("|"):
        if "=" in part:
            key, _, val = part.partition("=")
            if val.strip() == "1":
                feats.add(key.strip().split(":")[-1].strip())
    return feats

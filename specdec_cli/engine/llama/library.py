"""The FFI boundary's foundation: llama-cpp-python's low-level ctypes API, loaded once.

Only the modules of ``engine/llama/`` call llama.cpp: this one (the binding, llama.cpp's log,
the backend, the abort callbacks, the staging functions of ``llama-ext.h``), ``model.py``
(a loaded GGUF: vocabulary, metadata, the chat template's source), ``context.py`` (contexts:
their passes, logits and hidden states), ``memory.py`` (their KV cache or recurrent state) and
``batch.py`` (the extended batch of the draft heads). Everything above them deals in Python
ints, lists and numpy views; nothing else calls into ``llama_cpp``'s native library
(``chat/template.py`` borrows its pure-Python Jinja chat formatter). Keeping the FFI there means
the decode loop stays readable and the bindings' quirks (pointer lifetimes, batch layout,
logging) are handled once.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections import deque

from ...errors import SpecdecError
from ...terminal import interrupts

_IMPORT_ERROR: Exception | None
try:  # import lazily-failing so `specdec pairs/inspect/check` work without the native library
    import llama_cpp as _ll
except Exception as exc:  # pragma: no cover - exercised only on broken installs
    _ll = None  # type: ignore[assignment]  # bindings() raises _IMPORT_ERROR instead
    _IMPORT_ERROR = exc
else:
    _IMPORT_ERROR = None

SEQ = 0  # specdec drives one sequence per context


def bindings():
    """The ``llama_cpp`` module, or a ``SpecdecError`` saying why it is not usable."""
    if _ll is None:
        raise SpecdecError(
            f"llama-cpp-python is not usable: {_IMPORT_ERROR}",
            hint="reinstall it with `pip install --force-reinstall llama-cpp-python`",
        )
    return _ll


class _Log:
    """Captures llama.cpp's log so it only reaches stderr with --verbose, but stays available for errors."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=5000)
        self.verbose = False
        self._partial = ""
        self._cb = None

    def install(self) -> None:
        ll = bindings()

        @ll.llama_log_callback
        def callback(level, text, user_data):  # noqa: ARG001 - signature fixed by llama.cpp
            # runs inside native calls (interrupts.native), where signals only get recorded
            chunk = text.decode("utf-8", errors="replace") if text else ""
            if self.verbose:
                os.write(2, chunk.encode())
            self._partial += chunk
            while "\n" in self._partial:
                line, self._partial = self._partial.split("\n", 1)
                self.lines.append(line)

        self._cb = callback  # keep a reference: ctypes callbacks must outlive their registration
        ll.llama_log_set(callback, ctypes.c_void_p(0))

    def tail(self, n: int = 5) -> list[str]:
        """The last ``n`` lines of the log: what llama.cpp said before a failure."""
        return list(self.lines)[-n:]


LOG = _Log()
_backend_ready = False

# Callbacks through which a signal stops llama.cpp early (see interrupts.py): the load asks
# whether to go on after each tensor; a pass, after each graph node, on the calling thread.
ABORTABLE_PASS = 64  # passes at least this long get the abort callback; shorter ones end soon
LOAD_PROGRESS = ABORT = NO_ABORT = None
if _ll is not None:
    LOAD_PROGRESS = _ll.llama_progress_callback(lambda progress, user_data: not interrupts.pending())
    ABORT = _ll.ggml_abort_callback(lambda user_data: interrupts.pending())
    NO_ABORT = _ll.ggml_abort_callback()


def init_backend(verbose: bool = False) -> None:
    """Initialise llama.cpp's backends once per process and route its log through ``LOG``."""
    global _backend_ready
    LOG.verbose = verbose
    if _backend_ready:
        return
    ll = bindings()
    LOG.install()
    ll.llama_backend_init()
    _backend_ready = True


# llama.cpp 0.3.36's AMX matmul (ggml-cpu/amx) segfaults on the first batched pass over
# quantized weights on some Sapphire Rapids-class machines, this project's among them
# (ggml-org/llama.cpp#20824, closed unfixed). Where this build would use it, weights load
# without the CPU's extra buffer types (AMX, and the repacked copies); set this variable to 1
# to keep them on a machine where AMX works.
KEEP_EXTRA_BUFFERS = "SPECDEC_CPU_EXTRA_BUFFERS"


def cpu_extra_buffers_safe() -> bool:
    """Whether models may load into the CPU's extra buffer types (see KEEP_EXTRA_BUFFERS)."""
    if os.environ.get(KEEP_EXTRA_BUFFERS) == "1":
        return True
    info = bindings().llama_print_system_info().decode("utf-8", errors="replace")
    return "AMX_INT8 = 1" not in info


def default_threads() -> int:
    """llama.cpp's default: the physical cores (logical ones slow matmuls down)."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:
        n = None
    return max(1, n or os.cpu_count() or 1)


# Staging functions of llama.cpp's src/llama-ext.h: exported from libllama with C++ linkage,
# so they are found by their mangled names (Itanium on Linux/macOS, MSVC on Windows).
# name -> (mangled names, argument types, return type)
_P = ctypes.c_void_p
_EXT_SIGNATURES = {
    "llama_set_embeddings_layer_inp": (
        ("_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
         "?llama_set_embeddings_layer_inp@@YAXPEAUllama_context@@I_N@Z"),
        [_P, ctypes.c_uint32, ctypes.c_bool], None),
    "llama_get_embeddings_layer_inp": (
        ("_Z30llama_get_embeddings_layer_inpP13llama_contextj",
         "?llama_get_embeddings_layer_inp@@YAPEAMPEAUllama_context@@I@Z"),
        [_P, ctypes.c_uint32], ctypes.POINTER(ctypes.c_float)),
    "llama_set_embeddings_nextn": (
        ("_Z26llama_set_embeddings_nextnP13llama_contextbb",
         "?llama_set_embeddings_nextn@@YAXPEAUllama_context@@_N1@Z"),
        [_P, ctypes.c_bool, ctypes.c_bool], None),
    "llama_get_embeddings_nextn": (
        ("_Z26llama_get_embeddings_nextnP13llama_context",
         "?llama_get_embeddings_nextn@@YAPEAMPEAUllama_context@@@Z"),
        [_P], ctypes.POINTER(ctypes.c_float)),
    "llama_get_embeddings_nextn_ith": (
        ("_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
         "?llama_get_embeddings_nextn_ith@@YAPEAMPEAUllama_context@@H@Z"),
        [_P, ctypes.c_int32], ctypes.POINTER(ctypes.c_float)),
    "llama_set_nextn_layer_offset": (
        ("_Z28llama_set_nextn_layer_offsetP13llama_contexti",
         "?llama_set_nextn_layer_offset@@YAXPEAUllama_context@@H@Z"),
        [_P, ctypes.c_int32], None),
    "llama_model_target_layer_ids": (
        ("_Z28llama_model_target_layer_idsPK11llama_model",
         "?llama_model_target_layer_ids@@YAPEBHPEBUllama_model@@@Z"),
        [_P], ctypes.POINTER(ctypes.c_int32)),
    "llama_model_target_layer_ids_n": (
        ("_Z30llama_model_target_layer_ids_nPK11llama_model",
         "?llama_model_target_layer_ids_n@@YAIPEBUllama_model@@@Z"),
        [_P], ctypes.c_uint32),
    "llama_model_dflash_selector_top_k": (
        ("_Z33llama_model_dflash_selector_top_kPK11llama_model",
         "?llama_model_dflash_selector_top_k@@YAHPEBUllama_model@@@Z"),
        [_P], ctypes.c_int32),
}
_ext_cache: dict[str, object] = {}


def ext(name: str):
    """A staging (llama-ext.h) function of the loaded libllama, bound on first use."""
    fn = _ext_cache.get(name)
    if fn is not None:
        return fn
    mangled, argtypes, restype = _EXT_SIGNATURES[name]
    lib = bindings().llama_cpp._lib
    for sym in (name, *mangled):
        fn = getattr(lib, sym, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = restype
            _ext_cache[name] = fn
            return fn
    raise SpecdecError(
        f"this llama-cpp-python build does not export {name}, which EAGLE-3/DFlash/DSpark/MTP drafting needs",
        hint="install llama-cpp-python 0.3.36 or later, or use --method draft / ngram",
    )


class FreedOnCollect:
    """Native handles are freed by ``close()``; collection frees what nobody closed."""

    def close(self) -> None:  # pragma: no cover - overridden
        pass

    def __del__(self):  # pragma: no cover - best effort at interpreter exit
        with contextlib.suppress(Exception):
            self.close()



def build_id() -> str:
    """This llama.cpp build, as a short digest: llama-cpp-python's version and its native
    libraries' names, sizes and modification times. A prompt cache's files
    (``engine/promptcache``) never cross builds, whose kernels (and so whose cells) may differ."""
    import hashlib
    from pathlib import Path

    ll = bindings()
    lib_dir = Path(ll.llama_cpp._lib._name).parent
    h = hashlib.sha256(str(getattr(ll, "__version__", "?")).encode())
    for f in sorted(lib_dir.iterdir()):
        with contextlib.suppress(OSError):
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]

"""The one place that talks to llama.cpp through llama-cpp-python's low-level ctypes API.

Everything above this module deals in Python ints, lists and numpy views; nothing
else imports ``llama_cpp``. Keeping the FFI here means the decode loop stays
readable and the bindings' quirks (pointer lifetimes, batch layout, logging)
are handled once.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import interrupts
from ..errors import SpecdecError, UsageError

try:  # import lazily-failing so `specdec pairs/inspect/check` work without the native library
    import llama_cpp as _ll
except Exception as exc:  # pragma: no cover - exercised only on broken installs
    _ll = None
    _IMPORT_ERROR = exc
else:
    _IMPORT_ERROR = None

SEQ = 0  # specdec drives one sequence per context

CACHE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30}
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}


def _lib():
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
        ll = _lib()

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

    def tail(self, n: int = 5, contains: str | None = None) -> list[str]:
        lines = [ln for ln in self.lines if contains is None or contains in ln]
        return lines[-n:]


LOG = _Log()
_backend_ready = False

# Callbacks through which a signal stops llama.cpp early (see interrupts.py): the load asks
# whether to go on after each tensor; a pass, after each graph node, on the calling thread.
ABORTABLE_PASS = 64  # passes at least this long get the abort callback; shorter ones end soon
if _ll is not None:
    _LOAD_PROGRESS = _ll.llama_progress_callback(lambda progress, user_data: not interrupts.pending())
    _ABORT = _ll.ggml_abort_callback(lambda user_data: interrupts.pending())
    _NO_ABORT = _ll.ggml_abort_callback()


def init_backend(verbose: bool = False) -> None:
    """Initialise llama.cpp's backends once per process and route its log through ``LOG``."""
    global _backend_ready
    LOG.verbose = verbose
    if _backend_ready:
        return
    ll = _lib()
    LOG.install()
    ll.llama_backend_init()
    _backend_ready = True


PROCESS_ENCODE, PROCESS_DECODE = 0, 1

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


def _ext(name: str):
    """A staging (llama-ext.h) function of the loaded libllama, bound on first use."""
    fn = _ext_cache.get(name)
    if fn is not None:
        return fn
    mangled, argtypes, restype = _EXT_SIGNATURES[name]
    lib = _lib().llama_cpp._lib
    for sym in (name, *mangled):
        fn = getattr(lib, sym, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = restype
            _ext_cache[name] = fn
            return fn
    raise SpecdecError(
        f"this llama-cpp-python build does not export {name}, which EAGLE-3/DFlash/DSpark drafting needs",
        hint="install llama-cpp-python 0.3.36 or later, or use --method draft / ngram",
    )


class _FreedOnCollect:
    """Native handles are freed by ``close()``; collection frees what nobody closed."""

    def close(self) -> None:  # pragma: no cover - overridden
        pass

    def __del__(self):  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass


class Model(_FreedOnCollect):
    """A loaded GGUF model: weights, vocabulary, tokenizer and chat template."""

    def __init__(self, path: str | Path, *, n_gpu_layers: int = 0, verbose: bool = False):
        ll = _lib()
        init_backend(verbose)
        self.path = Path(path)
        params = ll.llama_model_default_params()
        params.n_gpu_layers = int(n_gpu_layers)
        params.progress_callback = _LOAD_PROGRESS  # lets a signal stop the load
        with interrupts.native():
            self._ptr = ll.llama_model_load_from_file(str(self.path).encode(), params)
        if not self._ptr:
            detail = "; ".join(LOG.tail(2)) or "llama.cpp could not load it"
            raise UsageError(
                f"cannot load {self.path}: {detail}",
                hint="check that the file is a complete GGUF for an architecture this llama.cpp supports",
            )
        self._vocab = ll.llama_model_get_vocab(self._ptr)
        self.n_vocab = int(ll.llama_vocab_n_tokens(self._vocab))
        self.n_ctx_train = int(ll.llama_model_n_ctx_train(self._ptr))
        self.n_params = int(ll.llama_model_n_params(self._ptr))
        self.bos = int(ll.llama_vocab_bos(self._vocab))
        self.eos = int(ll.llama_vocab_eos(self._vocab))
        self.n_embd = int(ll.llama_model_n_embd(self._ptr))
        self.n_layer = int(ll.llama_model_n_layer(self._ptr))
        self._eog: dict[int, bool] = {}
        self._pieces: dict[int, bytes] = {}

    # --- vocabulary -------------------------------------------------------------------------
    def is_eog(self, token: int) -> bool:
        """End of generation (EOS, EOT, ...), as the vocabulary defines it; cached per token."""
        hit = self._eog.get(token)
        if hit is None:
            hit = self._eog[token] = bool(_lib().llama_vocab_is_eog(self._vocab, token))
        return hit

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        ll = _lib()
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            raise SpecdecError("tokenization failed")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token renders as (special tokens render empty), cached per token."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        ll = _lib()
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self._vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
        out = buf.raw[: max(n, 0)]
        self._pieces[token] = out
        return out

    def token_text(self, token: int) -> str:
        return _lib().llama_vocab_get_text(self._vocab, token).decode("utf-8", errors="replace")

    def mask_token(self) -> int:
        """The vocabulary's mask token (DFlash fills its draft block with it), -1 if none."""
        return int(_lib().llama_vocab_mask(self._vocab))

    # --- metadata and draft-head facts ------------------------------------------------------
    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as llama.cpp renders it (``"true"``, ``"16"``), None if absent."""
        buf = ctypes.create_string_buffer(256)
        n = _lib().llama_model_meta_val_str(self._ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else None

    def target_layer_ids(self) -> list[int]:
        """The target layers an EAGLE-3/DFlash head reads (empty for ordinary models)."""
        n = int(_ext("llama_model_target_layer_ids_n")(self._ptr))
        if n <= 0:
            return []
        ptr = _ext("llama_model_target_layer_ids")(self._ptr)
        return [int(ptr[i]) for i in range(n)]

    def dflash_selector_top_k(self) -> int:
        """> 0 only for DFlash2 drafts (a selector lattice instead of logits)."""
        return int(_ext("llama_model_dflash_selector_top_k")(self._ptr))

    # --- chat -------------------------------------------------------------------------------
    def apply_chat_template(self, messages: list[dict], *, add_generation_prompt: bool = True) -> str:
        """Render messages with the model's own template, through llama.cpp's template engine."""
        ll = _lib()
        tmpl = ll.llama_model_chat_template(self._ptr, None)
        if not tmpl:
            raise UsageError(
                f"{self.path.name} has no chat template",
                hint="drop --chat and pass the raw prompt",
            )
        keep = [(m["role"].encode(), str(m["content"]).encode()) for m in messages]
        arr = (ll.llama_chat_message * len(keep))()
        for i, (role, content) in enumerate(keep):
            arr[i].role = role
            arr[i].content = content
        cap = sum(len(r) + len(c) for r, c in keep) * 2 + 256
        buf = ctypes.create_string_buffer(cap)
        n = ll.llama_chat_apply_template(tmpl, arr, len(keep), add_generation_prompt, buf, cap)
        if n > cap:
            buf = ctypes.create_string_buffer(n)
            n = ll.llama_chat_apply_template(tmpl, arr, len(keep), add_generation_prompt, buf, n)
        if n < 0:
            raise UsageError(
                f"llama.cpp does not recognise the chat template of {self.path.name}",
                hint="apply the template yourself and pass the raw prompt without --chat",
            )
        return buf.raw[:n].decode("utf-8", errors="replace")

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            _lib().llama_model_free(self._ptr)
            self._ptr = None


@dataclass(frozen=True)
class ContextParams:
    """What a context is created with; the defaults are llama.cpp's own."""

    n_ctx: int = 4096
    n_batch: int = 512
    n_ubatch: int = 512
    n_outputs_max: int = 1  # rows of logits the context must hold at once (draft_max + 1 for a verifier)
    n_threads: int | None = None
    flash_attn: str = "auto"
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    offload_kqv: bool = True


def default_threads() -> int:
    """llama.cpp's default: the physical cores (logical ones slow matmuls down)."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:
        n = None
    return max(1, n or os.cpu_count() or 1)


class Context(_FreedOnCollect):
    """One inference context over a model: its KV cache, a reusable batch, and logits access."""

    def __init__(self, model: Model, params: ContextParams, *, other: Context | None = None):
        """``other``: the target context a draft head borrows token embeddings and the output
        projection from (llama.cpp's ``ctx_other``); it must outlive this context."""
        ll = _lib()
        self.model = model
        self.params = params
        self.other = other
        cp = ll.llama_context_default_params()
        cp.n_ctx = params.n_ctx
        cp.n_batch = params.n_batch
        cp.n_ubatch = min(params.n_ubatch, params.n_batch)
        cp.n_seq_max = 1
        cp.n_outputs_max = max(1, params.n_outputs_max)
        threads = params.n_threads or default_threads()
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.flash_attn_type = FLASH_ATTN[params.flash_attn]
        cp.type_k = CACHE_TYPES[params.cache_type_k]
        cp.type_v = CACHE_TYPES[params.cache_type_v]
        cp.offload_kqv = params.offload_kqv
        cp.no_perf = True
        if other is not None:
            cp.ctx_other = other._ptr
        with interrupts.native():
            self._ptr = ll.llama_init_from_model(model._ptr, cp)
        if not self._ptr:
            detail = "; ".join(LOG.tail(2)) or "out of memory?"
            raise SpecdecError(
                f"llama.cpp could not create a context for {model.path.name} (n_ctx {params.n_ctx}): {detail}",
                hint="try a smaller --ctx or a quantized KV cache (--cache-type-k q8_0)",
            )
        self.n_ctx = int(ll.llama_n_ctx(self._ptr))
        self.n_batch = int(ll.llama_n_batch(self._ptr))
        self.n_ubatch = int(ll.llama_n_ubatch(self._ptr))
        self._mem = ll.llama_get_memory(self._ptr)
        self._cap = max(self.n_batch, 1)
        self._batch = ll.llama_batch_init(self._cap, 0, 1)
        for i in range(self._cap):
            self._batch.n_seq_id[i] = 1
            self._batch.seq_id[i][0] = SEQ
        self._n_vocab = model.n_vocab
        self.busy_seconds = 0.0  # total time inside llama_decode: what is not Python overhead
        self._logits_ptr_type = ctypes.POINTER(ctypes.c_float * self._n_vocab)

    def decode(self, tokens: list[int], pos0: int, *, outputs: str = "last") -> None:
        """Evaluate ``tokens`` at positions pos0.. in one pass (chunked by n_batch).

        ``outputs`` is ``"last"`` (logits for the final token only: prefill and drafting)
        or ``"all"`` (logits for every token: the verify pass).
        """
        ll = _lib()
        n = len(tokens)
        if outputs == "all" and n > self.params.n_outputs_max:
            # llama.cpp would abort the process; this is a caller's bug, say so instead
            raise ValueError(f"{n} output rows requested, the context was made for {self.params.n_outputs_max}")
        start = 0
        while start < n:
            chunk = tokens[start : start + self._cap]
            b = self._batch
            k = len(chunk)
            for i, t in enumerate(chunk):
                b.token[i] = t
                b.pos[i] = pos0 + start + i
                b.logits[i] = outputs == "all"
            if outputs == "last" and start + k == n:
                b.logits[k - 1] = 1
            b.n_tokens = k
            abortable = k >= ABORTABLE_PASS
            if abortable:
                ll.llama_set_abort_callback(self._ptr, _ABORT, None)
            t0 = time.perf_counter()
            with interrupts.native():
                rc = ll.llama_decode(self._ptr, b)
                self.busy_seconds += time.perf_counter() - t0
                if abortable:
                    ll.llama_set_abort_callback(self._ptr, _NO_ABORT, None)  # a NULL callback
            if rc != 0:
                raise _decode_error(rc, self)
            start += k

    def logits(self, i: int) -> np.ndarray:
        """Logits of output row ``i`` (``-1`` = the last), as a numpy view valid until the next decode."""
        ptr = _lib().llama_get_logits_ith(self._ptr, i)
        if not ptr:
            raise SpecdecError(f"llama.cpp returned no logits for output {i}")
        return np.frombuffer(ctypes.cast(ptr, self._logits_ptr_type).contents, dtype=np.float32)

    # --- hidden states for draft heads (llama-ext.h) -----------------------------------------
    def extract_layer_inputs(self, layer: int, enabled: bool = True) -> None:
        """Make every decode keep the input of target layer ``layer`` for all its tokens."""
        _ext("llama_set_embeddings_layer_inp")(self._ptr, layer, enabled)

    def layer_inputs(self, layer: int, n_tokens: int) -> np.ndarray:
        """The extracted inputs of ``layer`` for the last decode's tokens: (n_tokens, n_embd),
        a view valid until the next decode."""
        ptr = _ext("llama_get_embeddings_layer_inp")(self._ptr, layer)
        if not ptr:
            raise SpecdecError(f"llama.cpp kept no hidden states of layer {layer} of {self.model.path.name}")
        n = self.model.n_embd
        return np.ctypeslib.as_array(ptr, shape=(n_tokens, n))

    def output_hidden(self, enabled: bool, *, masked: bool) -> None:
        """Keep the pre-norm hidden state ("nextn" embeddings) of output rows (masked) or of all rows."""
        _ext("llama_set_embeddings_nextn")(self._ptr, enabled, masked)

    def hidden(self, n_rows: int) -> np.ndarray:
        """The kept pre-norm hidden states of the last pass: (n_rows, n_embd), a view."""
        ptr = _ext("llama_get_embeddings_nextn")(self._ptr)
        if not ptr:
            raise SpecdecError(f"llama.cpp kept no hidden states for {self.model.path.name}")
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.model.n_embd))

    def hidden_row(self, i: int) -> np.ndarray:
        """The kept pre-norm hidden state of output row ``i``, a view."""
        ptr = _ext("llama_get_embeddings_nextn_ith")(self._ptr, i)
        if not ptr:
            raise SpecdecError(f"llama.cpp kept no hidden state for output {i}")
        return np.ctypeslib.as_array(ptr, shape=(self.model.n_embd,))

    def set_causal(self, causal: bool) -> None:
        _lib().llama_set_causal_attn(self._ptr, causal)

    def process(self, batch: ExtBatch, *, encode: bool = False) -> None:
        """Run an extended batch (tokens, embeddings, or both per entry) through the decoder,
        or through the encoder graph of an encoder-decoder draft head."""
        if batch.size == 0:
            return
        t0 = time.perf_counter()
        with interrupts.native():
            rc = _lib().llama_process(self._ptr, PROCESS_ENCODE if encode else PROCESS_DECODE, batch._ptr)
        self.busy_seconds += time.perf_counter() - t0
        if rc != 0:
            raise _decode_error(rc, self)

    def pos_max(self) -> int:
        """The highest position in the cache, -1 when empty."""
        return int(_lib().llama_memory_seq_pos_max(self._mem, SEQ))

    def kv_keep_until(self, pos: int) -> None:
        """Drop every cached position >= pos: the rollback after a rejected draft."""
        if not _lib().llama_memory_seq_rm(self._mem, SEQ, pos, -1):
            raise SpecdecError(
                f"{self.model.path.name} cannot roll back its cache (recurrent or hybrid memory)",
                hint="speculative decoding needs a rollback-capable model; use --no-draft",
            )

    def kv_clear(self) -> None:
        _lib().llama_memory_clear(self._mem, True)

    def close(self) -> None:
        ll = _lib()
        if getattr(self, "_ptr", None):
            ll.llama_batch_free(self._batch)
            ll.llama_free(self._ptr)
            self._ptr = None


class ExtBatch(_FreedOnCollect):
    """llama.cpp's extended batch: entries carry a token, an embedding row, or both.

    llama.cpp copies embedding rows into the batch when they are added, so callers may
    reuse their buffers right away."""

    def __init__(self, ctx: Context):
        ll = _lib()
        self._ptr = ll.llama_batch_ext_init(ctx._ptr)
        if not self._ptr:
            raise SpecdecError(f"llama.cpp could not make a batch for {ctx.model.path.name}")
        self.size = 0
        self._pos = (ll.llama_pos * 4)()

    def clear(self) -> None:
        _lib().llama_batch_ext_clear(self._ptr)
        self.size = 0

    def add(self, token: int | None, pos: int, *, output: bool, embd: np.ndarray | None = None) -> int:
        """Append a token (``embd`` optional: a row fed beside it) or, with ``token=None``,
        an embedding row alone; returns its index in the batch."""
        ll = _lib()
        row = None if embd is None else np.ascontiguousarray(embd, dtype=np.float32)  # alive until copied
        if token is None:
            idx = ll.llama_batch_ext_add_embd(self._ptr, SEQ, _embd(row))
        else:
            idx = ll.llama_batch_ext_add_token(self._ptr, SEQ, token)
        if idx < 0:
            raise SpecdecError(f"llama.cpp refused a batch entry (code {idx}): " + "; ".join(LOG.tail(1)))
        p = self._pos
        p[0] = p[1] = p[2] = pos
        p[3] = 0
        ll.llama_batch_ext_set_pos(self._ptr, idx, p)
        if token is not None and row is not None and not ll.llama_batch_ext_set_embd_token(self._ptr, idx, _embd(row)):
            raise SpecdecError("llama.cpp refused an embedding row: " + "; ".join(LOG.tail(1)))
        if output:
            ll.llama_batch_ext_set_output_logits(self._ptr, idx, True)
        self.size += 1
        return idx

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            _lib().llama_batch_ext_free(self._ptr)
            self._ptr = None


def _embd(row: np.ndarray):
    """A ``llama_embd`` view of a contiguous float32 row; the caller keeps ``row`` alive
    until llama.cpp has copied it."""
    ll = _lib()
    return ll.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, row.shape[-1])


class ContextFull(SpecdecError):
    """The KV cache has no room for the next tokens."""


def _decode_error(rc: int, ctx: Context) -> SpecdecError:
    if rc == 1:
        return ContextFull(
            f"the context of {ctx.n_ctx} tokens is full",
            hint="raise --ctx or lower --max-tokens",
        )
    if rc == 2:  # aborted: a signal arrived during a long pass (interrupts.native raises it)
        interrupts.raise_pending()
        raise interrupts.Interrupted()
    detail = "; ".join(LOG.tail(2)) or f"code {rc}"
    return SpecdecError(f"llama_decode failed on {ctx.model.path.name}: {detail}")

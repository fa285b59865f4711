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


def supports_gpu_offload() -> bool:
    return bool(_lib().llama_supports_gpu_offload())


class Model:
    """A loaded GGUF model: weights, vocabulary, tokenizer and chat template."""

    def __init__(self, path: str | Path, *, n_gpu_layers: int = 0, verbose: bool = False):
        ll = _lib()
        init_backend(verbose)
        self.path = Path(path)
        params = ll.llama_model_default_params()
        params.n_gpu_layers = int(n_gpu_layers)
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

    # --- chat -------------------------------------------------------------------------------
    def chat_template(self) -> str | None:
        raw = _lib().llama_model_chat_template(self._ptr, None)
        return raw.decode("utf-8", errors="replace") if raw else None

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

    def __del__(self):  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass


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


class Context:
    """One inference context over a model: its KV cache, a reusable batch, and logits access."""

    def __init__(self, model: Model, params: ContextParams):
        ll = _lib()
        self.model = model
        self.params = params
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
        self._ptr = ll.llama_init_from_model(model._ptr, cp)
        if not self._ptr:
            detail = "; ".join(LOG.tail(2)) or "out of memory?"
            raise SpecdecError(
                f"llama.cpp could not create a context for {model.path.name} (n_ctx {params.n_ctx}): {detail}",
                hint="try a smaller --ctx or a quantized KV cache (--cache-type-k q8_0)",
            )
        self.n_ctx = int(ll.llama_n_ctx(self._ptr))
        self.n_batch = int(ll.llama_n_batch(self._ptr))
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
            t0 = time.perf_counter()
            rc = ll.llama_decode(self._ptr, b)
            self.busy_seconds += time.perf_counter() - t0
            if rc != 0:
                raise _decode_error(rc, self)
            start += k

    def logits(self, i: int) -> np.ndarray:
        """Logits of output row ``i`` (``-1`` = the last), as a numpy view valid until the next decode."""
        ptr = _lib().llama_get_logits_ith(self._ptr, i)
        if not ptr:
            raise SpecdecError(f"llama.cpp returned no logits for output {i}")
        return np.frombuffer(ctypes.cast(ptr, self._logits_ptr_type).contents, dtype=np.float32)

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

    def __del__(self):  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass


class ContextFull(SpecdecError):
    """The KV cache has no room for the next tokens."""


def _decode_error(rc: int, ctx: Context) -> SpecdecError:
    if rc == 1:
        return ContextFull(
            f"the context of {ctx.n_ctx} tokens is full",
            hint="raise --ctx or lower --max-tokens",
        )
    if rc == 2:
        raise KeyboardInterrupt
    detail = "; ".join(LOG.tail(2)) or f"code {rc}"
    return SpecdecError(f"llama_decode failed on {ctx.model.path.name}: {detail}")

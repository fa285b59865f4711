"""Inference contexts over a loaded model: the passes (the token batch, logits, hidden states).

What the context's memory holds, and taking positions out of it, is ``memory.py``'s (a mixin of
``Context``); the extended batch draft heads feed is ``batch.py``'s.

Part of the FFI boundary (``library.py`` says which modules call llama.cpp).
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...errors import SpecdecError
from ...terminal import interrupts
from ..errors import ContextFull, ContextNotCreated
from .library import (
    ABORT,
    ABORTABLE_PASS,
    LOG,
    NO_ABORT,
    SEQ,
    FreedOnCollect,
    bindings,
    default_threads,
    ext,
)
from .memory import ContextMemory
from .model import Model

if TYPE_CHECKING:
    from .batch import ExtBatch

CACHE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30}
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
PROCESS_ENCODE, PROCESS_DECODE = 0, 1  # llama_process: the encoder graph or the decoder
CONTEXT_MTP = 1  # llama_context_type: the graph of the model's nextn (MTP) layers


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
    n_rs_seq: int = 0  # per-token recurrent-state snapshots for rollback (llama.cpp clamps it to 0 where unsupported)
    mtp: bool = False  # an MTP context: the model's nextn layers over their own KV cache
    # sequences the context holds at once (the scheduler's slots); with more than one, the KV cache
    # is unified: one pool of n_ctx cells that every sequence draws from, so a short job and a long
    # one share the cells, and a shared prompt prefix is stored once (``seq_cp``)
    n_seq_max: int = 1
    # several sequences, each in a KV stream of its own (llama.cpp's kv_unified off, llama-server's
    # default for -np N) instead of one pool. In a pool every row of a pass attends over every
    # cell in use, a neighbour's and an idle conversation's too: on 2 CPU cores a decode step at
    # a depth of 1,500 took 47.5 ms beside three others of 1,500 tokens, 37.7 ms alone, and an
    # agent trace of two sessions ran at 0.88x llama-server's plain slots undrafted (1.00x in
    # streams). A stream sees only its own cells, but llama.cpp runs a pass over several streams
    # in one graph only for consecutive sequence ids with equal rows each, so uneven drafts cost
    # extra graphs: 12 document jobs drafting together ran 1.3x slower in streams. Sharing a prefix
    # across streams copies the whole stream (``ContextMemory.seq_cp``).
    kv_streams: bool = False


class Context(ContextMemory, FreedOnCollect):
    """One inference context over a model: its KV cache, a reusable batch, and logits access."""

    def __init__(self, model: Model, params: ContextParams, *, other: Context | None = None):
        """``other``: the target context a draft head borrows token embeddings and the output
        projection from (llama.cpp's ``ctx_other``); it must outlive this context."""
        ll = bindings()
        self.model = model
        self.params = params
        self.other = other
        cp = ll.llama_context_default_params()
        cp.n_ctx = params.n_ctx
        cp.n_batch = params.n_batch
        cp.n_ubatch = min(params.n_ubatch, params.n_batch)
        cp.n_seq_max = max(1, params.n_seq_max)
        cp.kv_unified = params.n_seq_max > 1 and not params.kv_streams
        cp.n_outputs_max = max(1, params.n_outputs_max)
        threads = params.n_threads or default_threads()
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.flash_attn_type = FLASH_ATTN[params.flash_attn]
        cp.type_k = CACHE_TYPES[params.cache_type_k]
        cp.type_v = CACHE_TYPES[params.cache_type_v]
        cp.offload_kqv = params.offload_kqv
        cp.no_perf = True
        cp.n_rs_seq = max(0, params.n_rs_seq)
        # sliding-window layers keep n_swa + n_ubatch cells, as llama.cpp's own tools do (the
        # library default keeps n_ctx); rollback stays exact: a cell is reused only once it is
        # outside the window of the sequence's last position, which a rollback only lowers
        cp.swa_full = False
        if params.mtp:
            cp.ctx_type = CONTEXT_MTP
        if other is not None:
            cp.ctx_other = other._ptr
        with interrupts.native():
            self._ptr = ll.llama_init_from_model(model._ptr, cp)
        if not self._ptr:
            raise ContextNotCreated(model.path.name, params.n_ctx, "; ".join(LOG.tail(2)) or "out of memory?")
        self.n_ctx = int(ll.llama_n_ctx(self._ptr))
        self.n_batch = int(ll.llama_n_batch(self._ptr))
        self.n_ubatch = int(ll.llama_n_ubatch(self._ptr))
        self.n_rs_seq = int(ll.llama_n_rs_seq(self._ptr))  # what llama.cpp granted
        self._mem = ll.llama_get_memory(self._ptr)
        self._cap = max(self.n_batch, 1)
        self._batch = ll.llama_batch_init(self._cap, 0, 1)
        for i in range(self._cap):
            self._batch.n_seq_id[i] = 1
            self._batch.seq_id[i][0] = SEQ
        self._seqs_set = False  # a multi-sequence pass wrote other sequence ids into the batch
        # the tokens sequence 0 holds at positions 0.., as far as this object has seen them go in
        # (None: unknown, after a multi-sequence pass, a copy into it or a restored state); a
        # generation reuses the part its prompt shares with them (``held_prefix``). Not followed
        # where the memory lets old positions go (a sliding window) or cannot drop a tail (a
        # recurrent state)
        self._tracks = not (model.n_swa or model.is_recurrent or model.is_hybrid)
        self._held: list[int] | None = [] if self._tracks else None
        self._n_vocab = model.n_vocab
        self.busy_seconds = 0.0  # total time inside llama_decode: what is not Python overhead
        self._logits_ptr_type = ctypes.POINTER(ctypes.c_float * self._n_vocab)

    @property
    def can_pad(self) -> bool:
        """Whether a pass may carry filler tokens after its own, dropped right after it: only
        where dropping positions leaves the memory as it was (no sliding window, whose cells
        the filler's positions could push out; no recurrent state, which it would advance)."""
        return self.plain_kv

    def _pad_fits(self, n: int, last_pos: int, pad: int) -> bool:
        return pad > 0 and self.can_pad and n + pad <= self._cap and last_pos + pad < self.n_ctx

    def decode(self, tokens: list[int], pos0: int, *, outputs: str = "last", skip: int = 0,
               rows: list[bool] | None = None, pad: int = 0) -> int:
        """Evaluate ``tokens`` at positions pos0.. in one pass (chunked by n_batch).

        ``outputs`` is ``"last"`` (logits for the final token only: prefill and drafting)
        or ``"all"`` (logits for every token from index ``skip`` on: the verify pass, whose
        first ``skip`` tokens re-evaluate what a restored checkpoint lost); with ``rows``, only
        for the tokens from ``skip`` on whose entry is true (rows a grammar decides alone).
        ``pad``: filler tokens after the pass's own, without outputs, dropped once it has run
        (where ``can_pad`` and they fit in the batch, the positions and the cells): a pass of
        that size costs less on some CPUs (``CostModel.pass_size``). Nothing before them
        attends to them, so no row changes. Returns the filler tokens the pass carried."""
        n = len(tokens)
        if not self._pad_fits(n, pos0 + n - 1, pad):
            pad = 0
        if outputs == "all" and n - skip > self.params.n_outputs_max:
            # llama.cpp would abort the process; this is a caller's bug, say so instead
            raise ValueError(f"{n} output rows requested, the context was made for {self.params.n_outputs_max}")
        if self._seqs_set:
            for i in range(self._cap):
                self._batch.seq_id[i][0] = SEQ
            self._seqs_set = False
        start = carried = 0
        while start < n:
            chunk = tokens[start : start + self._cap]
            b = self._batch
            k = len(chunk)
            extra = pad if start + k == n else 0  # a pass with filler fits in one chunk
            for i in range(k + extra):
                b.token[i] = chunk[min(i, k - 1)]
                b.pos[i] = pos0 + start + i
                j = start + i - skip
                b.logits[i] = i < k and outputs == "all" and j >= 0 and (rows is None or rows[j])
            if outputs == "last" and start + k == n:
                b.logits[k - 1] = 1
            carried = self._run_with_filler(k, extra, SEQ, pos0 + n, pos0 + start + k)
            self._note_held(chunk, pos0 + start)
            start += k
        return carried

    def decode_many(self, tokens: list[int], positions: list[int], seqs: list[int], outputs: list[bool],
                    pad: int = 0) -> int:
        """One pass over tokens of several sequences: token i at ``positions[i]`` of sequence
        ``seqs[i]``, with logits kept where ``outputs[i]``; ``logits(i)`` then reads them by the
        token's index in this pass. The caller keeps the pass within ``n_batch`` tokens and the
        outputs within ``n_outputs_max`` (llama.cpp would abort the process otherwise).
        ``pad``: filler tokens as ``decode``'s, after the last token's sequence and position; a
        pass the cells cannot hold with them runs without them. Returns the filler tokens it carried."""
        n = len(tokens)
        if n > self._cap or sum(outputs) > self.params.n_outputs_max:
            raise ValueError(f"a pass of {n} tokens and {sum(outputs)} outputs exceeds this context's "
                             f"{self._cap} tokens and {self.params.n_outputs_max} outputs")
        if not self._pad_fits(n, positions[-1], pad):
            pad = 0
        b = self._batch
        for i in range(n + pad):
            j = min(i, n - 1)
            b.token[i] = tokens[j]
            b.pos[i] = positions[j] + i - j
            b.seq_id[i][0] = seqs[j]
            b.logits[i] = i < n and outputs[i]
        self._seqs_set = True
        self._held = None
        return self._run_with_filler(n, pad, seqs[-1], positions[-1] + 1, None)

    def _run_with_filler(self, n: int, pad: int, seq: int, first_filler: int, needed: int | None) -> int:
        """Run the batch's first ``n`` entries and the ``pad`` filler entries written after them,
        then drop the filler (``seq``'s positions from ``first_filler`` on); without the filler
        where the cells cannot hold it (llama.cpp changes nothing when it finds no slot).
        Returns the filler tokens the pass carried."""
        if pad:
            self._batch.n_tokens = n + pad
            try:
                self._run_batch(n + pad, needed)
            except ContextFull:
                pass
            else:
                self.seq_rm(seq, first_filler)
                return pad
        self._batch.n_tokens = n
        self._run_batch(n, needed)
        return 0

    def _run_batch(self, k: int, needed: int | None) -> None:
        """llama_decode over the first ``k`` entries of the batch; long passes can be aborted by a signal."""
        ll = bindings()
        abortable = k >= ABORTABLE_PASS
        if abortable:
            ll.llama_set_abort_callback(self._ptr, ABORT, None)
        t0 = time.perf_counter()
        with interrupts.native():
            rc = ll.llama_decode(self._ptr, self._batch)
            # On a GPU llama_decode only queues the work; the pass ends when the device is done.
            # Waiting here puts the pass's real time into every cost the policy measures (on the
            # CPU the decode has already finished and this returns at once).
            ll.llama_synchronize(self._ptr)
            self.busy_seconds += time.perf_counter() - t0
            if abortable:
                ll.llama_set_abort_callback(self._ptr, NO_ABORT, None)  # a NULL callback
        if rc != 0:
            raise _decode_error(rc, self, needed)

    def logits(self, i: int) -> np.ndarray:
        """Logits of output row ``i`` (``-1`` = the last), as a numpy view valid until the next decode."""
        ptr = bindings().llama_get_logits_ith(self._ptr, i)
        if not ptr:
            raise SpecdecError(f"llama.cpp returned no logits for output {i}")
        # a ctypes array is a buffer, which numpy's stubs do not say of it
        return np.frombuffer(ctypes.cast(ptr, self._logits_ptr_type).contents, dtype=np.float32)  # type: ignore[call-overload]

    # --- hidden states for draft heads (llama-ext.h) -----------------------------------------
    def extract_layer_inputs(self, layer: int, enabled: bool = True) -> None:
        """Make every decode keep the input of target layer ``layer`` for all its tokens."""
        ext("llama_set_embeddings_layer_inp")(self._ptr, layer, enabled)

    def layer_inputs(self, layer: int, n_tokens: int) -> np.ndarray:
        """The extracted inputs of ``layer`` for the last decode's tokens: (n_tokens, n_embd),
        a view valid until the next decode."""
        ptr = ext("llama_get_embeddings_layer_inp")(self._ptr, layer)
        if not ptr:
            raise SpecdecError(f"llama.cpp kept no hidden states of layer {layer} of {self.model.path.name}")
        n = self.model.n_embd
        return np.ctypeslib.as_array(ptr, shape=(n_tokens, n))

    def output_hidden(self, enabled: bool, *, masked: bool) -> None:
        """Keep the pre-norm hidden state ("nextn" embeddings) of output rows (masked) or of all rows."""
        ext("llama_set_embeddings_nextn")(self._ptr, enabled, masked)

    def hidden(self, n_rows: int) -> np.ndarray:
        """The kept pre-norm hidden states of the last pass: (n_rows, n_embd), a view."""
        ptr = ext("llama_get_embeddings_nextn")(self._ptr)
        if not ptr:
            raise SpecdecError(f"llama.cpp kept no hidden states for {self.model.path.name}")
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.model.n_embd))

    def hidden_row(self, i: int) -> np.ndarray:
        """The kept pre-norm hidden state of output row ``i``, a view."""
        ptr = ext("llama_get_embeddings_nextn_ith")(self._ptr, i)
        if not ptr:
            raise SpecdecError(f"llama.cpp kept no hidden state for output {i}")
        return np.ctypeslib.as_array(ptr, shape=(self.model.n_embd,))

    def set_causal(self, causal: bool) -> None:
        bindings().llama_set_causal_attn(self._ptr, causal)

    def process(self, batch: ExtBatch, *, encode: bool = False) -> None:
        """Run an extended batch (tokens, embeddings, or both per entry) through the decoder,
        or through the encoder graph of an encoder-decoder draft head."""
        if batch.size == 0:
            return
        self._held = None
        t0 = time.perf_counter()
        ll = bindings()
        with interrupts.native():
            rc = ll.llama_process(self._ptr, PROCESS_ENCODE if encode else PROCESS_DECODE, batch._ptr)
            ll.llama_synchronize(self._ptr)  # the pass's whole time, as in _run_batch
        self.busy_seconds += time.perf_counter() - t0
        if rc != 0:
            raise _decode_error(rc, self)

    def set_nextn_layer(self, offset: int) -> None:
        """Which of the model's nextn (MTP) blocks the next passes of an MTP context run."""
        ext("llama_set_nextn_layer_offset")(self._ptr, offset)

    def close(self) -> None:
        ll = bindings()
        if getattr(self, "_ptr", None):
            ll.llama_batch_free(self._batch)
            ll.llama_free(self._ptr)
            self._ptr = None


def _decode_error(rc: int, ctx: Context, needed: int | None = None) -> SpecdecError:
    if rc == 1:
        return ContextFull(ctx.n_ctx, needed)
    if rc == 2:  # aborted: a signal arrived during a long pass (interrupts.native raises it)
        interrupts.raise_pending()
        raise interrupts.Interrupted()
    detail = "; ".join(LOG.tail(2)) or f"code {rc}"
    return SpecdecError(f"llama_decode failed on {ctx.model.path.name}: {detail}")

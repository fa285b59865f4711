"""llama.cpp's extended batch, the one draft heads feed: entries that carry a token, an embedding
row, or both, at positions of their own.

Kept apart from ``context.py`` because it is its own object with its own lifetime (llama.cpp's
``llama_batch_ext``), built by the heads (``drafters/eagle3.py``, ``dflash.py``, ``mtp.py``) and
run by ``Context.process``; the plain token batch of the target's passes is the context's own.

Part of the FFI boundary (``library.py`` says which modules call llama.cpp).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import numpy as np

from ...errors import SpecdecError
from .library import LOG, SEQ, FreedOnCollect, bindings

if TYPE_CHECKING:
    from .context import Context


class ExtBatch(FreedOnCollect):
    """llama.cpp's extended batch: entries carry a token, an embedding row, or both.

    llama.cpp copies embedding rows into the batch when they are added, so callers may
    reuse their buffers right away."""

    def __init__(self, ctx: Context):
        ll = bindings()
        self._ptr = ll.llama_batch_ext_init(ctx._ptr)
        if not self._ptr:
            raise SpecdecError(f"llama.cpp could not make a batch for {ctx.model.path.name}")
        self.size = 0
        self._pos = (ll.llama_pos * 4)()

    def clear(self) -> None:
        bindings().llama_batch_ext_clear(self._ptr)
        self.size = 0

    def add(self, token: int | None, pos: int, *, output: bool, embd: np.ndarray | None = None) -> int:
        """Append a token (``embd`` optional: a row fed beside it) or, with ``token=None``,
        an embedding row alone; returns its index in the batch."""
        ll = bindings()
        row = None if embd is None else np.ascontiguousarray(embd, dtype=np.float32)  # alive until copied
        if token is None:
            assert row is not None, "a row alone needs its embedding"
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
            bindings().llama_batch_ext_free(self._ptr)
            self._ptr = None


def _embd(row: np.ndarray):
    """A ``llama_embd`` view of a contiguous float32 row; the caller keeps ``row`` alive
    until llama.cpp has copied it."""
    ll = bindings()
    return ll.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, row.shape[-1])

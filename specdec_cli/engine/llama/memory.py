"""What a context's memory holds and how positions leave it: the KV cache (or recurrent state) of
its sequences, the prefix of sequence 0 this object has seen go in, dropping and sharing positions,
and checkpoints of the partial state that a rejected draft is taken back with.

A mixin of ``Context`` (``context.py``) over its ``_ptr``, ``_mem``, ``model``, ``n_rs_seq``,
``_held`` and ``_tracks``, kept apart because it is llama.cpp's memory API, one concept (as
``llama-memory.h`` is there), where ``context.py`` is the passes over it. ``verify/rollback.py``
drives these calls; ``models/memory_kinds.py`` names the kinds of memory.

Part of the FFI boundary (``library.py`` says which modules call llama.cpp).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import SpecdecError
from ...models.memory_kinds import Rollback
from ...terminal import interrupts
from .library import SEQ, bindings

if TYPE_CHECKING:
    from .context import ContextParams
    from .model import Model

STATE_PARTIAL_ONLY = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: the recurrent (or SWA) part of a state
_STATE_HEAD = struct.Struct("<IiI")  # what a sequence's state begins with: llama.cpp's magic, the seq id, streams


class ContextMemory:
    """The memory half of ``Context``: positions, sequences and state checkpoints."""

    # set by ``Context.__init__`` (``context.py``), which owns the context these calls act on
    _ptr: Any  # the llama_context
    _mem: Any  # its llama_memory
    model: Model  # the model the context runs
    n_rs_seq: int  # the recurrent-state snapshots llama.cpp granted per sequence
    _tracks: bool  # whether what sequence 0 holds is followed at all (``_held``)
    _held: list[int] | None  # the tokens sequence 0 holds at positions 0.., None when unknown
    params: ContextParams  # what the context was made with (``kv_streams``: a KV stream per sequence)
    decode: Callable[..., int]  # ``Context.decode``: a pass (the rollback probe runs one)

    def _note_held(self, tokens: list[int], pos0: int) -> None:
        held = self._held
        if held is not None and pos0 <= len(held):
            del held[pos0:]
            held.extend(tokens)
        else:
            self._held = None

    def held_prefix(self, tokens: list[int], limit: int) -> int:
        """How many of ``tokens``, from the start and at most ``limit``, sequence 0 holds already
        (0 when what it holds is unknown)."""
        held = self._held or ()
        n, top = 0, min(limit, len(held), len(tokens))
        while n < top and held[n] == tokens[n]:
            n += 1
        return n

    def pos_max(self, seq: int = SEQ) -> int:
        """The highest position of ``seq`` in the cache, -1 when empty."""
        return int(bindings().llama_memory_seq_pos_max(self._mem, seq))

    def seq_rm(self, seq: int, p0: int, p1: int = -1) -> bool:
        """Drop positions [p0, p1) of ``seq`` (p1 -1: to the end; p0 -1 and p1 -1: all of it).
        False where the memory cannot drop a part (a recurrent state)."""
        ok = bool(bindings().llama_memory_seq_rm(self._mem, seq, p0, p1))
        if ok and seq in (SEQ, -1):
            self._forget_from(p0, p1)
        return ok

    def _forget_from(self, p0: int, p1: int) -> None:
        """Positions [p0, p1) were dropped: what is known ends at p0 (past a hole too)."""
        if p0 <= 0 and p1 < 0:
            self._held = [] if self._tracks else None
        elif self._held is not None:
            del self._held[max(p0, 0):]

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        """Let ``dst`` share ``src``'s cells for positions [p0, p1): a common prefix computed once.
        In a unified cache the cells are tagged, nothing is copied. Across KV streams llama.cpp
        copies only whole streams (and aborts the process on a range), so ``src``'s stream is
        copied and what ``dst`` should not hold is dropped after (``dst`` empty before, p0 0)."""
        ll = bindings()
        if self.params.kv_streams and src != dst:
            ll.llama_memory_seq_cp(self._mem, src, dst, -1, -1)
            if p1 >= 0:
                ll.llama_memory_seq_rm(self._mem, dst, p1, -1)
        else:
            ll.llama_memory_seq_cp(self._mem, src, dst, p0, p1)
        if dst == SEQ:
            self._held = None

    # --- a sequence's cells as bytes (the prompt cache: ``engine/promptcache``) ----------------
    @property
    def plain_kv(self) -> bool:
        """Whether this context's memory is one attention cache and nothing else (no recurrent
        state, no sliding-window half): the memory whose sequence state ``seq_state`` reads."""
        return self._tracks and bool(self._mem)

    def seq_state(self, seq: int) -> memoryview | None:
        """``seq``'s cells (positions, K and V) as llama.cpp writes them, without the layout of
        this context's streams (None: it holds none). llama.cpp writes a magic, the sequence's
        id, a stream count and then each stream's cells; a sequence's cells are all in one
        stream, so what is kept is the magic and that stream's block, and ``seq_restore`` puts
        them back into a context of any stream count (a server's streams, a batch's pool,
        ``run``'s one sequence) and any sequence. Plain attention caches only (``plain_kv``):
        another memory writes more than one such block. The bytes are llama.cpp's own buffer,
        never zeroed first nor copied after (for 173 MB that saved 0.16 of 0.18 s here)."""
        ll = bindings()
        size = int(ll.llama_state_seq_get_size(self._ptr, seq))
        buf = np.empty(size, dtype=np.uint8).data  # a memoryview of numpy's, never zeroed
        arr = (ctypes.c_uint8 * size).from_buffer(buf)
        with interrupts.native():
            n = int(ll.llama_state_seq_get_data(self._ptr, arr, size, seq))
        del arr
        if n < _STATE_HEAD.size:
            raise SpecdecError(f"llama.cpp could not save the cells of {self.model.path.name}")
        magic, _, n_stream = _STATE_HEAD.unpack_from(buf, 0)
        first = 0  # the streams before the sequence's own are empty: a zero count each
        while first < n_stream and not struct.unpack_from("<I", buf, _STATE_HEAD.size + 4 * first)[0]:
            first += 1
        if first == n_stream:
            return None
        tail = 4 * (n_stream - first - 1)  # and so are the ones after it
        if any(buf[n - tail : n]):
            raise SpecdecError(f"llama.cpp wrote a sequence state of {self.model.path.name} that is not one stream's")
        at = _STATE_HEAD.size + 4 * first - 4  # the magic goes right before the block, over what is not kept
        struct.pack_into("<I", buf, at, magic)
        return buf[at : n - tail]

    def seq_restore(self, seq: int, block: memoryview | bytes) -> bool:
        """Put cells read by ``seq_state`` (from this context or another of the same model and
        cache types) into ``seq``, replacing what it held. False, with ``seq`` left empty, where
        llama.cpp refuses them (too few free cells, other cache types, not a state at all)."""
        ll = bindings()
        n_stream = self.params.n_seq_max if self.params.kv_streams else 1
        (magic,) = struct.unpack_from("<I", block, 0)
        size = _STATE_HEAD.size + len(block) - 4 + 4 * (n_stream - 1)
        whole = np.empty(size, dtype=np.uint8)
        end = _STATE_HEAD.size + len(block) - 4
        whole[_STATE_HEAD.size : end] = np.frombuffer(block, dtype=np.uint8, offset=4)
        whole[end:] = 0
        buf = whole.data
        _STATE_HEAD.pack_into(buf, 0, magic, seq, n_stream)
        arr = (ctypes.c_uint8 * size).from_buffer(buf)
        with interrupts.native():
            n = int(ll.llama_state_seq_set_data(self._ptr, arr, size, seq))
        del arr
        if seq == SEQ:
            self._held = None
        if n != size:
            ll.llama_memory_seq_rm(self._mem, seq, -1, -1)
            return False
        return True

    def note_held(self, tokens: list[int]) -> None:
        """Sequence 0 holds ``tokens`` at positions 0.. (restored, not decoded here)."""
        if self._tracks:
            self._held = list(tokens)

    def kv_keep_until(self, pos: int) -> None:
        """Drop every cached position >= pos, where the cache can (an attention cache, the
        MTP or head contexts); ``verify/rollback.py`` handles the memories that cannot."""
        if not self.kv_try_keep_until(pos):
            raise SpecdecError(
                f"{self.model.path.name} could not drop cached positions from {pos} on",
                hint="this is a bug in specdec's rollback; please report it with the model's architecture",
            )

    def kv_try_keep_until(self, pos: int) -> bool:
        """Drop every cached position >= pos; False (and nothing dropped) where the memory
        cannot, as a recurrent state cannot without a snapshot."""
        return self.seq_rm(SEQ, pos, -1)

    # --- rollback support (memory_kinds.py explains the kinds) -------------------------------
    def probe_rollback(self) -> Rollback:
        """How this context can drop positions, found as llama.cpp's common_context_can_seq_rm
        finds it (two tokens in, one out). Clears the cache."""
        ll = bindings()
        if not self._mem:
            return Rollback.NONE
        if self.n_rs_seq > 0:
            return Rollback.SNAPSHOTS
        self.kv_clear()
        try:
            tok = max(0, self.model.bos)
            self.decode([tok, tok], 0)
            if ll.llama_memory_seq_rm(self._mem, SEQ, 1, -1):
                return Rollback.PARTIAL
            return Rollback.CHECKPOINT if self.state_size() > 0 else Rollback.NONE
        finally:
            self.kv_clear()

    def state_size(self) -> int:
        """Bytes of a checkpoint of the sequence's partial state (recurrent or SWA part)."""
        return int(bindings().llama_state_seq_get_size_ext(self._ptr, SEQ, STATE_PARTIAL_ONLY))

    def state_save(self, buf: bytearray | None = None) -> bytearray:
        """A checkpoint of the partial state, written into ``buf`` when it has the right size."""
        ll = bindings()
        size = self.state_size()
        if buf is None or len(buf) != size:
            buf = bytearray(size)
        arr = (ctypes.c_uint8 * size).from_buffer(buf)
        with interrupts.native():
            n = ll.llama_state_seq_get_data_ext(self._ptr, arr, size, SEQ, STATE_PARTIAL_ONLY)
        if n != size:
            raise SpecdecError(f"llama.cpp saved {n} of {size} bytes of the state of {self.model.path.name}")
        return buf

    def state_load(self, buf: bytearray) -> None:
        """Put a checkpoint from ``state_save`` back (positions after it stay in an attention
        part until dropped: the caller drops them)."""
        ll = bindings()
        arr = (ctypes.c_uint8 * len(buf)).from_buffer(buf)
        with interrupts.native():
            n = ll.llama_state_seq_set_data_ext(self._ptr, arr, len(buf), SEQ, STATE_PARTIAL_ONLY)
        self._held = None
        if n != len(buf):
            raise SpecdecError(f"llama.cpp could not restore the state of {self.model.path.name}")

    def kv_clear(self) -> None:
        bindings().llama_memory_clear(self._mem, True)
        self._held = [] if self._tracks else None

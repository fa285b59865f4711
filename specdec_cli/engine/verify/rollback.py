"""Taking a rejected draft back out of a context, whatever memory it keeps.

A verify pass writes every drafted token into the target's memory; after a partial acceptance
the positions after the last kept token must go. ``memory_kinds.py`` names the three ways
llama.cpp offers, and :class:`CacheRollback` drives one of them behind one call,
``keep_until(pos)``, which returns the position the memory really holds up to:

- **partial** (attention, sliding window): ``seq_rm`` drops the positions; returns ``pos``;
- **snapshots** (hybrid targets with ``n_rs_seq``): the same call, valid for up to
  ``n_rs_seq`` positions after the last pass, so drafts are capped at that (``max_draft``);
- **checkpoint** (the other recurrent and hybrid memories): ``before_pass`` copies the state
  (llama.cpp's ``PARTIAL_ONLY`` sequence state: the recurrent part) before a pass that may be
  rejected; ``keep_until`` copies it back, drops the attention part's later positions, and
  returns the checkpoint's position. The caller re-evaluates what lies between
  (``Session``'s replay, ``ModelDrafter``'s sync), as speculative-simple does. A pass whose
  draft is fully accepted never restores.
"""

from __future__ import annotations

import time

from ...errors import SpecdecError
from ...models.memory_kinds import Rollback
from ..llama.context import Context


class NoRollback(SpecdecError):
    """Raised when a draft would need a rollback that this memory cannot do at all."""


class CacheRollback:
    """One context's way of dropping the positions of a rejected draft; counts what it did."""

    def __init__(self, ctx: Context, kind: Rollback):
        self.ctx = ctx
        self.kind = kind
        self._saved: bytearray | None = None  # reused from pass to pass
        self._saved_pos: int | None = None  # the cache held positions [0, _saved_pos) when saved
        self.bytes = 0  # size of one checkpoint
        self.forget()

    @property
    def seconds(self) -> float:
        return self.save_seconds + self.restore_seconds

    @property
    def max_draft(self) -> int | None:
        """Longest draft this memory can take back (None: no limit)."""
        if self.kind is Rollback.SNAPSHOTS:
            return self.ctx.n_rs_seq
        if self.kind is Rollback.NONE:
            return 0
        return None

    def before_pass(self, pos: int) -> None:
        """A pass from position ``pos`` may be rejected: keep what is needed to undo it."""
        if self.kind is not Rollback.CHECKPOINT:
            return
        t0 = time.perf_counter()
        self._saved = self.ctx.state_save(self._saved)
        self._saved_pos = pos
        self.bytes = len(self._saved)
        self.checkpoints += 1
        self.last_save = time.perf_counter() - t0
        self.save_seconds += self.last_save

    def keep_until(self, pos: int) -> int:
        """Keep positions < ``pos`` (or fewer); returns how many positions the memory now holds."""
        ctx = self.ctx
        if self.kind is not Rollback.CHECKPOINT:
            if not ctx.kv_try_keep_until(pos):
                raise NoRollback(
                    f"{ctx.model.path.name} could not drop its cache back to position {pos} "
                    f"({self.kind} rollback)",
                    hint="report this with the model's architecture; --no-draft runs the target alone",
                )
            return pos
        if ctx.kv_try_keep_until(pos):  # nothing recurrent after pos (a fully accepted pass)
            return pos
        if self._saved is None or self._saved_pos is None or self._saved_pos > pos:
            raise NoRollback(f"{ctx.model.path.name} has no checkpoint at or before position {pos}",
                             hint="report this; --no-draft runs the target alone")
        t0 = time.perf_counter()
        ctx.state_load(self._saved)
        ctx.kv_keep_until(self._saved_pos)  # the attention part still holds the later positions
        self.restores += 1
        self.last_restore = time.perf_counter() - t0
        self.restore_seconds += self.last_restore
        return self._saved_pos

    def forget(self) -> None:
        """A new generation: no checkpoint of the old one is valid (the buffer is kept for reuse),
        and the counts start again."""
        self._saved_pos = None
        self.checkpoints = 0  # states copied out
        self.restores = 0  # states copied back
        self.save_seconds = 0.0  # spent copying states out
        self.restore_seconds = 0.0  # ... and back
        self.last_save = self.last_restore = 0.0  # seconds of the latest copy each way

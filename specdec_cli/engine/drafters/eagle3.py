"""EAGLE-3: a one-layer head that drafts from the target's own hidden states.

The head reads the inputs of three target layers for every token the target evaluates,
fuses them with its encoder (``fc``) into one state ``g`` per position, and then decodes
autoregressively: at cache position P its decoder takes the pair (token[P+1], g[P]), and
each drafted token's pre-norm state becomes the ``g`` of the next draft position.

Behaviour follows llama.cpp's ``common_speculative_impl_draft_eagle3`` (common/speculative.cpp
in llama-cpp-python 0.3.36), call for call, so the drafts are the same tokens:

- the target layers are the head's ``target_layers``; a layer id equal to the target's layer
  count means its final pre-norm state;
- the deferred boundary: the pair for the last position of each target pass cannot be written
  yet (its next token is not known), so its ``g`` waits in ``pending`` until the next draft
  pairs it with the target's new token, or the next pass bridges it;
- drafts stop at ``n_max``, or early when the draft's confidence (softmax over its 10 best
  logits, llama.cpp's draft sampler) falls below ``p_min``;
- after each draft the head's cache is trimmed back to the target's, and after each verify to
  the accepted tokens, as speculative-simple does.
"""

from __future__ import annotations

import numpy as np

from ...errors import UsageError
from ..llama.batch import ExtBatch
from ..llama.context import Context
from .base import Drafter
from .greedy import confident_argmax, p_min_rule


class Eagle3Drafter(Drafter):
    method = "eagle3"
    reads_target_states = True

    def __init__(self, target: Context, ctx: Context, *, n_max: int, n_min: int = 0, p_min: float = 0.0):
        self.target = target
        self.ctx = ctx
        self.n_max = n_max
        self.n_min = n_min
        self.p_min = p_min
        self.layers = ctx.model.target_layer_ids()
        if len(self.layers) != 3:
            raise UsageError(
                f"{ctx.model.path.name} is not an EAGLE-3 head: it records {len(self.layers)} target layers, not 3",
                hint="convert the head again with convert_hf_to_gguf.py --target-model-dir",
            )
        n_layer = target.model.n_layer
        if any(lid > n_layer for lid in self.layers):
            raise UsageError(
                f"{ctx.model.path.name} reads target layers {self.layers}, "
                f"but {target.model.path.name} has {n_layer}",
                hint="use the EAGLE-3 head made for this target",
            )
        self.n_embd = ctx.model.n_embd
        self.set_active(True)
        ctx.output_hidden(True, masked=True)
        self._enc = ExtBatch(ctx)
        self._dec = ExtBatch(ctx)
        self._reset()

    def _reset(self) -> None:
        self.pending_pos = -1  # the deferred boundary: position and g of the last verified token
        self.pending_g = np.zeros(self.n_embd, dtype=np.float32)
        self.verify_pos = -1  # position of the first token of the last target pass
        self.verify_g = np.zeros((0, self.n_embd), dtype=np.float32)

    def configure(self, *, n_max: int, p_min: float) -> None:
        self.n_max, self.p_min = n_max, p_min

    def set_active(self, active: bool) -> None:
        n_layer = self.target.model.n_layer
        for lid in self.layers:
            if lid < n_layer:
                self.target.extract_layer_inputs(lid, active)
            else:
                self.target.output_hidden(active, masked=False)

    def begin(self, prompt, sampler=None) -> None:
        self._reset()
        self.ctx.kv_clear()

    def _features(self, n: int) -> np.ndarray:
        """The target's extracted states for its last ``n`` tokens, layer after layer per row."""
        n_layer = self.target.model.n_layer
        parts = [
            self.target.layer_inputs(lid, n) if lid < n_layer else self.target.hidden(n)
            for lid in self.layers
        ]
        return np.concatenate(parts, axis=1)

    def process(self, tokens: list[int], pos0: int) -> None:
        n = len(tokens)
        if n == 0:
            return
        feats = self._features(n)
        ctx, enc = self.ctx, self._enc
        g = np.empty((n, self.n_embd), dtype=np.float32)
        for i in range(0, n, ctx.n_ubatch):  # the encoder is per token: chunks are safe
            c = min(ctx.n_ubatch, n - i)
            enc.clear()
            pos = ctx.pos_max() + 1  # the encoder ignores positions; llama.cpp numbers them on
            for j in range(c):
                enc.add(None, pos + j, output=True, embd=feats[i + j])
            ctx.process(enc, encode=True)
            g[i : i + c] = ctx.hidden(c)

        dec = self._dec
        dec.clear()
        # bridge: the previous pass's deferred pair, when no draft has written it since
        if self.pending_pos >= 0 and self.pending_pos + 1 == pos0 and self.pending_pos > ctx.pos_max():
            dec.add(tokens[0], self.pending_pos, output=False, embd=self.pending_g)
        for k in range(n - 1):
            dec.add(tokens[k + 1], pos0 + k, output=False, embd=g[k])
        self.verify_pos = pos0
        self.verify_g = g
        self.pending_pos = pos0 + n - 1
        self.pending_g = g[n - 1].copy()
        ctx.process(dec)

    def draft(self, history: list[int], n_max: int) -> list[int]:
        if self.pending_pos < 0 or n_max <= 0:
            return []
        ctx, dec = self.ctx, self._dec
        ctx.kv_keep_until(self.pending_pos)
        dec.clear()
        dec.add(history[-1], self.pending_pos, output=True, embd=self.pending_g)
        ctx.process(dec)
        pos0 = self.pending_pos

        def advance(i: int, tok: int) -> None:
            prenorm = ctx.hidden_row(0).copy()
            dec.clear()
            dec.add(tok, pos0 + i + 1, output=True, embd=prenorm)
            ctx.process(dec)

        # llama.cpp drafts its configured length and cuts the draft to the budget afterwards
        out = confident_argmax(self.n_max, lambda i: ctx.logits(-1), keep=p_min_rule(self.p_min), advance=advance)
        ctx.kv_keep_until(len(history) - 1)  # the target verifies from here: drop the draft's positions
        if len(out) < self.n_min:
            return []
        return out[:n_max]

    def accept(self, n_accepted: int) -> None:
        rows = len(self.verify_g)
        if rows == 0:
            return
        i = min(n_accepted, rows - 1)
        self.pending_pos = self.verify_pos + i
        self.pending_g = self.verify_g[i].copy()
        self.ctx.kv_keep_until(self.verify_pos + 1 + n_accepted)

    def close(self) -> None:
        self._enc.close()
        self._dec.close()

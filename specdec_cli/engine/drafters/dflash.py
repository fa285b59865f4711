"""DFlash and DSpark: block drafting from the target's hidden states.

A DFlash head keeps a KV cache of its own, filled not by tokens but by the target: after
every target pass, the inputs of the head's ``target_layers`` for each evaluated token are
fused (``fc``) and written into the head's cache at that token's position. To draft, the
head decodes one block ``[last token, mask, mask, ...]`` at the next positions in a single
non-causal pass and reads a whole draft from it at once.

DSpark is DFlash plus a Markov head: each block position's logits are biased by a low-rank
term of the token drafted before it (chained greedily inside the graph), and an optional
confidence head scores every position; a draft stops at the first position whose confidence
is below ``p_min``. With ``sample_from_anchor`` (the default) the block is
``[last token, mask, ...]`` of ``n_max`` entries and every slot is a draft token; otherwise
the anchor slot is skipped, as in DFlash.

Behaviour follows llama.cpp's ``common_speculative_impl_draft_dflash`` (common/speculative.cpp
in llama-cpp-python 0.3.36):

- draft lengths: at most ``block_size - 1`` for DFlash and anchor-skipping DSpark, at most
  ``block_size`` for anchor-first DSpark (longer settings are clamped, with a warning);
- the block always has the configured length (the block's shape changes its logits), and the
  draft is cut to the step's budget afterwards;
- DFlash stops early when the draft's confidence (softmax over its 10 best logits) falls below
  ``p_min``; DSpark uses its confidence head instead, and refuses ``p_min > 0`` without one;
- the block is removed from the head's cache before the target verifies, and after the verify
  the cache keeps only the accepted positions.

DFlash2 heads (a selector lattice in place of logits) are refused: no fixture exercises them.
"""

from __future__ import annotations

import numpy as np

from ...errors import UsageError
from ..llama.batch import ExtBatch
from ..llama.context import Context
from .base import Drafter
from .greedy import confident_argmax, p_min_rule


class DFlashDrafter(Drafter):
    method = "dflash"
    reads_target_states = True

    def __init__(
        self,
        target: Context,
        ctx: Context,
        *,
        n_max: int,
        n_min: int = 0,
        p_min: float = 0.0,
        dspark: bool = False,
        warn=None,
    ):
        self.target = target
        self.ctx = ctx
        self.dspark = dspark
        self.method = "dspark" if dspark else "dflash"
        self._warn = warn or (lambda msg: None)
        m = ctx.model
        name = m.path.name
        self.layers = m.target_layer_ids()
        if not self.layers:
            raise UsageError(f"{name} records no target layers: it is not a DFlash head",
                             hint="convert it again with convert_hf_to_gguf.py --target-model-dir")
        if m.dflash_selector_top_k() > 0:
            raise UsageError(f"{name} is a DFlash2 (selector) head, which specdec does not drive yet",
                             hint="use llama.cpp's llama-server --spec-type draft-dflash for it, or --method ngram")
        n_layer = target.model.n_layer
        if any(lid >= n_layer for lid in self.layers):
            raise UsageError(f"{name} reads target layers {self.layers}, but {target.model.path.name} has {n_layer}",
                             hint="use the head made for this target")
        if m.n_embd != target.model.n_embd:
            raise UsageError(f"{name} is {m.n_embd} wide but the target is {target.model.n_embd}",
                             hint="use the head made for this target")
        self.mask = m.mask_token()
        if self.mask < 0:
            raise UsageError(f"{name} has no mask token (tokenizer.ggml.mask_token_id)",
                             hint="convert it again with a current convert_hf_to_gguf.py")
        self.block_size = int(m.meta("dflash.block_size") or 16)
        anchor = m.meta("dflash.sample_from_anchor")
        self.from_anchor = anchor is None or anchor == "true"
        self.has_confidence = m.meta("dflash.has_confidence_head") in (None, "true")
        self.n_min = n_min
        self._warned: set[int] = set()
        self.configure(n_max=n_max, p_min=p_min)
        self.set_active(True)
        ctx.output_hidden(True, masked=True)
        ctx.set_causal(m.meta("dflash.attention.causal") == "true")
        self._inject = ExtBatch(ctx)
        self._block = ExtBatch(ctx)
        self._pos0 = -1

    @property
    def anchor_first(self) -> bool:
        """DSpark drafting from the anchor slot: every block slot is a draft token."""
        return self.dspark and self.from_anchor

    @property
    def longest(self) -> int:
        return self.block_size if self.anchor_first else self.block_size - 1

    def configure(self, *, n_max: int, p_min: float) -> None:
        if self.dspark and p_min > 0.0 and not self.has_confidence:
            raise UsageError(f"{self.ctx.model.path.name} has no confidence head to cut drafts at p-min {p_min}",
                             hint="pass --draft-p-min 0")
        if n_max > self.longest and n_max not in self._warned:
            self._warned.add(n_max)
            self._warn(f"draft-max {n_max} is longer than this {self.method} head's block allows; using {self.longest}")
        self.n_max = min(n_max, self.longest)
        self.p_min = p_min

    def set_active(self, active: bool) -> None:
        for lid in self.layers:
            self.target.extract_layer_inputs(lid, active)

    def begin(self, prompt, sampler=None) -> None:
        self.ctx.kv_clear()
        self._pos0 = -1

    def process(self, tokens: list[int], pos0: int) -> None:
        n = len(tokens)
        if n == 0:
            return
        feats = np.concatenate([self.target.layer_inputs(lid, n) for lid in self.layers], axis=1)
        ctx, inj = self.ctx, self._inject
        for off in range(0, n, ctx.n_ubatch):
            c = min(ctx.n_ubatch, n - off)
            inj.clear()
            for i in range(c):
                inj.add(None, pos0 + off + i, output=False, embd=feats[off + i])
            ctx.process(inj)
        self._pos0 = pos0

    def draft(self, history: list[int], n_max: int) -> list[int]:
        if n_max <= 0 or self.n_max <= 0:
            return []
        ctx, blk = self.ctx, self._block
        pos0 = len(history) - 1
        n_block = self.n_max + (0 if self.anchor_first else 1)
        blk.clear()
        for i in range(n_block):
            blk.add(history[-1] if i == 0 else self.mask, pos0 + i, output=True)
        ctx.process(blk)
        out: list[int] = []
        if self.dspark:
            conf = ctx.hidden(n_block)[:, 0].copy() if self.p_min > 0.0 else None
            for i in range(0 if self.from_anchor else 1, n_block):
                if conf is not None and conf[i] < self.p_min:
                    break
                out.append(int(ctx.logits(i).argmax()))
        else:  # the anchor slot is the last token: the draft is slots 1..
            out = confident_argmax(n_block - 1, lambda i: ctx.logits(i + 1), keep=p_min_rule(self.p_min))
        ctx.kv_keep_until(pos0)  # the block is not context: the target verifies from pos0
        if len(out) < self.n_min:
            return []
        return out[:n_max]

    def accept(self, n_accepted: int) -> None:
        if self._pos0 >= 0:
            self.ctx.kv_keep_until(self._pos0 + 1 + n_accepted)

    def close(self) -> None:
        self._inject.close()
        self._block.close()

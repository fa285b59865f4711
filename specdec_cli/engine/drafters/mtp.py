"""MTP: drafting from the target's own multi-token-prediction (nextn) layers.

Qwen3.5/3.6, DeepSeek V4, GLM, Nemotron-H and Step 3.5 ship one or more extra decoder blocks
after the trunk that predict the token after next from (the next token, the trunk's last
hidden state). There is nothing to download or pair: the target GGUF carries them, and they
run in a second context on the same model (llama.cpp's ``LLAMA_CONTEXT_TYPE_MTP``) whose KV
cache holds only the nextn layers.

Behaviour follows llama.cpp's ``common_speculative_impl_draft_mtp`` (common/speculative.cpp in
llama-cpp-python 0.3.36), so the drafts are the same tokens:

- after every target pass the MTP context evaluates the pass's tokens, each paired with the
  target's final hidden state of the position before it (``h_nextn``), so its cache covers
  every position the target has seen;
- to draft, it evaluates the last token with the hidden state of the position before it, then
  each drafted token with the MTP block's own hidden state of the step before;
- the draft sampler is top-k 10 and the proposal its best candidate; a draft stops at the
  configured length, or early when that candidate's probability falls below ``p_min``;
- with several trained heads (Step 3.5: ``nextn_predict_layers`` > 1) each draft step runs
  the next head ("chained heads"): drafts are at most that many tokens, every head catches up
  on each pass, and each draft step re-evaluates the whole drafted prefix under its head;
- drafted positions are dropped from the MTP cache before the target verifies.

Gemma 4's assistant drafts, which share the target's KV cache (llama.cpp's third mode), are a
separate GGUF and are refused here. One difference from llama.cpp, on purpose: after a restored
checkpoint (a recurrent target that can only be checkpointed) the re-evaluated tokens are
paired with the hidden states of their own positions; llama.cpp pairs the first with the last
row of the rejected pass.
"""

from __future__ import annotations

import time

import numpy as np

from ...errors import UsageError
from ..llama.batch import ExtBatch
from ..llama.context import Context
from .base import Drafter
from .greedy import confident_argmax, gated_rule


class MtpDrafter(Drafter):
    method = "mtp"
    reads_target_states = True
    tracks_every_pass = True

    def __init__(self, target: Context, ctx: Context, *, n_max: int, n_min: int = 0, p_min: float = 0.0):
        """``ctx``: an MTP context on the target's own model (loaded with its nextn layers)."""
        model = target.model
        if not model.mtp_loaded:
            raise UsageError(f"{model.path.name} has no MTP (nextn) layers loaded",
                             hint="use a GGUF converted with its MTP layers, or another method")
        if model.arch == "gemma4-assistant":
            raise UsageError("Gemma 4 assistant drafts share the target's KV cache, which specdec does not drive yet",
                             hint="use llama.cpp's llama-server --spec-type draft-mtp for them")
        self.target = target
        self.ctx = ctx
        self.heads = max(1, model.n_nextn)
        self.chain = self.heads > 1  # one trained head per draft step
        self.n_min = n_min
        self.configure(n_max=n_max, p_min=p_min)
        self.stop_rule = None  # auto's length rule, as for the draft model (base.py)
        self.last_confidences: list[float] = []
        self.process_seconds = 0.0  # catching up after each target pass: auto counts it as draft cost
        self._batch = ExtBatch(ctx)
        self._zeros = np.zeros(model.n_embd, dtype=np.float32)
        self._rows: dict[int, np.ndarray] = {}  # position -> the target's hidden state there
        ctx.output_hidden(True, masked=True)
        self.set_active(True)

    def configure(self, *, n_max: int, p_min: float) -> None:
        # chained heads draft one token per head (llama.cpp clamps n_max the same way)
        self.n_max = min(n_max, self.heads) if self.chain else n_max
        self.p_min = p_min

    def set_active(self, active: bool) -> None:
        self.target.output_hidden(active, masked=False)

    def begin(self, prompt, sampler=None) -> None:
        self.ctx.kv_clear()
        self._rows = {}

    def process(self, tokens: list[int], pos0: int) -> None:
        n = len(tokens)
        if n == 0:
            return
        t0 = time.perf_counter()
        h = self.target.hidden(n)  # all rows of the pass (extraction is unmasked)
        first = self._rows.get(pos0 - 1, self._zeros)  # zeros before the first token, as llama.cpp
        ctx, batch = self.ctx, self._batch
        batch.clear()
        for k, tok in enumerate(tokens):
            batch.add(tok, pos0 + k, output=False, embd=first if k == 0 else h[k - 1])
        for head in range(self.heads if self.chain else 1):
            ctx.kv_keep_until(pos0)  # whatever was drafted or rejected after pos0 goes
            if self.chain:
                ctx.set_nextn_layer(head)
            ctx.process(batch)
        if self.chain:
            ctx.set_nextn_layer(0)
        rows = {pos0 - 1: first}
        rows.update((pos0 + k, h[k].copy()) for k in range(n))
        self._rows = rows
        self.process_seconds += time.perf_counter() - t0

    def draft(self, history: list[int], n_max: int) -> list[int]:
        pos0 = len(history) - 1  # the last token's position: it is not in the target's cache yet
        h0 = self._rows.get(pos0 - 1)
        confs: list[float] = []
        self.last_confidences = confs
        if h0 is None or n_max <= 0:
            return []
        ctx, batch = self.ctx, self._batch
        chain_h = [h0]
        drafted: list[int] = []

        def run(head: int) -> None:
            ctx.kv_keep_until(pos0)
            if self.chain:
                ctx.set_nextn_layer(head)
            ctx.process(batch)

        batch.clear()
        batch.add(history[-1], pos0, output=True, embd=h0)
        run(0)

        def advance(i: int, tok: int) -> None:
            last = batch.size - 1
            h_row = ctx.hidden_row(last).copy()
            drafted.append(tok)
            batch.clear()
            if self.chain:  # the next head re-evaluates the whole prefix in its own layer
                chain_h.append(h_row)
                seq = [history[-1], *drafted]
                for t, (tk, hr) in enumerate(zip(seq, chain_h)):
                    batch.add(tk, pos0 + t, output=t == len(seq) - 1, embd=hr)
                run(i + 1)
            else:
                batch.add(tok, pos0 + i + 1, output=True, embd=h_row)
                ctx.process(batch)

        keep = gated_rule(self.p_min, self.stop_rule, confs)
        try:
            # llama.cpp drafts its configured length and cuts the draft to the budget afterwards
            out = confident_argmax(self.n_max, lambda i: ctx.logits(batch.size - 1), keep=keep, advance=advance)
        finally:
            if self.chain:
                ctx.set_nextn_layer(0)
            ctx.kv_keep_until(pos0)  # the target verifies from here: drop the draft's positions
        if self.stop_rule is None and len(out) < self.n_min:
            return []
        return out[:n_max]

    def close(self) -> None:
        self._batch.close()

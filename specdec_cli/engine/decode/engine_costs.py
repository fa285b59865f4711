"""How an engine knows what its passes cost: measured on this machine, cached per model and
settings (``policy/cost_cache.py``: samples with how busy the machine was), checked again when
stale or when only busy samples stand behind them, and what they decide to load (auto's draft
model only where it could pay, on figures from a quiet machine). A part ``Engine`` owns
(``engine.py``), apart because it is one concept with its own state: the cost model, whether it
is ready, and how busy the machine was while it was measured. What it needs of the engine is
given to it: the target and its settings, and with each measurement a callback that settles
the draft model (given then, not kept, so that engine and costs hold no cycle of references).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ..drafters.auto import break_even, could_pay
from ..llama.context import Context
from ..llama.library import default_threads
from ..llama.model import Model
from ..options import EngineOptions
from ..policy import cost_cache, costmodel
from ..policy.costmodel import CostModel

# Called once the costs are known (``Engine._settle_draft``): auto's draft model loaded, or left
# out where it cannot pay. Returns the draft model's context when one is loaded, so that its
# per-token cost is measured where the costs do not hold it yet.
SettleDraft = Callable[[], Context | None]


class EngineCosts:
    """One engine's cost model and the state of knowing it: calibrated or read from the cache the
    first time it is needed (``ensure``), injected (``set``), saved at the end (``save``)."""

    def __init__(self, costs: CostModel, *, target: Model, target_ctx: Context, options: EngineOptions,
                 draft_path: Path | None, mtp: bool, warn: Callable[[str], None] | None = None):
        """``costs``: the engine's own cost model, which its drafters already hold: figures are
        adopted into it, never a new one put in its place. ``draft_path``: the draft model's
        file, loaded or left out by auto (its measured cost is in the cache entry); ``mtp``:
        whether the target's MTP layers draft."""
        self.model = costs
        self.ready = False  # calibrated, read from the cache, or injected
        self._busy: cost_cache.BusyMeter | None = None  # how busy the machine is, from the first measurement on
        self._target, self._target_ctx, self._options = target, target_ctx, options
        self._draft_path, self._mtp, self._warn = draft_path, mtp, warn

    def key(self, path: Path, ngl: int) -> str:
        """The cache entry of the figures of ``path`` at ``ngl`` GPU layers, with these settings."""
        o = self._options
        extra = f"fa-{o.flash_attn}|k-{o.cache_type_k}|v-{o.cache_type_v}|b{o.n_batch}"
        if self._draft_path is not None:  # loaded, or left out by auto: its measured cost is in this entry
            d = self._draft_path
            extra += f"|draft-{d.name}:{d.stat().st_size}"
        if self._mtp:
            extra += "|mtp"
        if o.n_seq > 1:  # many sequences per pass: their passes cost more per token than one sequence's
            extra += f"|seqs{o.n_seq}" + ("|streams" if o.kv_streams else "")
        return cost_cache.cache_key(path, threads=o.threads or default_threads(), gpu_layers=ngl,
                                    device=cost_cache.device_name(ngl), extra=extra)

    def ensure(self, settle_draft: SettleDraft) -> CostModel:
        """The cost model, calibrated (or read from the cache) the first time it is needed."""
        if self.ready:
            return self.model
        self.ready = True
        self._busy = busy = cost_cache.BusyMeter()
        c = self.model
        tok = max(0, self._target.bos)
        self._curve(cost_cache.load_cached(self.key(self._target.path, self._options.gpu_layers), self._warn), tok,
                    busy)
        if self._options.n_seq > 1:  # how many sequences pay at once is read off sizes up to n_seq; the
            # larger passes (drafts on top, prompts riding along) are timed as the run makes them
            missing = [b for b in costmodel.BATCH_SIZES if b <= self._options.n_seq and b not in c.sizes()]
            for b, sec in costmodel.calibrate(self._target_ctx, tok, missing).items():
                c.observe_pass(b, sec)
        draft_ctx = settle_draft()
        if draft_ctx is not None and "draft" not in c.drafts:
            c.observe_draft("draft", 1, costmodel.calibrate_draft(draft_ctx, tok))
        return c

    def _curve(self, cached: CostModel | None, tok: int, busy: cost_cache.BusyMeter) -> None:
        """The cost curve of target passes: the cached one as it is, checked, or measured anew.
        One sequence: the check would cost as long as a short answer takes; many (a batch, a
        server): it is a fraction of a second of a long run, and the curve learned at their
        depths is checked as before; a curve only busy samples stand behind is checked too."""
        c = self.model
        if cached is not None and self._options.n_seq == 1 and cached.checked_recently() and cached.quiet:
            c.adopt(cached)
            return
        # a stale cached curve is measured again, silently (``--json``'s source says "calibrated")
        fresh = costmodel.recheck(self._target_ctx, tok, cached) if cached is not None else None
        if cached is not None and fresh is not None:
            c.adopt(cached)
            for b, sec in fresh.items():
                c.observe_pass(b, sec)
            c.quiet = cached.quiet  # the check vouches for the curve, not for the draft figures
        else:
            for b, sec in costmodel.calibrate(self._target_ctx, tok).items():
                c.observe_pass(b, sec)
            if cached is not None:
                c.carry_drafts(cached)
                c.quiet = cached.quiet  # the drafts carried are as trustworthy as they were
            c.source = "calibrated"
        c.checked_at = time.time()
        if busy.share() > cost_cache.BUSY_MAX:  # measured beside other work just now
            c.quiet = False

    def set(self, model: CostModel, settle_draft: SettleDraft) -> None:
        """Decide with ``model`` instead of measuring (an injected curve: tests, what-ifs); not cached."""
        self.model.adopt(model)
        self.ready = True
        settle_draft()

    def save(self) -> None:
        """The figures into the cache, with how busy the machine was while they were measured."""
        if self.ready and not self.model.frozen:
            busy = self._busy.share() if self._busy is not None else 0.0
            cost_cache.save_cached(self.key(self._target.path, self._options.gpu_layers), self.model,
                                   self._warn, busy=busy)


def leaves_draft_out(c: CostModel, n_max: int) -> bool:
    """Whether auto leaves its draft model unloaded: only on a figure measured on a quiet machine
    that says it cannot beat plain decoding even at ``MODEL_LIVE_ACCEPT`` per position (on 2 CPU
    cores a 0.5B draft token costs 0.6 of a 1.5B target's step). Loading it anyway cost a second
    and a half before the first token (its load, its cost check) for a model auto never asks."""
    return "draft" in c.drafts and c.quiet and not could_pay(c, "draft", n_max)


def left_out_note(c: CostModel, draft_name: str, n_max: int) -> str:
    """The note that says why the draft model was not loaded, with the figures it rests on."""
    step = c.step_seconds()
    quiet, _total = c.samples
    return (f"the draft {draft_name} is not loaded: on this machine a draft token costs "
            f"{c.draft_seconds('draft') / step:.2f} of a target step "
            f"({_behind(quiet)}), "
            f"and drafting pays only below {break_even(c, n_max) / step:.2f} even at "
            "the acceptance auto hopes for (--method draft forces it; `specdec bench --costs` "
            "shows the figures)")


def _behind(quiet: int) -> str:
    """What a cached draft figure rests on, in the note's words."""
    if quiet == 0:
        return "measured this run"
    return "one quiet measurement" if quiet == 1 else f"the median of {quiet} quiet measurements"

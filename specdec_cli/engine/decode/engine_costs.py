"""How an engine knows what its passes cost: measured on this machine, cached per model and
settings (``policy/cost_cache.py``: samples with how busy the machine was), checked again when
stale or when only busy samples stand behind them, and what they decide to load (auto's draft
model only where it could pay, on figures from a quiet machine). A part of ``Engine``
(``runner.py``), kept apart because it is one concept with its own state: ``costs``, whether
they are ready, and the draft left out.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..drafters.auto import break_even, could_pay
from ..llama.library import default_threads
from ..policy import cost_cache, costmodel
from ..policy.costmodel import CostModel


class EngineCosts:
    def _settle_draft(self) -> None:
        """Auto's draft model, once the costs are known: loaded, unless the curve of this pair on
        this machine says it cannot beat plain decoding even at ``MODEL_LIVE_ACCEPT`` per position
        (on 2 CPU cores a 0.5B draft token costs 0.6 of a 1.5B target's step). Loading it anyway
        cost a second and a half before the first token (its load, its cost check) for a model
        auto never asks. With no measured draft cost yet it loads, and is measured."""
        if not self._draft_pending:
            return
        c = self.costs
        n_max = self.draft_options.draft_max
        # only a figure measured on a quiet machine leaves the draft out; any other is measured again
        if "draft" in c.drafts and c.quiet and not could_pay(c, "draft", n_max):
            if not self.draft_left_out and self.note:
                step = c.step_seconds()
                quiet, total = c.samples
                self.note(f"the draft {self.draft_path.name} is not loaded: on this machine a draft token costs "
                          f"{c.draft_seconds('draft') / step:.2f} of a target step "
                          f"({_behind(quiet)}), "
                          f"and drafting pays only below {break_even(c, n_max) / step:.2f} even at "
                          "the acceptance auto hopes for (--method draft forces it; `specdec bench --costs` "
                          "shows the figures)")
            self.draft_left_out = True  # until costs on which it could pay are set (``set_costs``)
            return
        if "draft" in c.drafts and not c.quiet:
            c.drafts.pop("draft")  # measured while the machine was busy: measured again once loaded
        self._draft_by_name()

    # --- the cost model ----------------------------------------------------------------------
    def _cost_key(self, path: Path, ngl: int) -> str:
        o = self.options
        extra = f"fa-{o.flash_attn}|k-{o.cache_type_k}|v-{o.cache_type_v}|b{o.n_batch}"
        if self.draft_path is not None:  # loaded, or left out by auto: its measured cost is in this entry
            d = self.draft_path
            extra += f"|draft-{d.name}:{d.stat().st_size}"
        if "mtp" in self.drafters:
            extra += "|mtp"
        if o.n_seq > 1:  # many sequences per pass: their passes cost more per token than one sequence's
            extra += f"|seqs{o.n_seq}"
        return cost_cache.cache_key(path, threads=o.threads or default_threads(), gpu_layers=ngl,
                                    device=cost_cache.device_name(ngl), extra=extra)

    def ensure_costs(self) -> CostModel:
        """The cost model, calibrated (or read from the cache) the first time it is needed."""
        if self._costs_ready:
            return self.costs
        self._costs_ready = True
        self._busy = cost_cache.BusyMeter()  # how busy the machine is while this engine measures
        key = self._cost_key(self.target_model.path, self.options.gpu_layers)
        cached = cost_cache.load_cached(key, self.warn)
        c = self.costs
        tok = max(0, self.target_model.bos)
        # one sequence: the check would cost as long as a short answer takes; many (a batch, a
        # server): it is a fraction of a second of a long run, and the curve learned at their
        # depths is checked as before; a curve only busy samples stand behind is checked too
        if cached is not None and self.options.n_seq == 1 and cached.checked_recently() and cached.quiet:
            c.adopt(cached)
        else:
            # a stale cached curve is measured again, silently (``--json``'s source says "calibrated")
            fresh = costmodel.recheck(self.target_ctx, tok, cached) if cached is not None else None
            if fresh is not None:
                c.adopt(cached)
                for b, sec in fresh.items():
                    c.observe_pass(b, sec)
                c.quiet = cached.quiet  # the check vouches for the curve, not for the draft figures
            else:
                for b, sec in costmodel.calibrate(self.target_ctx, tok).items():
                    c.observe_pass(b, sec)
                if cached is not None:
                    c.carry_drafts(cached)
                    c.quiet = cached.quiet  # the drafts carried are as trustworthy as they were
                c.source = "calibrated"
            c.checked_at = time.time()
            if self._busy.share() > cost_cache.BUSY_MAX:  # measured beside other work just now
                c.quiet = False
        if self.options.n_seq > 1:  # how many sequences pay at once is read off sizes up to n_seq; the
            # larger passes (drafts on top, prompts riding along) are timed as the run makes them
            missing = [b for b in costmodel.BATCH_SIZES if b <= self.options.n_seq and b not in c.sizes()]
            for b, sec in costmodel.calibrate(self.target_ctx, tok, missing).items():
                c.observe_pass(b, sec)
        self._settle_draft()
        if self.draft_ctx is not None and "draft" in self.drafters and "draft" not in c.drafts:
            c.observe_draft("draft", 1, costmodel.calibrate_draft(self.draft_ctx, tok))
        return c

    def set_costs(self, model: CostModel) -> None:
        """Decide with ``model`` instead of measuring (an injected curve: tests, what-ifs); not cached."""
        self.costs.adopt(model)
        self._costs_ready = True
        self._settle_draft()

    def save_costs(self) -> None:
        if self._costs_ready and not self.costs.frozen:
            busy = self._busy.share() if self._busy is not None else 0.0
            cost_cache.save_cached(self._cost_key(self.target_model.path, self.options.gpu_layers), self.costs,
                                   self.warn, busy=busy)


def _behind(quiet: int) -> str:
    """What a cached draft figure rests on, in the note's words."""
    if quiet == 0:
        return "measured this run"
    return "one quiet measurement" if quiet == 1 else f"the median of {quiet} quiet measurements"

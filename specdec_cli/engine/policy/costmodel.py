"""What a target pass and a draft step cost on this machine, measured, not assumed.

A verify pass over b tokens costs almost one decode step on a GPU for b up to tens of
tokens, and several steps on a CPU (on 2 cores: 2.1 steps at b=2, 13.7 at b=33). The draft
length that pays follows from this curve, so specdec measures it: a short calibration when
the models load (a few passes at chosen sizes on the empty cache, which is cleared after),
then every real pass of the run, smoothed per batch size. Sizes not seen yet are
interpolated linearly between measured ones and extended past the largest with the last
segment's slope. Draft costs are kept per drafter, as seconds per drafted token.

The curve is cached per model file, thread count, offload, device and sequence count
(``cost_cache.py``: samples with how busy the machine was, their median over the quiet ones),
so the next run starts calibrated. A cached curve is checked when it is read (passes of 1, 4 and 16 tokens): a curve learned while the machine was
busy, or one whose passes were never tried again because they looked dear, would otherwise
keep auto from drafting for good, since a size auto never drafts is never measured again. The
check costs half of what calibrating does (0.65 s for the 1.5B target on 2 cores, as long as
a short answer takes), so for one sequence a curve checked within the last ``RECHECK_AFTER_S``
is trusted as it is: runs in a shell loop pay for the check once, and each run's own passes
still update the curve. The cache still brings the sizes measured at the run's real context
depths and the draft costs.
"""

from __future__ import annotations

import bisect
import time

# about 40 decode steps in all on a 2-core CPU (1.2 s here). 32 is measured, not extrapolated:
# past 16 tokens a pass costs less per token than from 4 to 16 (timed here: 7.6 steps at 16,
# 13.1 at 32, 18.4 at 48), and a line through 4 and 16 put a 33-token pass at 19 steps, which
# kept auto's drafts of a sure copy short where llama.cpp's 48-token ones went faster
CALIBRATION_SIZES = (1, 2, 4, 16, 32)
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)  # one token per sequence: measured up to the sequences that run
SMOOTHING = 0.1  # weight of a new measurement dearer than the running value of its batch size
SMOOTHING_DOWN = 0.3  # ... and of a cheaper one: a size that looks dear is drafted less, so measured less
STALL_CAP = 1.5  # a measurement counts as at most this multiple of the running value (a stall, not a cost)
STEP_SMOOTHING = 0.2  # weight of a decode step in the running step, which scales the whole curve
PAD_GAIN = 0.03  # a pass is padded to a larger measured size only when that saves this share or more
RIDE_SMOOTHING = 0.3  # weight of a new pass in the running ratio of riding to running apart
CHECK_SIZES = (1, 4, 16)  # the cached curve is checked at one step and at these pass sizes
CHECK_TOLERANCE = 0.25  # relative disagreement of a pass's cost in steps that discards the cached curve
# a cached quiet curve calibrated or checked this recently is used without a check (one sequence).
# An hour made a user's first prompt of each hour 0.4-0.6 s slower than --no-draft (runs of about
# 10 s); the run's own passes keep updating the curve, and a curve from busy samples is checked anyway
RECHECK_AFTER_S = 86400.0


class CostModel:
    """Seconds per target pass by batch size, and seconds per draft token by drafter."""

    def __init__(self, passes: dict[int, float] | None = None, drafts: dict[str, float] | None = None,
                 *, frozen: bool = False):
        """``frozen``: ignore measurements (an injected curve, for tests and what-ifs)."""
        self._pass: dict[int, float] = dict(passes or {})  # seconds, to be multiplied by _scale
        self._sizes = sorted(self._pass)
        self._scale = 1.0  # how the decode step has moved since (``_follow_step``)
        self.drafts: dict[str, float] = dict(drafts or {})
        self.frozen = frozen
        self.source = "injected" if frozen else ("calibrated" if passes else "empty")
        # seconds to copy the target's state out (per drafted pass) and back (per partial
        # acceptance); None unless the target's memory can only be checkpointed (verify/rollback.py)
        self.checkpoint: dict[str, float] | None = None
        self.checked_at: float | None = None  # time.time() when the curve was last calibrated or checked
        # whether the figures were measured on a quiet machine (``cost_cache``): a curve read back
        # from busy samples only is measured again rather than trusted; (quiet, all) samples behind it
        self.quiet = True
        self.samples: tuple[int, int] = (0, 0)
        # a pass carrying decoding rows and prompt chunks together, against the curve's price of
        # the two apart: running, per size class (``ride_class``), absent until one is seen
        # (``observe_ride``); not cached, it moves with the depth of the sequences
        self.ride: dict[int, float] = {}

    def adopt(self, other: CostModel) -> None:
        """Take ``other``'s tables (a cached model), keeping this object shared with its users."""
        self._pass, self._sizes, self.drafts = dict(other._pass), list(other._sizes), dict(other.drafts)
        self._scale = other._scale
        self.source, self.frozen, self.checked_at = other.source, other.frozen, other.checked_at
        self.quiet, self.samples = other.quiet, other.samples

    def carry_drafts(self, old: CostModel) -> None:
        """Draft costs measured beside ``old``'s curve, for this curve measured again: in ``old``'s
        multiples of a step (draft and target run on the same machine, so a busier or quieter one
        moves both). Dropped instead, they loaded a draft that auto had ruled out only to time it
        once more, each time a shared machine's load moved the curve past ``CHECK_TOLERANCE``."""
        ratio = self.step_seconds() / old.step_seconds()  # a cached curve's step is positive (from_dict)
        self.drafts = {k: v * ratio for k, v in old.drafts.items()} | self.drafts

    # --- measurements ------------------------------------------------------------------------
    def observe_pass(self, n_tokens: int, seconds: float) -> None:
        if self.frozen:
            return
        old = self._pass.get(n_tokens)
        if old is None:
            if self._sizes:  # a new size starts from what it measured, a stall bounded by what its neighbours say
                seconds = min(seconds, STALL_CAP * self.pass_seconds(n_tokens))
            self._pass[n_tokens] = seconds / self._scale
            bisect.insort(self._sizes, n_tokens)
        elif n_tokens == 1:
            self._follow_step(old * self._scale, seconds)
        else:
            self._pass[n_tokens] = _smoothed(old * self._scale, seconds) / self._scale

    def observe_ride(self, seconds: float, n_prompt: int, n_decoding: int) -> None:
        """A pass that read ``n_prompt`` prompt tokens and carried ``n_decoding`` rows of decoding
        sequences. It is timed against the curve's price of the two as passes of their own, and
        kept off the curve: on a CPU such a pass can cost more than the two apart. llama.cpp's
        CPU attention takes a pass of 64 rows or more in tiles of 64 rows, and a tile holding
        rows of several sequences is multiplied through all of their cells; in a unified cache
        of 6 sequences at a depth of 800, a 128-token prompt chunk and 5 decoding rows took
        2.35 s in one pass and 1.69 s in two (a 448-token chunk: 5.94 s against 5.59 s), while
        near the start of the sequences riding is the cheaper of the two."""
        if self.frozen or n_prompt <= 0 or n_decoding <= 0:
            return
        ratio = seconds / (self.pass_seconds(n_prompt) + self.pass_seconds(n_decoding))
        c = ride_class(n_prompt + n_decoding)
        old = self.ride.get(c)
        self.ride[c] = ratio if old is None else old + RIDE_SMOOTHING * (ratio - old)

    def rides(self, n_tokens: int) -> bool:
        """Whether decoding rows should ride in a pass of about ``n_tokens`` that reads prompts:
        cheaper than apart, as measured so far at that size class, or not measured yet."""
        ratio = self.ride.get(ride_class(n_tokens))
        return ratio is None or ratio < 1.0

    def _follow_step(self, old: float, seconds: float) -> None:
        """A decode step moves the whole curve with it. Every pass grows with the context's depth
        (on 2 cores a step took 107 ms at 250 tokens, 160 ms at 1,500), but each size is measured
        at whatever depth it was last drafted at, and the steps far more often: smoothed one by
        one, a curve mixes depths, and on this project's machine it put a 2-token pass at 2.5
        steps (1.7 at any one depth). Passes cost nearly the same multiple of a step at every
        depth (timed at 0, 300 and 1,000 tokens: 1.6-1.8 at 2, 2.8-3.2 at 4, 8.6-9.7 at 16), so
        the multiples are kept and the step is followed."""
        new = old + STEP_SMOOTHING * (min(seconds, STALL_CAP * old) - old)
        self._scale *= new / old  # one product per step, whatever the number of sizes

    def observe_checkpoint(self, what: str, seconds: float) -> None:
        """One state copy, ``what`` = "save" or "restore", of a checkpointed target."""
        if self.checkpoint is None or self.frozen:
            return
        old = self.checkpoint.get(what)
        self.checkpoint[what] = seconds if old is None else _smoothed(old, seconds)

    def observe_draft(self, drafter: str, n_tokens: int, seconds: float) -> None:
        if n_tokens <= 0 or self.frozen:
            return
        per = seconds / n_tokens
        old = self.drafts.get(drafter)
        self.drafts[drafter] = per if old is None else _smoothed(old, per)

    def sizes(self) -> list[int]:
        """The batch sizes measured so far."""
        return list(self._sizes)

    # --- estimates ---------------------------------------------------------------------------
    def pass_seconds(self, n_tokens: int) -> float:
        """Estimated seconds of one target pass carrying ``n_tokens`` tokens: interpolated between
        the sizes measured, or what a larger measured size costs where that is ``PAD_GAIN``
        cheaper, since the pass can be run at that size (``pass_size``; the engine pads it).
        ggml's x86 kernels for repacked Q4_K weights take the batch in blocks of 16 rows and
        the rest in slower blocks of 4 (``arch/x86/repack.cpp``): on this project's CPU a pass
        of 16 tokens cost 8.5 decode steps at a depth of 300 and one of 15 cost 10.3 (12
        sequences with 4 more tokens: 297 ms, as with none; with 1 to 3 more: 319-350 ms). On
        a GPU the curve is flat and nothing is padded. The estimate is what the pass the
        engine runs costs."""
        return self._scale * self._cheapest(n_tokens)[1]

    def pass_size(self, n_tokens: int) -> int:
        """The size to run a pass of ``n_tokens`` at: ``n_tokens``, or a larger measured size that
        costs at least ``PAD_GAIN`` less (tokens whose rows nobody reads fill it)."""
        return self._cheapest(n_tokens)[0]

    def _cheapest(self, n_tokens: int) -> tuple[int, float]:
        """(size, unscaled seconds): ``n_tokens`` at its interpolated cost, or the cheapest
        measured size above it where that is ``PAD_GAIN`` cheaper."""
        own = self._interpolated(n_tokens)
        sizes = self._sizes
        best, cost = n_tokens, own
        for b in sizes[bisect.bisect_right(sizes, n_tokens):]:
            if self._pass[b] < cost and self._pass[b] < own * (1 - PAD_GAIN):
                best, cost = b, self._pass[b]
        return best, cost

    def _interpolated(self, n_tokens: int) -> float:
        p, sizes = self._pass, self._sizes
        if not sizes:
            return float(n_tokens)  # uncalibrated: linear, so nothing looks cheap
        i = bisect.bisect_left(sizes, n_tokens)
        if i < len(sizes) and sizes[i] == n_tokens:
            return p[n_tokens]
        if i == 0:
            return p[sizes[0]]
        if i < len(sizes):
            lo, hi = sizes[i - 1], sizes[i]
            return p[lo] + (p[hi] - p[lo]) * (n_tokens - lo) / (hi - lo)
        if len(sizes) == 1:
            return p[sizes[0]] * n_tokens / sizes[0]
        # past the largest size: the last segment's slope, rising from the dearest size measured
        # (a noisy last point must not make long drafts look free)
        lo, hi = sizes[-2], sizes[-1]
        slope = max(0.0, (p[hi] - p[lo]) / (hi - lo))
        return max(p.values()) + slope * (n_tokens - hi)

    def draft_seconds(self, drafter: str) -> float:
        return self.drafts.get(drafter, 0.0)

    def step_seconds(self) -> float:
        return self.pass_seconds(1)

    def rejection_seconds(self, p_all_kept: float, expected: float) -> float:
        """What a drafted pass adds on a checkpointed target: the copy before it, and with
        probability 1 - ``p_all_kept`` the copy back plus the next pass re-evaluating the kept
        tokens (``expected`` - 1 of them, and the last token) instead of one plain step."""
        ck = self.checkpoint
        if ck is None:
            return 0.0
        replay = self.pass_seconds(max(1, round(expected)) + 1) - self.pass_seconds(1)
        return ck.get("save", 0.0) + (1.0 - p_all_kept) * (ck.get("restore", 0.0) + replay)

    def curve(self, sizes: list[int] | None = None) -> list[tuple[int, float, float]]:
        """(batch size, seconds, multiples of one decode step) for reports."""
        one = self.step_seconds() or 1.0
        return [(b, self.pass_seconds(b), self.pass_seconds(b) / one) for b in (sizes or self._sizes)]

    def to_dict(self) -> dict:
        out: dict[str, object] = {
            "source": self.source,
            "pass_ms": {str(b): round(s * self._scale * 1e3, 3) for b, s in sorted(self._pass.items())},
            "draft_ms_per_token": {k: round(v * 1e3, 3) for k, v in self.drafts.items()},
        }
        if self.checked_at is not None:
            out["checked_at"] = round(self.checked_at)
        if self.checkpoint is not None:
            out["checkpoint_ms"] = {k: round(v * 1e3, 3) for k, v in self.checkpoint.items()}
        return out

    @classmethod
    def from_dict(cls, d: dict) -> CostModel:
        passes = {int(b): float(ms) / 1e3 for b, ms in d["pass_ms"].items()}
        drafts = {str(k): float(ms) / 1e3 for k, ms in d.get("draft_ms_per_token", {}).items()}
        if not passes or any(b < 1 or not s > 0 for b, s in passes.items()) or any(not v >= 0 for v in drafts.values()):
            raise ValueError("non-positive or empty cost table")
        model = cls(passes, drafts)
        checked = d.get("checked_at")
        model.checked_at = float(checked) if isinstance(checked, (int, float)) else None
        return model

    def checked_recently(self) -> bool:
        """Whether the curve was calibrated or checked within ``RECHECK_AFTER_S`` (and not in the
        future, but for a second of rounding: a clock set back would keep a curve for good)."""
        if self.checked_at is None:
            return False
        age = time.time() - self.checked_at
        return -1.0 <= age < RECHECK_AFTER_S


def ride_class(n_tokens: int) -> int:
    """The size class a pass's riding is measured in: powers of two (a pass below a CPU's tile
    of rows rides cheaply, a larger one may not; a GPU draws its own lines)."""
    return max(1, n_tokens).bit_length()


def _smoothed(old: float, seconds: float) -> float:
    """The running value after one more measurement. Asymmetric, because the errors are: a cost
    that looks too low is drafted at, so measured again and corrected; one that looks too high
    is avoided, so rarely measured again. A stall (the OS, another process) therefore moves it
    up a little, and the few measurements a dear-looking size still gets bring it down fast.
    (On a curve smoothed symmetrically, a few stalls at one size kept auto from drafting that
    size, and every larger one, for good.)"""
    if seconds >= old:
        return old + SMOOTHING * (min(seconds, STALL_CAP * old) - old)
    return old + SMOOTHING_DOWN * (seconds - old)


def calibrate(ctx, token: int, sizes=CALIBRATION_SIZES) -> dict[int, float]:
    """Time one pass at each size on ``ctx``'s empty cache (cleared before and after)."""
    sizes = [b for b in sizes if b <= ctx.params.n_outputs_max]
    out: dict[int, float] = {}
    ctx.kv_clear()
    # warm-up at the largest size: the compute buffers grow to it once, so no timed pass pays for
    # an allocation (warmed with one token, each larger size was timed with its own: 16 tokens
    # came out at 8.9 steps against 7.7 timed again)
    ctx.decode([token] * max(sizes, default=1), 0, outputs="all")
    for b in sizes:
        ctx.kv_clear()
        t0 = time.perf_counter()
        ctx.decode([token] * b, 0, outputs="all")
        out[b] = time.perf_counter() - t0
    ctx.kv_clear()
    return out


def still_holds(model: CostModel, fresh: dict[int, float]) -> bool:
    """Whether a cached curve agrees with passes timed now (``calibrate(ctx, tok, CHECK_SIZES)``):
    each pass's cost in decode steps within ``CHECK_TOLERANCE``. Only ratios are compared:
    the cached step was learned at the run's real context depths, the fresh one on the empty
    cache, and a uniformly slower machine changes no decision (every step the run takes
    re-measures it)."""
    one = fresh.get(1)
    if not one:
        return True
    for b, sec in fresh.items():
        old = model.pass_seconds(b) / model.pass_seconds(1)
        if abs(sec / one - old) > CHECK_TOLERANCE * old:
            return False
    return True


def recheck(ctx, token: int, cached: CostModel) -> dict[int, float] | None:
    """Passes of ``CHECK_SIZES`` tokens timed now on ``ctx``, when ``cached`` still holds against
    them (timed once more before giving up, to tell a stall from a change); None when the
    cached curve must be measured again. The long pass is checked too: a stale cost there is
    what keeps long copies from being drafted."""
    fresh = calibrate(ctx, token, CHECK_SIZES)
    if not still_holds(cached, fresh):
        again = calibrate(ctx, token, CHECK_SIZES)
        fresh = {b: min(sec, again.get(b, sec)) for b, sec in fresh.items()}
    return fresh if still_holds(cached, fresh) else None


def calibrate_draft(ctx, token: int, n: int = 8) -> float:
    """Seconds per one-token draft decode on ``ctx`` (cleared before and after): the median of
    ``n`` decodes after a warm-up. Two decodes, timed together right after the model loaded,
    put the 0.5B draft at 0.60 of a target step where its drafting in ``specdec demo`` cost 0.43."""
    ctx.kv_clear()
    ctx.decode([token] * 4, 0, outputs="last")  # warm-up: buffers sized, weights paged in
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        ctx.decode([token], 4 + i, outputs="last")
        times.append(time.perf_counter() - t0)
    ctx.kv_clear()
    return sorted(times)[len(times) // 2]

"""Where a pass's time goes: the engine's own host time around ``llama_decode``, by stage.

Speculation on a CPU wins 10-40% where it copies, and every millisecond the engine spends
between passes comes out of that margin; a server that loses to llama-server with nothing
drafted loses it there. ``PassProfile`` adds up wall time per stage of the scheduler's step
(and of the server's loop around it), so ``run --batch --profile`` and ``serve --profile``
can say, per pass and as a share, what the host does while the model is not running. Off, the
scheduler holds ``NO_PROFILE``, whose stages cost a shared ``nullcontext``.

The stages, in the order a pass meets them (``STAGES``); ``llama_decode`` is the time inside
the call (``Context.busy_seconds``), ``batch fill`` the rest of ``decode_many`` (writing the
token batch), and ``unaccounted`` what a step took outside every named stage.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

STAGES = (
    "intake",  # the server's loop: requests handed over from the HTTP thread
    "admission",  # cancelled jobs dropped, prompts matched to cached prefixes and admitted
    "drafting",  # proposers (suffix index, edits, n-gram lookup) and the draft model's passes
    "cost policy",  # the pass plan, its size, the curve's observations
    "masks",  # a grammar's masks along each draft
    "layout",  # the pass's tokens, positions, sequences and output rows
    "batch fill",  # the tokens written into llama.cpp's batch
    "llama_decode",  # the model's pass (synchronized on a GPU)
    "verify",  # logits rows read, sampled and compared with the drafts; rejected cells taken back
    "learn",  # what was kept, into the drafters' calibration and the figures
    "emit",  # kept tokens cut at budget and end, the grammar advanced, detokenized, stop strings, streamed
    "finish",  # a job's end: its held text, its index, its result
    "prompt cache",  # a finished sequence's cells copied out for the prompt cache (written to disk apart)
    "answer",  # the server's loop: results handed back to the HTTP thread
)


class PassProfile:
    """Seconds per stage, passes and the sequences they carried, for one run or one server."""

    enabled = True

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self.step_seconds = 0.0  # wall time of the steps (and the server loop's own stages)
        self.passes = 0
        self.seq_passes = 0  # decoding sequences summed over passes
        self.rows = 0  # tokens the passes carried
        self._inner: list[float] = []  # per open stage, the seconds its inner stages took (counted there)

    @contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        """A stage's own time: a stage opened inside it, or added to it, counts there and not here."""
        self._inner.append(0.0)
        t = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t
            self.seconds[name] += dt - self._inner.pop()
            if self._inner:
                self._inner[-1] += dt

    def stage(self, name: str) -> AbstractContextManager[None]:
        return self._timed(name)

    def add(self, name: str, seconds: float) -> None:
        """``seconds`` measured apart (inside an open stage: taken out of that stage's own)."""
        self.seconds[name] += seconds
        if self._inner:
            self._inner[-1] += seconds

    @contextmanager
    def _outside(self, name: str) -> Iterator[None]:
        t = time.perf_counter()
        with self._timed(name):
            yield
        self.step_seconds += time.perf_counter() - t

    def outside_step(self, name: str) -> AbstractContextManager[None]:
        """A stage of the loop that drives the steps (the server's): its time counts as the steps' too."""
        return self._outside(name)

    def count_pass(self, n_seqs: int, n_rows: int) -> None:
        self.passes += 1
        self.seq_passes += n_seqs
        self.rows += n_rows

    def add_step(self, seconds: float) -> None:
        self.step_seconds += seconds

    def to_dict(self) -> dict:
        """Every stage in ms per pass and as a share of the steps' wall time."""
        per = 1000.0 / max(1, self.passes)
        total = max(self.step_seconds, 1e-9)
        named = sum(self.seconds.values())
        stages = {**self.seconds, "unaccounted": max(0.0, self.step_seconds - named)}
        return {
            "passes": self.passes,
            "sequences_per_pass": round(self.seq_passes / max(1, self.passes), 2),
            "rows_per_pass": round(self.rows / max(1, self.passes), 2),
            "step_seconds": round(self.step_seconds, 3),
            "host_share": round(1.0 - self.seconds["llama_decode"] / total, 4),
            "stages": {k: {"ms_per_pass": round(v * per, 3), "share": round(v / total, 4)}
                       for k, v in stages.items()},
        }

    def lines(self) -> list[str]:
        """The table, for stderr."""
        d = self.to_dict()
        out = [f"profile: {d['passes']} passes, {d['sequences_per_pass']} sequences and {d['rows_per_pass']} "
               f"rows a pass, {d['step_seconds']:.2f} s in steps, {d['host_share']:.1%} of it outside llama_decode"]
        out += [f"  {name:<13} {v['ms_per_pass']:9.3f} ms/pass {v['share']:7.1%}" for name, v in d["stages"].items()]
        return out


class NoProfile(PassProfile):
    """Profiling off: every stage a shared no-op context, nothing added."""

    enabled = False
    _NOTHING: AbstractContextManager[None] = nullcontext()

    def stage(self, name: str) -> AbstractContextManager[None]:
        return self._NOTHING

    def add(self, name: str, seconds: float) -> None:
        pass

    def count_pass(self, n_seqs: int, n_rows: int) -> None:
        pass

    def add_step(self, seconds: float) -> None:
        pass

    def outside_step(self, name: str) -> AbstractContextManager[None]:
        return self._NOTHING


NO_PROFILE = NoProfile()

"""``bench --parallel 1,2,4,8``: a scenario's prompts as one batch, at each count of sequences decoded
at once, with speculation (auto) and without, for throughput (generated tokens per second of the
whole batch, model load excluded).

Each repeat runs every (count, speculation) system once, in an order reversed every other
repeat, so drift of a noisy machine touches all of them alike; ratios are taken within a
repeat. One at a time is ``run --parallel 1``'s path (one generation after another); more is
the scheduler's (``engine/decode/scheduler.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from ..engine.decode.engine import Engine, GenOptions
from ..engine.decode.scheduler import Job


@dataclass
class Run:
    scenario: str
    repeat: int
    n_parallel: int
    speculation: bool
    n_generated: int
    seconds: float
    mean_sequences: float | None  # per target pass (1 one at a time)
    steps_by_drafter: dict

    @property
    def tokens_per_second(self) -> float:
        return self.n_generated / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "tokens_per_second": self.tokens_per_second}


def run_throughput(engine: Engine, scenarios: dict[str, list[list[int]]], parallels: list[int], *, repeats: int,
                   gen: GenOptions, on_run: Callable[[Run], None] | None = None) -> list[Run]:
    """Every (scenario, repeat, count, speculation); ``scenarios`` holds each prompt's tokens."""
    systems = [(n, spec) for n in parallels for spec in (False, True)]
    first = next(iter(scenarios.values()))[0]
    engine.generate(first, replace(gen, max_tokens=8), use_draft=False)  # warm-up: caches, thread pools
    # auto's cost check (and the passes it times for many sequences) before any batch is timed: in
    # the first auto batch it cost up to a sixth of the batch's time (0.84x against 0.93-0.99x)
    engine.ensure_costs()
    runs: list[Run] = []
    for scenario, prompts in scenarios.items():
        for rep in range(repeats):
            for n, spec in (systems if rep % 2 == 0 else systems[::-1]):
                run = _one(engine, scenario, prompts, n, spec, rep, gen)
                runs.append(run)
                if on_run is not None:
                    on_run(run)
    return runs


def _one(engine: Engine, scenario: str, prompts: list[list[int]], n: int, spec: bool, rep: int,
         gen: GenOptions) -> Run:
    t0 = time.perf_counter()
    generated, by = 0, {}
    if n == 1:
        for tokens in prompts:
            res = engine.generate(tokens, gen, use_draft=spec, method="auto" if spec else None)
            generated += res.stats.n_generated
            for k, v in res.stats.steps_by_drafter.items():
                by[k] = by.get(k, 0) + v
        mean = 1.0
    else:
        jobs = [Job(i, tokens) for i, tokens in enumerate(prompts)]
        for _job, res in engine.run_many(jobs, gen, n_parallel=n, use_draft=spec, method="auto" if spec else None):
            generated += res.stats.n_generated
        stats = engine.last_run
        by, mean = dict(stats.by_drafter), stats.mean_sequences
    return Run(scenario, rep, n, spec, generated, time.perf_counter() - t0, mean, by)


def summarize(runs: list[Run]) -> list[dict]:
    """Per scenario and count: median tokens/s with and without speculation, auto against plain at
    that count, and each against plain decoding one at a time (medians of per-repeat ratios)."""
    rows = []
    for scenario in dict.fromkeys(r.scenario for r in runs):
        mine = [r for r in runs if r.scenario == scenario]
        base = {r.repeat: r.tokens_per_second for r in mine if r.n_parallel == 1 and not r.speculation}
        for n in sorted({r.n_parallel for r in mine}):
            plain = {r.repeat: r.tokens_per_second for r in mine if r.n_parallel == n and not r.speculation}
            auto = {r.repeat: r for r in mine if r.n_parallel == n and r.speculation}
            rows.append({
                "scenario": scenario, "n_parallel": n,
                "plain_tokens_per_second": _median(list(plain.values())),
                "auto_tokens_per_second": _median([r.tokens_per_second for r in auto.values()]),
                "auto_vs_plain": _median([auto[k].tokens_per_second / plain[k] for k in auto if plain.get(k)]),
                "plain_vs_one_at_a_time": _median([plain[k] / base[k] for k in plain if base.get(k)]),
                "auto_vs_one_at_a_time": _median([auto[k].tokens_per_second / base[k] for k in auto if base.get(k)]),
                "mean_sequences_per_pass": _median([r.mean_sequences or 0.0 for r in auto.values()]),
            })
    return rows


def print_table(rows: list[dict], out) -> None:
    from rich.table import Table

    table = Table(title="throughput: the scenario's prompts as one batch (tokens per second of the batch)",
                  box=None, header_style="bold", title_justify="left")
    for col in ("scenario", "at once", "plain tok/s", "auto tok/s", "auto/plain", "plain vs 1", "auto vs 1",
                "seq/pass"):
        table.add_column(col, justify="left" if col == "scenario" else "right", no_wrap=True)
    for r in rows:
        def x(v):
            return "-" if v is None else f"{v:.2f}x"

        table.add_row(r["scenario"], str(r["n_parallel"]), f"{r['plain_tokens_per_second'] or 0:.2f}",
                      f"{r['auto_tokens_per_second'] or 0:.2f}", x(r["auto_vs_plain"]), x(r["plain_vs_one_at_a_time"]),
                      x(r["auto_vs_one_at_a_time"]), f"{r['mean_sequences_per_pass'] or 0:.2f}")
    out.print(table)


def _median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2

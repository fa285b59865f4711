"""Turning bench samples into speedups, tables and a recommendation that includes "no draft".

Speedup is a ratio of decode tokens/s taken within one (prompt, repeat) group, where the
target alone and every setting ran back to back; a scenario's speedup is the median of
those ratios, with their min and max as the spread. The recommendation for a scenario is
its fastest setting, the target alone included. The overall recommendation is the setting
with the best geometric-mean speedup among those that are at least ``FLOOR`` times as fast
as the target alone on every scenario measured; when no draft setting manages that, it is
"no draft".
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from .runner import BASELINE, Config, Sample

FLOOR = 0.98  # a stored setting must never make any scenario slower than this


@dataclass
class Row:
    scenario: str
    config: Config
    tokens_per_second: float  # median decode tokens/s
    speedup: float  # median ratio to the target alone
    speedup_min: float
    speedup_max: float
    acceptance_rate: float | None
    tokens_per_pass: float | None
    first_token_seconds: float | None
    overhead_fraction: float | None
    n: int
    passes: float | None = None  # median target passes per generation
    restores: float | None = None  # median checkpoint restores per generation

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["config"] = self.config.to_dict()
        return d


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(samples: list[Sample]) -> list[Row]:
    """One row per (scenario, config), plus the scenario "overall" across all of them."""
    base = {(s.scenario, s.prompt_id, s.repeat): s for s in samples if not s.config.use_draft}
    groups: dict[tuple[str, Config], list[tuple[Sample, float]]] = defaultdict(list)
    for s in samples:
        b = base.get((s.scenario, s.prompt_id, s.repeat))
        if b is None or not b.decode_tokens_per_second or not s.decode_tokens_per_second:
            continue
        ratio = s.decode_tokens_per_second / b.decode_tokens_per_second
        groups[(s.scenario, s.config)].append((s, ratio))
        groups[("overall", s.config)].append((s, ratio))
    rows = []
    for (scenario, cfg), pairs in groups.items():
        ss, ratios = [p[0] for p in pairs], [p[1] for p in pairs]
        rows.append(
            Row(
                scenario=scenario,
                config=cfg,
                tokens_per_second=_median(s.decode_tokens_per_second for s in ss),
                speedup=statistics.median(ratios),
                speedup_min=min(ratios),
                speedup_max=max(ratios),
                acceptance_rate=_median(s.acceptance_rate for s in ss) if cfg.use_draft else None,
                tokens_per_pass=_median(s.tokens_per_pass for s in ss),
                first_token_seconds=_median(s.first_token_seconds for s in ss),
                overhead_fraction=_median(s.overhead_fraction for s in ss),
                n=len(ss),
                passes=_median(s.n_target_passes for s in ss),
                restores=_median(s.n_restores for s in ss),
            )
        )
    order = {c: i for i, c in enumerate(dict.fromkeys(s.config for s in samples))}
    scen = list(dict.fromkeys(s.scenario for s in samples)) + ["overall"]
    rows.sort(key=lambda r: (scen.index(r.scenario), order[r.config]))
    return rows


def recommend(rows: list[Row]) -> dict:
    """Fastest setting per scenario, and the one setting safe to store for every scenario."""
    per_scenario = {}
    by_scenario: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r.scenario != "overall":
            by_scenario[r.scenario].append(r)
    for scenario, rs in by_scenario.items():
        best = max(rs, key=lambda r: r.speedup)
        per_scenario[scenario] = {**best.config.to_dict(), "speedup": best.speedup}
    configs = {r.config for r in rows if r.config.use_draft}
    best_cfg, best_score = BASELINE, 1.0
    for cfg in configs:
        speedups = [r.speedup for r in rows if r.config == cfg and r.scenario != "overall"]
        if not speedups or min(speedups) < FLOOR:
            continue
        score = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
        if score > best_score:
            best_cfg, best_score = cfg, score
    return {"overall": {**best_cfg.to_dict(), "speedup": best_score}, "per_scenario": per_scenario, "floor": FLOOR}


def print_tables(rows: list[Row], rec: dict, console) -> None:
    from rich.table import Table

    scenarios = list(dict.fromkeys(r.scenario for r in rows))
    restored = any(r.restores for r in rows)  # a checkpointed target: show what its rejections cost
    for scenario in scenarios:
        table = Table(title=scenario, box=None, header_style="bold", title_justify="left")
        table.add_column("setting", overflow="fold", min_width=12)
        cols = ("tok/s", "speedup", "spread", "accept", "tok/pass", "TTFT s") + (("restored",) if restored else ())
        for col in cols:
            table.add_column(col, justify="right", no_wrap=True)
        for r in (r for r in rows if r.scenario == scenario):
            cells = [
                r.config.label,
                f"{r.tokens_per_second:.2f}",
                f"{r.speedup:.2f}x",
                f"{r.speedup_min:.2f}-{r.speedup_max:.2f}",
                "-" if r.acceptance_rate is None else f"{100 * r.acceptance_rate:.0f}%",
                "-" if r.tokens_per_pass is None else f"{r.tokens_per_pass:.2f}",
                "-" if r.first_token_seconds is None else f"{r.first_token_seconds:.2f}",
            ]
            if restored:  # checkpoint restores per generation, of its target passes (medians)
                cells.append(f"{r.restores:.0f}/{r.passes:.0f}")
            table.add_row(*cells)
        console.print(table)
        best = rec["per_scenario"].get(scenario)
        if best:
            console.print(f"  fastest: {best['label']} ({best['speedup']:.2f}x)", markup=False)
    o = rec["overall"]
    console.print(
        f"recommended for every scenario: {o['label']} ({o['speedup']:.2f}x geometric mean; "
        f"no scenario below {rec['floor']:.2f}x)",
        markup=False,
    )

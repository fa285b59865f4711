"""Charts of a bench run (needs the ``plot`` extra: ``pip install 'specdec[plot]'``).

Two panels: decode tokens/s with the draft off and on (the recommended setting of each
scenario) per scenario, and the overall speedup against draft length, one line per p-min.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .report import Row


def pyplot(path: Path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib", hint="pip install 'specdec[plot]'") from None
    if path.suffix.lower() not in (".png", ".svg"):
        raise UsageError(f"--plot takes a .png or .svg file, not {path.name}")
    return plt


def costs_path(path: Path) -> Path:
    """Where the cost curve goes beside the main plot: NAME-costs.EXT."""
    return path.with_name(f"{path.stem}-costs{path.suffix}")


def plot_costs(costs, path: Path) -> Path:
    """The measured target pass cost by batch size, beside ``path`` as NAME-costs.EXT."""
    plt = pyplot(path)
    out = costs_path(path)
    sizes = list(range(1, 34))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(sizes, [s for _, _, s in costs.curve(sizes)], label="estimate (interpolated)")
    measured = costs.curve()
    ax.plot([b for b, _, _ in measured], [s for _, _, s in measured], "o", label="measured sizes")
    ax.plot(sizes, sizes, "--", color="grey", linewidth=1, label="linear (b decode steps)")
    ax.set_xlabel("tokens in one target pass")
    ax.set_ylabel("cost, in decode steps")
    ax.set_title(f"one decode step: {costs.step_seconds() * 1e3:.1f} ms")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def plot(rows: list[Row], rec: dict, path: Path) -> Path:
    plt = pyplot(path)
    scenarios = [s for s in dict.fromkeys(r.scenario for r in rows) if s != "overall"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))

    off = [next(r.tokens_per_second for r in rows if r.scenario == s and not r.config.use_draft) for s in scenarios]
    on = []
    for s in scenarios:
        drafted = [r for r in rows if r.scenario == s and r.config.use_draft]
        on.append(max(drafted, key=lambda r: r.speedup).tokens_per_second if drafted else 0.0)
    x = range(len(scenarios))
    ax1.bar([i - 0.2 for i in x], off, width=0.4, label="target alone")
    ax1.bar([i + 0.2 for i in x], on, width=0.4, label="with draft (best setting)")
    ax1.set_xticks(list(x), scenarios, rotation=20)
    ax1.set_ylabel("decode tokens/s")
    ax1.legend()

    overall = [r for r in rows if r.scenario == "overall" and r.config.use_draft]
    lines: dict[str, list] = {}
    for r in overall:
        c = r.config
        key = "auto" if c.method == "auto" else "n-gram" if c.method == "ngram" else f"p-min {c.p_min:g}" + ("" if c.verify == "auto" else f", {c.verify}")
        lines.setdefault(key, []).append((c.draft_max, r.speedup))
    for key, pts in sorted(lines.items()):
        pts.sort()
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=key)
    ax2.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax2.set_xlabel("draft-max")
    ax2.set_ylabel("speedup vs target alone (median)")
    ax2.legend()
    fig.suptitle(f"recommended: {rec['overall']['label']}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

"""Performance curves of a comparison: best so far relative to the optimum, per evaluation.

One PNG per workload and one overview with every workload: for each strategy the median
over seeds (line; each next strategy thinner and in another dash, so identical curves both show) and the 25-75 % band, against random search's exact expectation
(dashed), with the 2 % and 5 % marks and the score's budget, each labelled on the plot.
The y axis is logarithmic with a floor (``FLOOR_PCT``): a strategy at the optimum sits on
the floor, visibly, instead of vanishing below a symlog axis's zero. The overview has one
legend for all its panels. Drawn with matplotlib's Agg backend (no display).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from flashtune.experiments.evaluation.compare import RunResult, relative_curves
from flashtune.experiments.evaluation.landscape import Landscape

#: Where a curve at the optimum is drawn (% above it): the log axis's floor.
FLOOR_PCT = 0.1
#: Each strategy's dash, in turn (random search's expectation is the black dashes).
LINE_STYLES = ("-", (0, (6, 2)), (0, (2, 1.5)), "-.")


def plot_curves(landscapes: Sequence[Landscape], results: Sequence[RunResult], strategies: Sequence[str],
                out_dir: Path, label: str = "cold") -> list[Path]:
    """Write ``curves_<workload>.png`` for each workload and ``curves.png``; return the paths.

    ``label`` names the comparison in every title ("cold", "held out"); any other than
    "cold" prefixes the files (``curves_held_out.png``), so both comparisons' plots sit in
    one folder.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grouped: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    for r in results:
        grouped[(r.spec.strategy, r.spec.workload)].append(r)
    colors = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(strategies)}
    stem = "curves" if label == "cold" else "curves_" + label.replace(" ", "_")
    paths = []
    columns = min(3, len(landscapes))
    rows = -(-len(landscapes) // columns)
    overview, axes = plt.subplots(rows, columns, figsize=(5.5 * columns, 4.0 * rows), squeeze=False)
    for i, ls in enumerate(landscapes):
        figure, ax = plt.subplots(figsize=(7, 4.5))
        for target in (ax, axes[i // columns][i % columns]):
            _draw(target, ls, grouped, strategies, colors, label)
        ax.legend(fontsize=8, loc="upper right")
        figure.tight_layout()
        path = out_dir / f"{stem}_{ls.name}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        paths.append(path)
    for j in range(len(landscapes), rows * columns):
        axes[j // columns][j % columns].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    overview.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize=8, frameon=False)
    overview.tight_layout(rect=(0, 0.06, 1, 0.96))
    overview.suptitle(f"{label}: best so far above the optimum, median and 25-75 % of seeds", fontsize=10)
    path = out_dir / f"{stem}.png"
    overview.savefig(path, dpi=90)
    plt.close(overview)
    paths.append(path)
    return paths


def _draw(ax, ls: Landscape, grouped, strategies: Sequence[str], colors, label: str = "cold") -> None:
    # Up to the runs' budget (beyond it a run has no data, only its last value).
    budgets = [r.spec.budget for rs in grouped.values() for r in rs if r.spec.workload == ls.name]
    length = min(max(budgets), len(ls.random_curve)) if budgets else len(ls.random_curve)
    x = np.arange(1, length + 1)
    def floored(pct: np.ndarray) -> np.ndarray:
        return np.maximum(pct, FLOOR_PCT)

    ax.plot(x, floored((ls.random_curve[:length] / ls.optimum_ms - 1) * 100), "k--", lw=1.2,
            label="random (expected)")
    for order, name in enumerate(strategies):
        runs = grouped.get((name, ls.name), [])
        if not runs:
            continue
        # Earlier strategies wider, later ones drawn on top thinner and in another dash: two
        # strategies that ask the same (the portfolio leads with GP) both stay visible.
        width = 3.2 - 2.0 * order / max(len(strategies) - 1, 1)
        style = LINE_STYLES[order % len(LINE_STYLES)]
        curves = floored((relative_curves(ls, runs, length) - 1) * 100)
        p25, median, p75 = np.percentile(curves, [25, 50, 75], axis=0)
        ax.plot(x, median, color=colors[name], lw=width, ls=style, label=name)
        ax.fill_between(x, p25, p75, color=colors[name], alpha=0.15, lw=0)
    for level in (2, 5):
        ax.axhline(level, color="grey", lw=0.6, ls=":")
        ax.annotate(f"{level} %", (1, level), xytext=(2, 1), textcoords="offset points", fontsize=7, color="grey")
    if ls.score_budget <= length:
        ax.axvline(ls.score_budget, color="grey", lw=0.6, ls="-.")
        ax.annotate("score budget", (ls.score_budget, FLOOR_PCT), xytext=(2, 2), textcoords="offset points",
                    fontsize=7, color="grey", rotation=90, va="bottom")
    ax.set_yscale("log")
    ax.set_ylim(bottom=FLOOR_PCT * 0.8)
    ax.set_xlim(1, length)
    ax.set_xlabel("evaluations")
    ax.annotate(f"at the optimum (drawn at {FLOOR_PCT} %)", (1, FLOOR_PCT), xytext=(2, 1), textcoords="offset points",
                fontsize=7, color="grey")
    ax.set_ylabel("best so far above optimum (%)")
    ax.set_title(f"{ls.name} ({len(ls.feasible)} feasible), {label}", fontsize=9)

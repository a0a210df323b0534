"""The transfer report as one picture: evaluations to 2 %, cold start against priors.

One panel per strategy: for each pair a bar of cold start's median evaluations and one of
the median with priors (25-75 % whiskers), on a log scale, the pairs that missed the
targets (``transfer.TARGET_RATIO``, ``WORST_RATIO``) marked. Drawn with matplotlib's Agg backend (no display).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def plot_transfer(report: dict[str, Any], path: Path) -> Path:
    """Write the PNG of a ``flashtune transfer`` report to ``path``; return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = report["pairs"]
    strategies = list(pairs[0]["strategies"]) if pairs else []
    columns = min(3, max(len(strategies), 1))
    rows = -(-max(len(strategies), 1) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.6 * columns + 3.0, 0.3 * len(pairs) * rows + 1.6 * rows),
                                squeeze=False, sharey=True)
    y = np.arange(len(pairs))
    for i, name in enumerate(strategies):
        ax = axes[i // columns][i % columns]
        for offset, arm, color in ((-0.2, "cold", "0.6"), (0.2, "prior", "tab:blue")):
            stats = [p["strategies"][name][arm]["evals_to_2pct"] for p in pairs]
            median = np.array([s["median"] for s in stats])
            low = median - np.array([s["p25"] for s in stats])
            high = np.array([s["p75"] for s in stats]) - median
            ax.barh(y + offset, median, height=0.38, color=color, xerr=[low, high], error_kw={"lw": 0.6},
                    label="cold start" if arm == "cold" else "with priors")
        for j, p in enumerate(pairs):
            cell = p["strategies"][name]
            mark = "worse" if cell["ratio"] > report.get("worst_ratio", 1.2) else "" if cell["target_met"] else "> 1/3"
            if mark:
                ax.text(max(cell["prior_median"], 1) * 1.15, j + 0.2, mark, va="center", fontsize=6, color="tab:red")
        ax.set_xscale("log")
        ax.set_xlim(left=0.5)  # a bar of one evaluation stays visible
        ax.set_yticks(y, [p["name"].replace("_bfloat16", "") for p in pairs], fontsize=6)
        if i == 0:
            ax.invert_yaxis()  # shared: once
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("evaluations to 2 % of the optimum (median, 25-75 %)", fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
    for j in range(len(strategies), rows * columns):
        axes[j // columns][j % columns].set_visible(False)
    if strategies:
        axes[0][0].legend(fontsize=7, loc="lower right")
    figure.suptitle(f"Transfer of priors on recorded H200 spaces ({report.get('seeds', '?')} seeds)", fontsize=10)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path

"""What a study shows people: convergence plot, trials table, best config, summary text.

Pure functions of the trials, so the MLflow artifacts, the terminal summary and the
notebooks all show the same numbers.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flashtune.objectives.metrics import column_metrics
from flashtune.search.loop import Trial, best_trial


def measurement_columns() -> tuple[str, ...]:
    """Columns of the trials table, after the config's own keys: the status, the declared
    metrics (objectives/metrics.py), where the measurement came from and its error."""
    return ("status", *(m.field for m in column_metrics()), "source", "error")


def best_so_far(trials: Sequence[Trial]) -> list[float]:
    """Best median ms after each trial (inf until the first success)."""
    best, out = math.inf, []
    for trial in trials:
        best = min(best, trial.cost_ms)
        out.append(best)
    return out


def trial_row(trial: Trial) -> dict[str, Any]:
    """One flat row: trial number, elapsed time, config, measurement fields."""
    data = trial.measurement.to_dict()
    row: dict[str, Any] = {"trial": trial.number, "elapsed_s": round(trial.elapsed_s, 3)}
    row.update(trial.config.to_dict())
    for column in measurement_columns():
        row[column] = data.get(column)
    return row


def write_trials_csv(trials: Sequence[Trial], path: str | Path) -> Path:
    """The trials table as CSV (one row a trial, failures included)."""
    path = Path(path)
    rows = [trial_row(t) for t in trials]
    columns: list[str] = []
    for row in rows:
        columns.extend(c for c in row if c not in columns)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns or ["trial"])
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_trials_jsonl(trials: Sequence[Trial], path: str | Path) -> Path:
    """The trials as recorded-table JSON lines (``Measurement.to_dict``), reusable as priors."""
    path = Path(path)
    with path.open("w") as fh:
        for trial in trials:
            fh.write(json.dumps(trial.measurement.to_dict(), sort_keys=True) + "\n")
    return path


def best_config_document(trials: Sequence[Trial], study: Mapping[str, Any]) -> dict[str, Any]:
    """The best config with its measurement and what it was tuned for (JSON-ready)."""
    best = best_trial(trials)
    return {
        "study": dict(study),
        "trials": len(trials),
        "best_trial": None if best is None else best.number,
        "config": None if best is None else best.config.to_dict(),
        "measurement": None if best is None else best.measurement.to_dict(),
    }


def write_convergence_png(trials: Sequence[Trial], path: str | Path, *, title: str = "") -> Path:
    """Best-so-far median ms against trial number, each trial as a dot, failures as crosses."""
    import matplotlib

    matplotlib.use("Agg")  # no display on CI or a GPU box
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    try:
        ok = [(t.number, t.cost_ms) for t in trials if math.isfinite(t.cost_ms)]
        failed = [t.number for t in trials if not math.isfinite(t.cost_ms)]
        if ok:
            ax.scatter([n for n, _ in ok], [ms for _, ms in ok], s=12, color="0.6", label="trial")
            curve = best_so_far(trials)
            steps = [(t.number, b) for t, b in zip(trials, curve) if math.isfinite(b)]
            ax.step([n for n, _ in steps], [b for _, b in steps], where="post", color="C0", label="best so far")
            top = max(ms for _, ms in ok)
        else:
            top = 1.0
        if failed:
            ax.scatter(failed, [top] * len(failed), marker="x", color="C3", s=16, label="failed")
        ax.set_xlabel("trial")
        ax.set_ylabel("median time (ms)")
        ax.set_title(title or "convergence", fontsize=9)
        if trials:
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path


def summary_text(trials: Sequence[Trial], *, title: str = "", top: int = 5) -> str:
    """A plain-text summary: counts by status and the ``top`` fastest configs."""
    lines = [title] if title else []
    statuses = Counter(t.measurement.status.value for t in trials)
    status_text = ", ".join(f"{name} {count}" for name, count in sorted(statuses.items()))
    lines.append(f"{len(trials)} trials ({status_text or 'none'})")
    ranked = sorted((t for t in trials if math.isfinite(t.cost_ms)), key=lambda t: (t.cost_ms, t.number))[:top]
    if not ranked:
        lines.append("no config ran correctly")
        return "\n".join(lines)
    names = list(ranked[0].config)
    header = ["rank", "trial", *names, "median ms", "p20-p80 ms", "TFLOP/s"]
    rows = []
    for rank, t in enumerate(ranked, 1):
        m = t.measurement
        rows.append([str(rank), str(t.number), *(str(t.config[n]) for n in names), f"{m.median_ms:.4f}",
                     f"{m.p20_ms:.4f}-{m.p80_ms:.4f}", f"{m.tflops:.1f}"])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        lines.append("  ".join(cell.rjust(w) for cell, w in zip(row, widths)))
    return "\n".join(lines)

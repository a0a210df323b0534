"""GPU models side by side, from their MLflow experiments: per workload, each GPU's best
config, every other GPU's best config as measured on this one (what a team serves when it
tunes on one GPU and deploys on another), and SDPA's recorded speed on this GPU.

    flashtune study h200 --trials 40
    flashtune study h100 --trials 40 --prior-from mlflow-experiment:h200   # tries the H200's bests first
    flashtune gpus --out gpus                                              # gpus.json, gpus.png

A config "measured on" a GPU is one of that GPU's studies' trials of the workload: the
comparison reads what the studies ran, never a time they did not measure.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from flashtune.experiments.evaluation.recorded_peers import recorded_peer
from flashtune.experiments.tracking import analysis


@dataclass(frozen=True)
class Cell:
    """One GPU on one workload."""

    gpu: str
    workload: str
    best_tflops: float
    best_config: dict[str, Any]
    trials: int
    #: Another GPU's best config on this GPU, over this GPU's best (by that GPU's name); None:
    #: this GPU's studies never ran that config.
    others_best_here: dict[str, float | None] = field(default_factory=dict)
    sdpa_cudnn_tflops: float | None = None  # recorded beside this GPU's tables (experiments/data)
    sdpa_flash_tflops: float | None = None


def compare_gpus(uri: str) -> list[Cell]:
    """The cells of every (GPU, workload) the store's flashtune experiments hold an ok trial of.

    Raises:
        ValueError: the store holds no flashtune study with an ok trial.
    """
    parents = analysis.studies(uri)
    rows = analysis.trials(uri, parents) if not parents.empty else pd.DataFrame()
    if rows.empty or "status" not in rows or not (rows["status"] == "ok").any():
        raise ValueError(f"{uri}: no flashtune study with a trial that ran; run `flashtune study GPU` first")
    ok = rows[rows["status"] == "ok"]
    knobs = analysis.config_columns(ok)
    configs = ok[knobs].rename(columns=lambda c: c.removeprefix("param."))
    ok = ok.assign(config=[json.dumps({k: v for k, v in row.items() if pd.notna(v)}, sort_keys=True)
                           for row in configs.to_dict("records")])
    # A config run by several studies of a GPU (seeds, strategies): its fastest reading.
    fastest = ok.groupby(["gpu", "workload", "config"])["tflops"].max()
    cells = []
    for (gpu, workload), readings in fastest.groupby(level=["gpu", "workload"]):
        here = readings.droplevel(["gpu", "workload"])
        best_config = here.idxmax()
        others = {}
        for other, theirs in fastest.groupby(level="gpu"):
            if other == gpu or workload not in theirs.index.get_level_values("workload"):
                continue
            their_best = theirs.xs(workload, level="workload").droplevel("gpu").idxmax()
            others[other] = float(here[their_best] / here.max()) if their_best in here.index else None
        cudnn, flash = (recorded_peer(gpu, workload, peer) for peer in ("sdpa_cudnn", "sdpa_flash"))
        cells.append(Cell(gpu, workload, float(here.max()), json.loads(best_config),
                          int(((ok["gpu"] == gpu) & (ok["workload"] == workload)).sum()), others,
                          cudnn.tflops if cudnn else None, flash.tflops if flash else None))
    return cells


def format_cells(cells: list[Cell]) -> str:
    """A table a person reads: one row per GPU and workload."""
    lines = [f"{'workload':<36s} {'GPU':<22s} {'best':>6s} {'cuDNN':>6s} {'flash':>6s}  other GPUs' best here"]
    for cell in sorted(cells, key=lambda c: (c.workload, c.gpu)):
        peers = [f"{v:6.0f}" if v else f"{'-':>6s}" for v in (cell.sdpa_cudnn_tflops, cell.sdpa_flash_tflops)]
        others = ", ".join(f"{gpu}'s {ratio:.3f}x" if ratio is not None else f"{gpu}'s not run here"
                           for gpu, ratio in sorted(cell.others_best_here.items())) or "-"
        lines.append(f"{cell.workload.removesuffix('_bfloat16'):<36s} {cell.gpu[:22]:<22s} "
                     f"{cell.best_tflops:6.0f} {' '.join(peers)}  {others}")
    lines.append("TFLOP/s: the best ok trial of the GPU's studies; cuDNN, flash: SDPA's recorded speed on that GPU "
                 "(experiments/data/recorded_peers.json); other GPUs' best here: their best config's time on this "
                 "GPU over this GPU's best")
    return "\n".join(lines)


def write_report(cells: list[Cell], out: Path) -> list[Path]:
    """``out/gpus.json`` (every cell) and ``out/gpus.png`` (the picture); return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    data = out / "gpus.json"
    data.write_text(json.dumps([asdict(c) for c in cells], indent=2) + "\n")
    return [data, plot_gpus(cells, out / "gpus.png")]


def plot_gpus(cells: list[Cell], path: Path) -> Path:
    """Per workload and GPU: the GPU's best, each other GPU's best config on it, SDPA cuDNN."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpus = sorted({c.gpu for c in cells})
    workloads = sorted({c.workload for c in cells})
    by_key = {(c.gpu, c.workload): c for c in cells}
    figure, axes = plt.subplots(1, len(gpus), figsize=(5.2 * len(gpus), 0.55 * len(workloads) + 1.6),
                                squeeze=False, sharey=True)
    for ax, gpu in zip(axes[0], gpus, strict=True):
        y = range(len(workloads))
        own = [by_key[(gpu, w)].best_tflops if (gpu, w) in by_key else 0.0 for w in workloads]
        ax.barh([i - 0.27 for i in y], own, height=0.26, color="tab:blue", label=f"{_short(gpu)}'s best")
        for other in (g for g in gpus if g != gpu):
            moved = [(by_key[(gpu, w)].others_best_here.get(other) or 0.0) * own[i] for i, w in enumerate(workloads)]
            ax.barh(list(y), moved, height=0.26, color="tab:orange", label=f"{_short(other)}'s best config here")
        cudnn = [(by_key[(gpu, w)].sdpa_cudnn_tflops or 0.0) if (gpu, w) in by_key else 0.0 for w in workloads]
        ax.barh([i + 0.27 for i in y], cudnn, height=0.26, color="0.6", label="SDPA cuDNN (recorded)")
        ax.set_yticks(list(y), [w.removesuffix("_bfloat16") for w in workloads], fontsize=7)
        ax.set_title(gpu, fontsize=9)
        ax.set_xlabel("TFLOP/s", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=6, loc="lower right")
    axes[0][0].invert_yaxis()
    figure.suptitle("Each GPU's best config, the other GPUs' best configs on it, and SDPA cuDNN", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _short(gpu: str) -> str:
    return gpu.removeprefix("NVIDIA ").split(" ")[0]

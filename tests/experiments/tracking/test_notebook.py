"""notebooks/compare_strategies.ipynb runs top to bottom on a store of replay studies."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from study_support import WORKLOAD

from flashtune.experiments.study import measurers
from flashtune.experiments.study.runner import Study, run_study
from flashtune.experiments.tracking import analysis
from flashtune.objectives.hardware import load_spec

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "compare_strategies.ipynb"
TRIALS = 12


@pytest.fixture
def replay_store(replay_dir, h100_replay_dir, stores) -> dict[str, str]:
    """Two strategies (two seeds of one) on the H200 and one on the H100, replayed."""
    plan = [("h200", replay_dir, "random", 0), ("h200", replay_dir, "random", 1), ("h200", replay_dir, "grid", 0),
            ("h100", h100_replay_dir, "random", 0)]
    for key, folder, strategy, seed in plan:
        hardware = load_spec(key)
        source = measurers.open_replay(hardware, [WORKLOAD], folder)
        study = Study(name=f"{strategy}-s{seed}", workload=WORKLOAD, hardware=hardware, strategy=strategy, seed=seed,
                      trials=TRIALS)
        run_study(study, source.evaluator(WORKLOAD), tracking_uri=stores["tracking_uri"],
                  storage_url=stores["storage"], fingerprint=source.fingerprint, versions=source.versions,
                  constraint=source.constraint(WORKLOAD))
    return stores


def test_analysis_tables(replay_store) -> None:
    uri = replay_store["tracking_uri"]
    runs = analysis.studies(uri)
    assert len(runs) == 4 and set(runs["strategy"]) == {"random", "grid"}
    assert set(runs["gpu"]) == {"NVIDIA H200", load_spec("h100").name}
    curves = analysis.curves(uri, runs)
    assert curves.groupby("run_id")["step"].max().eq(TRIALS - 1).all()
    trials = analysis.trials(uri, runs)
    assert len(trials) == 4 * TRIALS
    best = analysis.best_configs(trials)
    assert len(best) == 2  # one per GPU model (one workload)
    h200_best = runs[runs["gpu"] == "NVIDIA H200"]["best_ms"].min()
    assert best.loc[best["gpu"] == "NVIDIA H200", "median_ms"].iloc[0] == pytest.approx(h200_best)
    assert int(best["BLOCK_M"].iloc[0]) in (32, 64, 128, 256)  # typed back from text
    importance = analysis.param_importance(trials)
    assert len(importance) == 2 and "BLOCK_M" in importance.columns


def test_notebook_executes(replay_store, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FLASHTUNE_TRACKING_URI", replay_store["tracking_uri"])
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel draws inline
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # Committed without outputs: what people open is the code, not a stale result.
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    nbformat.write(notebook, tmp_path / "executed.ipynb")  # kept for a look when a test fails
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "data" in o and "image/png" in o["data"]]
    assert len(images) >= 3  # convergence, GPU comparison, importance
    text = "\n".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "4 studies in" in text and "grid-s0" in text and "trials_to_5pct" in text

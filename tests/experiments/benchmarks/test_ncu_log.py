"""Nsight Compute figures land on the MLflow trial that measured the config they profile:
a real (replayed) study in a real MLflow store, the H200's real ncu CSV."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import ncu_metrics
from mlflow import MlflowClient
from study_support import WORKLOAD, tune_args

from flashtune.experiments.cli.main import main
from flashtune.experiments.evaluation.prior_mlflow import RUN_ID_KEY, trial_measurements_of_experiment

NCU_CSV = Path(__file__).resolve().parents[3] / "docs" / "results" / "h200_session2" / "ncu_raw.csv"


def test_ncu_figures_are_logged_on_the_trial_of_their_config(stores, replay_dir, tmp_path, capsys) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(tune_args(stores, replay_dir, "--study-name", "ncu", "--trials", "4", "--strategy", "random")) == 0
    trials = [m for m in trial_measurements_of_experiment(stores["tracking_uri"], "h200") if m.ok]
    best = min(trials, key=lambda m: m.median_ms)
    record = ncu_metrics.parse(NCU_CSV.read_text(errors="replace"), [WORKLOAD.name])[0]
    # The config as `parse` writes it: every knob spelled out, implied ones too.
    record["config"] = {"loads": "pointer", "use_fp8": False, **best.config.to_dict()}
    path = tmp_path / "ncu.json"
    path.write_text(json.dumps([record]))

    code = ncu_metrics.main(["log", str(path), "--experiment", "NVIDIA H200", "--tracking-uri", stores["tracking_uri"]])

    assert code == 0
    assert best.versions[RUN_ID_KEY] in capsys.readouterr().out
    metrics = MlflowClient(tracking_uri=stores["tracking_uri"]).get_run(best.versions[RUN_ID_KEY]).data.metrics
    assert metrics["ncu.sm_throughput_pct"] == record["metrics"]["sm_throughput_pct"]
    assert any(name.startswith("ncu.stall.") for name in metrics)
    others = [m for m in trials if m.config != best.config]
    assert others and not any(name.startswith("ncu.") for name in
                              MlflowClient(tracking_uri=stores["tracking_uri"]).get_run(
                                  others[0].versions[RUN_ID_KEY]).data.metrics)

    # A record of a workload no study measured: nothing written, exit 1, said so.
    record["label"] = "b1_h1_n64_d64_full_bfloat16"
    path.write_text(json.dumps([record]))
    assert ncu_metrics.main(["log", str(path), "--experiment", "h200", "--tracking-uri", stores["tracking_uri"]]) == 1
    assert "no trial" in capsys.readouterr().err

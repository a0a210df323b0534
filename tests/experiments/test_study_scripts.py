"""The per-GPU study scripts: each names its spec and workloads; the H200 one runs here."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from study_support import WORKLOAD, WORKLOAD_ARG, cli_env

from flashtune.objectives.hardware import load_spec

SCRIPTS = Path(__file__).resolve().parents[2] / "experiments" / "studies"
GPUS = ("h200", "h100", "a100", "l40s", "rtx4090")


@pytest.mark.parametrize("key", GPUS)
def test_script_names_its_gpu(key: str) -> None:
    module = importlib.import_module(f"flashtune.experiments.studies.{key}")
    assert module.HARDWARE == key and load_spec(key).name
    assert module.WORKLOADS, "a study script tunes at least one workload"


def test_h200_script_runs_here_on_replay(replay_dir, stores, tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "h200.py"), "--trials", "4", "--replay-dir", str(replay_dir),
         "--workload", WORKLOAD_ARG, "--tracking-uri", stores["tracking_uri"], "--storage", stores["storage"],
         "--no-progress"],
        cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "replaying recorded NVIDIA H200 tables" in done.stderr
    client = MlflowClient(tracking_uri=stores["tracking_uri"])
    experiment = client.get_experiment_by_name("flashtune/NVIDIA H200")
    parents = client.search_runs([experiment.experiment_id], filter_string="tags.role = 'study'")
    assert [p.info.run_name for p in parents] == ["h200-random-seed0"]
    assert parents[0].data.tags["workload"] == WORKLOAD.name


@pytest.mark.parametrize("key", [k for k in GPUS if k != "h200"])
def test_other_gpus_say_where_they_run(key: str, stores, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU here: replay, and no tables for that GPU
    module = importlib.import_module(f"flashtune.experiments.studies.{key}")
    code = module.main_for_gpu(module.HARDWARE, module.WORKLOADS,
                               ["--tracking-uri", stores["tracking_uri"], "--storage", stores["storage"]])
    assert code == 2
    err = capsys.readouterr().err
    assert f"no recorded {load_spec(key).name} table" in err and "run where the GPU is" in err

"""The per-GPU study files: each names its spec and workloads; ``flashtune study h200`` runs here."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mlflow import MlflowClient
from study_support import WORKLOAD, WORKLOAD_ARG, cli_env

from flashtune.experiments.cli.main import main
from flashtune.experiments.cli.study import load_study, study_names
from flashtune.experiments.cli.tune import DEFAULT_STRATEGY
from flashtune.experiments.study.measurers import RECORDED_SPACE
from flashtune.objectives.hardware import load_spec

GPUS = ("h200", "h100", "a100", "l40s", "rtx4090")


@pytest.mark.parametrize("key", GPUS)
def test_study_file_names_its_gpu(key: str) -> None:
    study = load_study(key)
    assert study.hardware == key and load_spec(key).name
    assert study.workloads, "a study file tunes at least one workload"


def test_every_gpu_has_a_study_file() -> None:
    assert set(GPUS) <= set(study_names())


def test_bad_study_files_name_the_problem(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no study file"):
        load_study("nosuchgpu")
    bad = tmp_path / "bad.toml"
    bad.write_text('hardware = "h200"\nworkload = ["suite"]\n')
    with pytest.raises(ValueError, match="unknown keys"):
        load_study(bad)
    bad.write_text('workloads = ["suite"]\n')
    with pytest.raises(ValueError, match="hardware"):
        load_study(bad)


def test_h200_study_runs_here_on_replay(replay_dir, stores, tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "flashtune.experiments.cli", "study", "h200", "--trials", "4",
         "--replay-dir", str(replay_dir), "--workload", WORKLOAD_ARG, "--tracking-uri", stores["tracking_uri"],
         "--storage", stores["storage"], "--no-progress"],
        cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "replaying recorded NVIDIA H200 tables" in done.stderr
    client = MlflowClient(tracking_uri=stores["tracking_uri"])
    experiment = client.get_experiment_by_name("flashtune/NVIDIA H200")
    parents = client.search_runs([experiment.experiment_id], filter_string="tags.role = 'study'")
    assert [p.info.run_name for p in parents] == [f"h200-{DEFAULT_STRATEGY}-seed0"]
    assert parents[0].data.tags["workload"] == WORKLOAD.name


def test_h100_study_replays_its_recorded_space_here(stores, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU here: the shipped H100 tables replay
    assert main(["study", "h100", "--trials", "3", "--workload", "4,32,4096,128", "--no-progress",
                 "--tracking-uri", stores["tracking_uri"], "--storage", stores["storage"]]) == 0
    err = capsys.readouterr().err
    assert "replaying recorded NVIDIA H100 80GB HBM3 tables" in err and "h100_sampled" in err


@pytest.mark.parametrize("key", [k for k in GPUS if k not in RECORDED_SPACE])
def test_other_gpus_say_where_they_run(key: str, stores, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU here: replay, and no tables for that GPU
    code = main(["study", key, "--tracking-uri", stores["tracking_uri"], "--storage", stores["storage"]])
    assert code == 2
    err = capsys.readouterr().err
    assert f"no recorded {load_spec(key).name} table" in err and "run where the GPU is" in err

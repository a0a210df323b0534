"""`flashtune tune` killed with SIGKILL at a random trial, then resumed, loses nothing;
SIGTERM ends the study KILLED. Real processes, real SQLite stores."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
from mlflow import MlflowClient
from study_support import WORKLOAD, cli_env, flashtune_command, run_cli, tune_args

from flashtune.experiments.study.storage import MEASUREMENT_ATTR, NUMBER_ATTR

pytestmark = pytest.mark.slow

# The killed runs' budget: more trials than a run can finish while the test polls for its
# kill point (a loaded machine starves the poller; the replayed trials take milliseconds),
# so the kill always lands mid-study. The resumed run then ends the study FINAL_EXTRA
# trials past what the kills left.
KILLED_BUDGET = 1000
FINAL_EXTRA = 10
STORAGE_NAME = "NVIDIA H200/{}"


def measured(storage: str, name: str) -> list[optuna.trial.FrozenTrial]:
    """The study's measured trials as stored (empty before the study exists)."""
    try:
        study = optuna.load_study(study_name=STORAGE_NAME.format(name), storage=storage)
    except KeyError:
        return []
    return [t for t in study.get_trials(deepcopy=False) if MEASUREMENT_ATTR in t.user_attrs]


def start(stores, replay_dir, tmp_path: Path, name: str, trials: int, strategy: str = "random"):
    args = tune_args(stores, replay_dir, "--study-name", name, "--trials", str(trials), "--strategy", strategy,
                     "--seed", "11")
    return subprocess.Popen(flashtune_command(*args), cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_trials(proc: subprocess.Popen, stores, name: str, count: int, timeout_s: float = 240) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = len(measured(stores["storage"], name))
        if done >= count:
            return done
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"study ended (rc {proc.returncode}) before {count} trials:\n{out}\n{err}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"study did not reach {count} trials in {timeout_s} s")


def snapshot(storage: str, name: str) -> dict[int, dict]:
    return {t.user_attrs[NUMBER_ATTR]: t.user_attrs[MEASUREMENT_ATTR] for t in measured(storage, name)}


def test_kill_9_at_random_trials_then_resume(replay_dir, stores, tmp_path) -> None:
    seed = int(time.time())
    rng = np.random.default_rng(seed)
    name = "kill9"
    kept: dict[int, dict] = {}
    for _ in range(2):  # two crashes in a row, at random points, then a clean finish
        proc = start(stores, replay_dir, tmp_path, name, KILLED_BUDGET)
        target = len(kept) + int(rng.integers(1, 8))
        wait_for_trials(proc, stores, name, target)
        time.sleep(float(rng.uniform(0.0, 0.08)))  # land anywhere in a trial: measuring, Optuna, MLflow
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        now = snapshot(stores["storage"], name)
        assert len(now) < KILLED_BUDGET, f"seed {seed}: the study finished before the kill; nothing was tested"
        assert all(now[n] == m for n, m in kept.items()), f"seed {seed}: a stored trial changed or vanished"
        kept = now

    total = len(kept) + FINAL_EXTRA
    final = run_cli(*tune_args(stores, replay_dir, "--study-name", name, "--trials", str(total), "--seed", "11",
                               "--strategy", "random"), cwd=tmp_path)
    assert final.returncode == 0, final.stderr
    assert "resuming study 'kill9'" in final.stderr

    # Optuna: every trial stored once, numbered 0..N-1, no config twice, nothing RUNNING.
    trials = measured(stores["storage"], name)
    assert sorted(t.user_attrs[NUMBER_ATTR] for t in trials) == list(range(total)), f"seed {seed}"
    configs = [tuple(sorted(t.user_attrs[MEASUREMENT_ATTR]["config"].items())) for t in trials]
    assert len(set(configs)) == total, f"seed {seed}: a config was measured twice"
    final_snapshot = snapshot(stores["storage"], name)
    assert all(final_snapshot[n] == m for n, m in kept.items()), f"seed {seed}: a trial was lost"
    study = optuna.load_study(study_name=STORAGE_NAME.format(name), storage=stores["storage"])
    assert not [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.RUNNING]

    # MLflow: one parent, FINISHED; exactly one finished child per trial, matching its config.
    client = MlflowClient(tracking_uri=stores["tracking_uri"])
    experiment = client.get_experiment_by_name("flashtune/NVIDIA H200")
    parents = client.search_runs([experiment.experiment_id],
                                 filter_string=f"tags.role = 'study' AND tags.study = '{name}'")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED", f"seed {seed}"
    runs = client.search_runs([experiment.experiment_id], max_results=1000,
                              filter_string=f"tags.mlflow.parentRunId = '{parents[0].info.run_id}'")
    numbers = sorted(int(r.data.tags["trial"]) for r in runs)
    assert numbers == list(range(total)), f"seed {seed}: children {numbers}"
    assert all(r.info.status in ("FINISHED", "FAILED") for r in runs)
    by_number = {t.user_attrs[NUMBER_ATTR]: t.user_attrs[MEASUREMENT_ATTR]["config"] for t in trials}
    for run in runs:
        config = by_number[int(run.data.tags["trial"])]
        assert {k: run.data.params[k] for k in config} == {k: str(v) for k, v in config.items()}
    steps = sorted(m.step for m in client.get_metric_history(parents[0].info.run_id, "best_ms"))
    assert len(steps) == len(set(steps)), f"seed {seed}: best-so-far logged twice for a step"


def test_sigterm_ends_killed_and_resumes(replay_dir, stores, tmp_path) -> None:
    name = "term"
    proc = start(stores, replay_dir, tmp_path, name, 300, strategy="grid")
    wait_for_trials(proc, stores, name, 5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM" in err and "KILLED" in err

    client = MlflowClient(tracking_uri=stores["tracking_uri"])
    experiment = client.get_experiment_by_name("flashtune/NVIDIA H200")
    parent = client.search_runs([experiment.experiment_id], filter_string="tags.role = 'study'")[0]
    assert parent.info.status == "KILLED", err[-3000:]
    study = optuna.load_study(study_name=STORAGE_NAME.format(name), storage=stores["storage"])
    assert not [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.RUNNING]
    stopped_at = len(measured(stores["storage"], name))
    assert 5 <= stopped_at < 300

    again = run_cli(*tune_args(stores, replay_dir, "--study-name", name, "--trials", str(stopped_at + 3),
                               "--strategy", "grid", "--seed", "11"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    parent = client.get_run(parent.info.run_id)
    assert parent.info.status == "FINISHED"
    assert len(measured(stores["storage"], name)) == stopped_at + 3
    assert WORKLOAD.name in again.stdout

"""Kills at every phase of a study's life leave working stores and lose nothing.

Twenty real kills (SIGKILL and SIGTERM) of `flashtune tune` on one study: during the
MLflow database's creation at start-up, right after start, while the stores open, at
random points of the trials (measuring, the Optuna write, the MLflow writes) and while
the study closes; the study is resumed after each. After every kill both stores open
(0 broken); at the end the study holds exactly its budget of trials, each once, and
nothing is left RUNNING in Optuna or MLflow (issue 16). Real processes, real SQLite.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient
from study_support import WORKLOAD_ARG, cli_env, flashtune_command, run_cli

from flashtune.experiments.study.storage import MEASUREMENT_ATTR, NUMBER_ATTR
from flashtune.experiments.tracking.mlflow_db import schema_problem

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]  # twenty CLI starts

BUDGET = 60
NAME = "k1"
STORAGE_NAME = f"NVIDIA H200/{NAME}"


class Study:
    """One study's folder, stores and CLI runs."""

    def __init__(self, folder: Path, replay_dir: Path) -> None:
        self.folder = folder
        self.mlflow_db = folder / "mlflow.db"
        self.tracking_uri = f"sqlite:///{self.mlflow_db}"
        self.storage = f"sqlite:///{folder / 'optuna.db'}"
        self.args = ["tune", "--tracking-uri", self.tracking_uri, "--storage", self.storage,
                     "--replay-dir", str(replay_dir), "--workload", WORKLOAD_ARG, "--no-progress",
                     "--study-name", NAME, "--trials", str(BUDGET), "--strategy", "random", "--seed", "3"]

    def start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(flashtune_command(*self.args), cwd=self.folder, env=cli_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def measured(self) -> dict[int, dict]:
        """Trial number -> stored measurement (empty before the study exists)."""
        try:
            study = optuna.load_study(study_name=STORAGE_NAME, storage=self.storage)
        except KeyError:
            return {}
        trials = [t for t in study.get_trials(deepcopy=False) if MEASUREMENT_ATTR in t.user_attrs]
        numbers = [t.user_attrs[NUMBER_ATTR] for t in trials]
        assert len(numbers) == len(set(numbers)), f"a trial number stored twice: {sorted(numbers)}"
        return {t.user_attrs[NUMBER_ATTR]: t.user_attrs[MEASUREMENT_ATTR] for t in trials}

    def count(self) -> int:
        """Measured trials, read with plain sqlite3 (cheap enough to poll)."""
        try:
            with sqlite3.connect(f"file:{self.folder / 'optuna.db'}?mode=ro", uri=True, timeout=5) as db:
                return int(db.execute("SELECT COUNT(*) FROM trial_user_attributes WHERE key = ?",
                                      (MEASUREMENT_ATTR,)).fetchone()[0])
        except sqlite3.Error:
            return 0

    def check_stores(self) -> None:
        """Both stores open and answer (absent is fine: a kill before their creation)."""
        if self.mlflow_db.exists():
            assert schema_problem(self.mlflow_db) is None
            MlflowClient(tracking_uri=self.tracking_uri).search_experiments()
        if (self.folder / "optuna.db").exists():
            self.measured()


def _wait(condition, proc: subprocess.Popen[str], timeout_s: float = 300) -> bool:
    """Poll until ``condition()``; False when the process ended first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.005)
    proc.kill()
    pytest.fail(f"no progress in {timeout_s} s")


def test_kills_at_every_phase_leave_working_stores_and_every_trial_once(tmp_path, replay_dir) -> None:
    seed = int(time.time())
    rng = random.Random(seed)
    study = Study(tmp_path, replay_dir)
    # The temporary database of the creation (or, once made, the database itself).
    creating = lambda: bool(list(tmp_path.glob(".mlflow.db.*.creating"))) or study.mlflow_db.exists()  # noqa: E731 - a one-line helper reads better as a lambda here
    # (phase, signal, when to kill: a condition and a random delay after it)
    plan: list[tuple[str, signal.Signals, object, float]] = [
        ("start-up: MLflow database creation", signal.SIGKILL, creating, 0.6),
        ("start-up: MLflow database creation", signal.SIGTERM, creating, 1.2),
        ("start-up: MLflow database creation", signal.SIGKILL, creating, 2.0),
        ("start-up: imports", signal.SIGKILL, lambda: True, 0.3),
        ("start-up: stores opening", signal.SIGTERM, lambda: (tmp_path / "optuna.db").exists(), 0.2),
    ]
    kept: dict[int, dict] = {}
    hits: list[str] = []
    kills = 0

    def kill(phase: str, sig: signal.Signals, condition, spread: float) -> None:
        nonlocal kept, kills
        proc = study.start()
        if _wait(condition, proc):
            time.sleep(rng.uniform(0.0, spread))
        if proc.poll() is None:
            proc.send_signal(sig)
            kills += 1
            hits.append(f"{phase} ({sig.name})")
        out, err = proc.communicate(timeout=300)
        assert "Traceback" not in err, f"seed {seed}, {phase}: {err[-3000:]}"
        study.check_stores()
        now = study.measured()
        assert all(now.get(n) == m for n, m in kept.items()), f"seed {seed}, {phase}: a stored trial changed or vanished"
        kept = now

    for phase, sig, condition, spread in plan:
        kill(phase, sig, condition, spread)
    for i in range(12):  # trials: measuring, the Optuna write, the MLflow writes
        target = min(len(kept) + rng.randint(1, 4), BUDGET - 3)
        kill("trials", (signal.SIGKILL, signal.SIGTERM)[i % 2], lambda t=target: study.count() >= t, 0.15)
    # Shutdown: the run that meets the budget, killed as it closes; then resumes of the
    # finished budget (reconciliation with MLflow, closing), killed at random moments.
    kill("shutdown: closing", signal.SIGTERM, lambda: study.count() >= BUDGET, 0.3)
    for sig in (signal.SIGKILL, signal.SIGTERM):
        kill("shutdown: resumed and closing", sig, lambda: (tmp_path / "optuna.db").exists(), 6.0)
    assert len(kept) <= BUDGET

    final = run_cli(*study.args, cwd=tmp_path)
    assert final.returncode == 0, f"seed {seed}: {final.stderr[-3000:]}"
    study.check_stores()

    # Optuna: the budget of trials exactly, numbered 0..N-1, no config twice, none RUNNING.
    trials = study.measured()
    assert sorted(trials) == list(range(BUDGET)), f"seed {seed}"
    assert all(trials[n] == m for n, m in kept.items()), f"seed {seed}: a trial was lost or changed"
    configs = {tuple(sorted(m["config"].items())) for m in trials.values()}
    assert len(configs) == BUDGET, f"seed {seed}: a config was measured twice"
    optuna_study = optuna.load_study(study_name=STORAGE_NAME, storage=study.storage)
    assert not [t for t in optuna_study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.RUNNING]

    # MLflow: one parent, FINISHED; one child per trial; no run of the experiment RUNNING.
    client = MlflowClient(tracking_uri=study.tracking_uri)
    experiment = client.get_experiment_by_name("flashtune/NVIDIA H200")
    runs = client.search_runs([experiment.experiment_id], max_results=5000)
    assert not [r.info.run_id for r in runs if r.info.status == "RUNNING"], f"seed {seed}"
    parents = [r for r in runs if r.data.tags.get("role") == "study"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED", f"seed {seed}"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert sorted(int(r.data.tags["trial"]) for r in children) == list(range(BUDGET)), f"seed {seed}"
    print(f"\n{kills} kills (seed {seed}): " + "; ".join(hits))
    assert kills >= 18, f"seed {seed}: only {kills} kills landed: {hits}"

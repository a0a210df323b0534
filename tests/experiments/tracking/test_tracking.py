"""A replay study leaves one parent and one child per trial in a real MLflow store."""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from study_support import GQA_WORKLOAD, WORKLOAD

from flashtune.experiments.study import measurers
from flashtune.experiments.study.runner import Study, run_study
from flashtune.experiments.tracking.shared import SETTLE_S
from flashtune.experiments.tracking.tracker import MlflowTracker, check_tracking_uri, experiment_name
from flashtune.objectives.hardware import HardwareSpec

TRIALS = 14


def replay_study(replay_dir: Path, stores: dict[str, str], hardware: HardwareSpec, *, name: str = "track",
                 workload=WORKLOAD, trials: int = TRIALS, strategy: str = "random", seed: int = 3):
    source = measurers.open_replay(hardware, [workload], replay_dir)
    study = Study(name=name, workload=workload, hardware=hardware, strategy=strategy, trials=trials, seed=seed)
    return run_study(study, source.evaluator(workload), tracking_uri=stores["tracking_uri"],
                     storage_url=stores["storage"], fingerprint=source.fingerprint, versions=source.versions,
                     constraint=source.constraint(workload))


def test_parent_and_children(replay_dir, stores, h200, mlflow_client) -> None:
    result = replay_study(replay_dir, stores, h200, workload=GQA_WORKLOAD, trials=TRIALS)
    assert result.status == "FINISHED" and len(result.trials) == TRIALS

    experiment = mlflow_client.get_experiment_by_name(experiment_name(h200.name))
    assert experiment is not None and experiment.experiment_id == result.experiment_id
    runs = mlflow_client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("role") == "study"]
    children = [r for r in runs if r.data.tags.get("role") == "trial"]
    assert len(parents) == 1 and len(children) == TRIALS

    parent = parents[0]
    assert parent.info.run_name == "track" and parent.info.status == "FINISHED"
    tags = parent.data.tags
    assert tags["gpu"] == "NVIDIA H200" and tags["compute_capability"] == "9.0"
    assert tags["fingerprint"] == result.trials[0].measurement.fingerprint
    for key in ("driver", "cuda", "torch", "triton"):
        assert tags[key] == getattr(h200, key)
    assert (tags["strategy"], tags["seed"], tags["workload"]) == ("random", "3", GQA_WORKLOAD.name)
    assert parent.data.params["strategy"] == "random" and parent.data.params["workload.head_dim"] == "128"

    # One child per trial number, config as params, measurement as metrics.
    by_number = {int(r.data.tags["trial"]): r for r in children}
    assert sorted(by_number) == list(range(TRIALS))
    for trial in result.trials:
        child = by_number[trial.number]
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert {k: child.data.params[k] for k in trial.config} == {k: str(v) for k, v in trial.config.items()}
        assert child.data.tags["status"] == trial.measurement.status.value
        if trial.measurement.ok:
            assert child.info.status == "FINISHED"
            metrics = child.data.metrics
            assert metrics["median_ms"] == pytest.approx(trial.measurement.median_ms)
            for name in ("p20_ms", "p80_ms", "tflops", "compile_s", "registers", "spills", "shared_bytes",
                         "rel_error"):
                assert name in metrics, name
            assert metrics["ok"] == 1.0
        else:
            assert child.info.status == "FAILED" and child.data.metrics["ok"] == 0.0
            assert "median_ms" not in child.data.metrics

    # Best so far on the parent, step = trial number, never getting worse.
    history = mlflow_client.get_metric_history(parent.info.run_id, "best_ms")
    steps = sorted((m.step, m.value) for m in history)
    assert [s for s, _ in steps] == [t.number for t in result.trials][-len(steps):]
    values = [v for _, v in steps]
    assert values == sorted(values, reverse=True)
    assert values[-1] == pytest.approx(result.best.cost_ms)

    artifacts = {a.path for a in mlflow_client.list_artifacts(parent.info.run_id)}
    assert {"convergence.png", "best_config.json", "trials.csv", "trials.jsonl"} <= artifacts
    local = Path(mlflow_client.download_artifacts(parent.info.run_id, "best_config.json"))
    best = json.loads(local.read_text())
    assert best["config"] == result.best.config.to_dict() and best["trials"] == TRIALS
    png = Path(mlflow_client.download_artifacts(parent.info.run_id, "convergence.png")).read_bytes()
    assert png.startswith(b"\x89PNG")
    csv_lines = Path(mlflow_client.download_artifacts(parent.info.run_id, "trials.csv")).read_text().splitlines()
    assert len(csv_lines) == TRIALS + 1


def test_failed_trials_are_children_too(stores, h200, mlflow_client) -> None:
    """Every third config fails in its own way: each failure is a FAILED child with its status."""
    from flashtune.kernels.config import Config
    from flashtune.objectives.types import Measurement, Status

    failures = [Status.COMPILE_ERROR, Status.WRONG_RESULT, Status.TIMEOUT, Status.CRASHED, Status.OUT_OF_RESOURCES]
    calls = []

    def evaluate(config: Config) -> Measurement:
        calls.append(config)
        if len(calls) % 3 == 0:
            return Measurement.failure(config, WORKLOAD, failures[len(calls) // 3 % len(failures)], "boom")
        return Measurement(config, WORKLOAD, Status.OK, median_ms=1.0 + len(calls), p20_ms=1.0, p80_ms=2.0)

    study = Study(name="some-fail", workload=WORKLOAD, hardware=h200, trials=12)
    result = run_study(study, evaluate, tracking_uri=stores["tracking_uri"], storage_url=stores["storage"])
    failed = [t for t in result.trials if not t.measurement.ok]
    assert len(failed) == 4
    runs = mlflow_client.search_runs([result.experiment_id], filter_string="tags.role = 'trial'", max_results=1000)
    assert len(runs) == len(result.trials)
    assert sum(1 for r in runs if r.info.status == "FAILED") == len(failed)
    statuses = sorted(r.data.tags["status"] for r in runs if r.info.status == "FAILED")
    assert statuses == sorted(t.measurement.status.value for t in failed)
    assert all(r.data.tags["error"] == "boom" for r in runs if r.info.status == "FAILED")


def test_the_compiler_output_of_a_failed_trial_is_its_artifact(stores, h200, mlflow_client) -> None:
    from flashtune.kernels.config import Config
    from flashtune.objectives.types import Measurement, Status

    dump = "module {\n  tt.func @k()\n}\nx.py:1:0: error: Failures have been detected\n"

    def evaluate(config: Config) -> Measurement:
        return Measurement.failure(config, WORKLOAD, Status.COMPILE_ERROR, "RuntimeError: PassManager::run failed",
                                   compiler_output=dump)

    result = run_study(Study(name="dump", workload=WORKLOAD, hardware=h200, trials=1), evaluate,
                       tracking_uri=stores["tracking_uri"], storage_url=stores["storage"])
    (run,) = mlflow_client.search_runs([result.experiment_id], filter_string="tags.role = 'trial'")
    assert Path(mlflow_client.download_artifacts(run.info.run_id, "compiler_output.txt")).read_text() == dump


def test_two_gpus_two_experiments(replay_dir, h100_replay_dir, stores, h200, mlflow_client) -> None:
    from flashtune.objectives.hardware import load_spec

    a = replay_study(replay_dir, stores, h200, name="same-name", trials=3)
    b = replay_study(h100_replay_dir, stores, load_spec("h100"), name="same-name", trials=3)
    assert a.experiment_id != b.experiment_id
    names = {e.name for e in mlflow_client.search_experiments()}
    assert {experiment_name("NVIDIA H200"), experiment_name(load_spec("h100").name)} <= names


@pytest.mark.parametrize("uri, words", [
    ("sqlite://mlflow.db", "three slashes"),
    ("ftp://example/mlflow", "unknown scheme"),
    ("", "non-empty"),
    ("postgresql://nobody@127.0.0.1:1/none", "cannot be used"),
])
def test_bad_tracking_uri_is_named(uri: str, words: str) -> None:
    with pytest.raises(ValueError) as info:
        check_tracking_uri(uri)
    assert words in str(info.value) and repr(uri) in str(info.value)


def test_no_success_logs_no_best(tmp_path, stores, h200, mlflow_client) -> None:
    """A study whose configs all fail: children FAILED, no inf drawn on the parent."""
    from flashtune.kernels.config import Config
    from flashtune.objectives.types import Measurement, Status

    def evaluate(config: Config) -> Measurement:
        return Measurement.failure(config, WORKLOAD, Status.COMPILE_ERROR, "ptxas died")

    study = Study(name="all-fail", workload=WORKLOAD, hardware=h200, trials=4)
    result = run_study(study, evaluate, tracking_uri=stores["tracking_uri"], storage_url=stores["storage"])
    assert result.status == "FINISHED" and result.best is None
    assert mlflow_client.get_metric_history(result.parent_run_id, "best_ms") == []
    parent = mlflow_client.get_run(result.parent_run_id)
    assert parent.data.metrics["trials_failed"] == 4 and not math.isinf(parent.data.metrics["trials"])


def test_a_write_that_loses_an_insert_race_is_run_again(stores) -> None:
    # Two workers logging the same params at once: SQLite refuses the second insert. The
    # retry finds the row there and MLflow accepts the identical param.
    import sqlite3

    from mlflow import MlflowClient
    from mlflow.entities import Param

    from flashtune.experiments.tracking.tracker import retry_insert_race

    client = MlflowClient(tracking_uri=stores["tracking_uri"])
    run = client.create_run(client.create_experiment("race"))
    calls = []

    def write() -> None:
        calls.append(1)
        if len(calls) == 1:
            client.log_batch(run.info.run_id, params=[Param("BLOCK_M", "64")])  # the other worker's insert
            raise sqlite3.IntegrityError("UNIQUE constraint failed: params.key, params.run_uuid")
        client.log_batch(run.info.run_id, params=[Param("BLOCK_M", "64")])

    retry_insert_race(write)
    assert len(calls) == 2 and client.get_run(run.info.run_id).data.params == {"BLOCK_M": "64"}
    with pytest.raises(ValueError, match="other"):
        retry_insert_race(lambda: (_ for _ in ()).throw(ValueError("other")))


@pytest.mark.parametrize("folder", ["/proc", "read-only"])
def test_unwritable_sqlite_tracking_uri_is_one_line_at_once(folder: str, tmp_path, capsys) -> None:
    # MLflow retries a failed schema write for ~100 s; the check refuses the URI before that.
    import os

    from flashtune.experiments.cli.main import main

    if folder == "read-only":
        folder = str(tmp_path / "ro")
        os.mkdir(folder, 0o555)
        try:
            (tmp_path / "ro" / "probe").touch()
            pytest.skip("a read-only mode does not stop this user (root)")
        except PermissionError:
            pass
    started = time.monotonic()
    code = main(["tune", "--trials", "1", "--no-progress", "--tracking-uri", f"sqlite:///{folder}/mlflow.db",
                 "--storage", f"sqlite:///{tmp_path}/optuna.db"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "is not writable" in err and folder in err
    assert time.monotonic() - started < 10  # a bound, not a timing: the unfixed path takes ~100 s


def test_workers_of_one_host_agree_on_one_parent_when_an_insert_is_slow(stores, mlflow_client) -> None:
    """Three workers start one shared study; the first one's parent insert takes longer than
    the settle (as when SQLite's write lock makes it wait), with its start time read before.
    Without the host lock the others had created and settled on their own parents, and the
    earliest-start rule later made one delete the parent another was using (CI, stop 30)."""

    class SlowInsertClient:
        """The first worker's client (trackers share one per URI, so this wraps, not patches)."""

        def __init__(self, client) -> None:
            self._client = client

        def __getattr__(self, name: str):
            return getattr(self._client, name)

        def create_run(self, experiment_id, *, tags=None, run_name=None):
            start_ms = int(time.time() * 1000)
            time.sleep(SETTLE_S * 1.5)
            return self._client.create_run(experiment_id, start_time=start_ms, tags=tags, run_name=run_name)

    trackers = [MlflowTracker(stores["tracking_uri"], study_name="shared", gpu_name="NVIDIA H200",
                              parent_tags={"strategy": "random"}, parent_params={"strategy": "random"}, shared=True)
                for _ in range(3)]
    trackers[0].client = SlowInsertClient(trackers[0].client)
    with ThreadPoolExecutor(len(trackers)) as pool:
        started = []
        for i, tracker in enumerate(trackers):
            started.append(pool.submit(tracker.start, []))
            time.sleep(0.1 if i == 0 else 0.05)  # the slow one first, then the others while it waits
        for future in started:
            future.result(timeout=60)
    chosen = {t.parent_run_id for t in trackers}
    assert len(chosen) == 1, f"the workers chose different parents: {chosen}"
    parent = mlflow_client.get_run(chosen.pop())
    assert parent.info.lifecycle_stage == "active" and parent.info.status == "RUNNING"
    parents = mlflow_client.search_runs([parent.info.experiment_id], filter_string="tags.role = 'study'")
    assert [r.info.run_id for r in parents] == [parent.info.run_id]

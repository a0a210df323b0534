"""Many workers on one study through Optuna's storage: real PostgreSQL, real journal files,
real MLflow, real processes (`flashtune tune --workers N` and workers started by hand).

PostgreSQL comes from `.ci/setup-postgres.sh` (FLASHTUNE_TEST_POSTGRES_URL names another
server); each test makes its own throw-away databases. Without a server the tests skip,
unless FLASHTUNE_REQUIRE_SYSTEM_DEPS is set (CI), where a missing database is a failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient
from study_support import WORKLOAD, cli_env, flashtune_command, run_cli

from flashtune.experiments.study.ledger import RELEASED_ATTR, SharedLedger, TrialStore
from flashtune.experiments.study.storage import MEASUREMENT_ATTR, close_storage, open_storage
from flashtune.kernels.space import all_configs
from flashtune.objectives.feasibility import for_workload
from flashtune.objectives.hardware import load_spec

DEFAULT_URL = "postgresql://flashtune:flashtune@127.0.0.1:5432/flashtune_test"
STORAGE_NAME = "NVIDIA H200/{}"


# -- PostgreSQL ------------------------------------------------------------------------------


def _admin_url() -> str:
    return os.environ.get("FLASHTUNE_TEST_POSTGRES_URL", DEFAULT_URL)


def _connect(url: str):
    import psycopg2

    connection = psycopg2.connect(url, connect_timeout=5)
    connection.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
    return connection


@pytest.fixture
def postgres() -> Iterator[dict[str, str]]:
    """Two fresh databases on the test server: Optuna's and MLflow's (both keep an
    alembic_version table, so they cannot share one)."""
    url = _admin_url()
    try:
        admin = _connect(url)
    except Exception as exc:  # ImportError (no psycopg2), OperationalError (no server)
        message = f"PostgreSQL at {url} is not available ({type(exc).__name__}: {exc}); run .ci/setup-postgres.sh"
        if os.environ.get("FLASHTUNE_REQUIRE_SYSTEM_DEPS"):
            pytest.fail(message)
        pytest.skip(message)
    # SQLAlchemy 2.1 reads plain postgresql:// as psycopg 3; the dev extras bring psycopg2.
    base = url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg2://", 1)
    names = {kind: f"flashtune_{kind}_{uuid.uuid4().hex[:10]}" for kind in ("optuna", "mlflow")}
    with admin.cursor() as cursor:
        for name in names.values():
            cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {"storage": f"{base}/{names['optuna']}", "tracking_uri": f"{base}/{names['mlflow']}"}
    finally:
        from flashtune.experiments.tracking.tracker import mlflow_client

        mlflow_client.cache_clear()  # its connection pool would keep the database busy
        _close_cached_storages()
        with admin.cursor() as cursor:
            for name in names.values():
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


_STORAGES: dict[str, optuna.storages.BaseStorage] = {}


def _close_cached_storages() -> None:
    while _STORAGES:
        close_storage(_STORAGES.popitem()[1])


# -- helpers ---------------------------------------------------------------------------------


def tune(stores: dict[str, str], replay_dir: Path, name: str, trials: int, *extra: str) -> list[str]:
    return ["tune", "--tracking-uri", stores["tracking_uri"], "--storage", stores["storage"],
            "--replay-dir", str(replay_dir), "--workload", "2,8,1024,64,causal", "--no-progress",
            "--study-name", name, "--trials", str(trials), *extra]


def _storage(url: str) -> optuna.storages.BaseStorage:
    # One storage per URL: a fresh one per poll would hold a pool of PostgreSQL
    # connections each until garbage collection and exhaust the server's slots.
    # open_storage: optuna.load_study does not read flashtune's journal:PATH URLs.
    if url not in _STORAGES:
        _STORAGES[url] = open_storage(url)
    return _STORAGES[url]


def stored(storage: str, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=STORAGE_NAME.format(name), storage=_storage(storage)).get_trials(
        deepcopy=False)


def check_study(stores: dict[str, str], name: str, trials: int) -> None:
    """``trials`` measured trials, configs unique, none RUNNING; MLflow: one FINISHED
    parent, exactly one finished child per measured trial."""
    everything = stored(stores["storage"], name)
    assert not [t.number for t in everything if t.state == optuna.trial.TrialState.RUNNING]
    measured = [t for t in everything if MEASUREMENT_ATTR in t.user_attrs]
    assert len(measured) == trials
    configs = [tuple(sorted(t.user_attrs[MEASUREMENT_ATTR]["config"].items())) for t in measured]
    assert len(set(configs)) == trials, "a config was measured twice"

    client = MlflowClient(tracking_uri=stores["tracking_uri"])
    experiment = client.get_experiment_by_name("flashtune/NVIDIA H200")
    parents = client.search_runs([experiment.experiment_id],
                                 filter_string=f"tags.role = 'study' AND tags.study = '{name}'")
    assert len(parents) == 1, [p.info.run_id for p in parents]
    assert parents[0].info.status == "FINISHED"
    children = client.search_runs([experiment.experiment_id], max_results=5000,
                                  filter_string=f"tags.mlflow.parentRunId = '{parents[0].info.run_id}'")
    numbers = sorted(int(r.data.tags["trial"]) for r in children)
    assert numbers == sorted(t.number for t in measured), "MLflow children differ from the stored trials"
    assert all(r.info.status in ("FINISHED", "FAILED") for r in children)
    by_number = {t.number: t.user_attrs[MEASUREMENT_ATTR]["config"] for t in measured}
    for run in children:
        config = by_number[int(run.data.tags["trial"])]
        assert {k: run.data.params[k] for k in config} == {k: str(v) for k, v in config.items()}


def no_database_errors(text: str) -> None:
    for marker in ("Traceback", "OperationalError", "IntegrityError", "StorageInternalError", "deadlock"):
        assert marker not in text, text[-3000:]


# -- claims (fast, journal storage) -------------------------------------------------------------


def _shared(storage, name: str) -> SharedLedger:
    h200 = load_spec("h200")
    space = for_workload(WORKLOAD, h200)
    return SharedLedger(TrialStore(storage, name, {"w": WORKLOAD.name}, space))


def test_claims_oldest_wins_and_budget_is_exact(tmp_path: Path) -> None:
    storage = open_storage(f"journal:{tmp_path / 'optuna.log'}")
    a, b = _shared(storage, "claims"), _shared(storage, "claims")
    configs = [c for c in all_configs() if c in a.store.space][:3]
    first = a.claim(configs[0], budget=2)
    assert first is not None and first.number == 0
    assert b.claim(configs[0], budget=2) is None, "a config claimed twice"
    second = b.claim(configs[1], budget=2)
    assert second is not None
    assert a.claim(configs[2], budget=2) is None, "the budget was overrun"
    released = [t.user_attrs.get(RELEASED_ATTR) for t in storage.get_all_trials(a.study_id)]
    assert released.count("duplicate") == 1 and released.count("over budget") == 1
    snap = b.snapshot()
    assert sorted(snap.claims.values(), key=str) == sorted(configs[:2], key=str)


# -- PostgreSQL: --workers 4, kill -9, heartbeat --------------------------------------------------


@pytest.mark.slow
def test_four_workers_on_postgres(postgres, replay_dir, tmp_path) -> None:
    """`flashtune tune --workers 4`: 200 trials, unique configs, MLflow children = trials."""
    name = "pg-4x50"
    result = run_cli(*tune(postgres, replay_dir, name, 200, "--workers", "4", "--strategy", "random"),
                     cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "started 4 workers" in result.stderr
    no_database_errors(result.stderr + result.stdout)
    check_study(postgres, name, 200)
    owners = {t.user_attrs["flashtune.owner"]["pid"] for t in stored(postgres["storage"], name)
              if MEASUREMENT_ATTR in t.user_attrs}
    assert len(owners) == 4, "not every worker measured"


@pytest.mark.slow
def test_kill_9_of_one_worker(postgres, replay_dir, tmp_path) -> None:
    """Four workers started by hand; one is SIGKILLed mid-study; the others complete it
    with nothing RUNNING and nothing recorded twice."""
    name, trials = "pg-kill", 120
    procs = [subprocess.Popen(flashtune_command(*tune(postgres, replay_dir, name, trials, "--worker-index", str(i),
                                                      "--strategy", "tpe", "--heartbeat", "1")),
                              cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            done = sum(MEASUREMENT_ATTR in t.user_attrs for t in stored(postgres["storage"], name))
        except KeyError:
            done = 0
        if done >= 30:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the workers did not reach 30 trials")
    procs[1].send_signal(signal.SIGKILL)
    outputs = [proc.communicate(timeout=600) for proc in procs]
    assert procs[1].returncode == -signal.SIGKILL, outputs[1][1][-3000:]
    for index, (proc, (out, err)) in enumerate(zip(procs, outputs)):
        if index != 1:
            assert proc.returncode == 0, err[-3000:]
            no_database_errors(out + err)
    check_study(postgres, name, trials)


@pytest.mark.slow
def test_heartbeat_fails_a_dead_worker_of_another_host(postgres) -> None:
    """A claim whose worker is on another host is failed by Optuna's heartbeat, not by pid."""
    storage = open_storage(postgres["storage"], heartbeat_s=1)
    shared = _shared(storage, "heartbeat")
    config = next(c for c in all_configs() if c in shared.store.space)
    claim = shared.claim(config, budget=10)
    storage.set_trial_user_attr(claim.trial_id, "flashtune.owner", {"host": "elsewhere", "pid": 1})
    storage.record_heartbeat(claim.trial_id)
    assert shared.reap() == 0  # fresh heartbeat: alive
    time.sleep(3.5)  # grace period: 3 intervals
    assert shared.reap() == 1
    assert storage.get_trial(claim.trial_id).state == optuna.trial.TrialState.FAIL
    assert not shared.snapshot().claims  # its config is free again


# -- journal storage: strategies without parallel asks ----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["skopt", "ga", "grid"])
def test_strategies_without_parallel_asks_on_a_journal(strategy, replay_dir, stores, tmp_path) -> None:
    """skopt, DEAP and grid with 3 workers on one journal file: each worker's instance is
    seeded apart and told the shared history; RUNNING claims keep them off each other."""
    journal = {**stores, "storage": f"journal:{tmp_path / 'optuna.log'}"}
    name = f"journal-{strategy}"
    result = run_cli(*tune(journal, replay_dir, name, 24, "--workers", "3", "--strategy", strategy),
                     cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    check_study(journal, name, 24)
    released = [t for t in stored(journal["storage"], name) if RELEASED_ATTR in t.user_attrs]
    # Collisions are resolved by the storage, not avoided by luck: whatever happened, no
    # released claim is counted, and none is left RUNNING (checked above).
    assert all(t.state == optuna.trial.TrialState.FAIL for t in released)

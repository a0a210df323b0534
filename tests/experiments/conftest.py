"""Fixtures for the experiments tests: synthetic recorded tables on disk, throw-away stores.

Two groups share this file: the strategy-comparison tests (``recorded_tables``, needle
landscapes from tests/search/needles.py) and the study tests (``replay_dir``,
``stores``; helpers in study_support.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from study_support import GQA_WORKLOAD, WORKLOAD, write_tables

from flashtune.objectives.hardware import HardwareSpec, load_spec
from flashtune.objectives.replay import write_table
from flashtune.objectives.types import Workload

# -- strategy comparison ------------------------------------------------------------------


def _needles():
    # The generator lives with the search tests; load it by path (tests are not a package).
    path = Path(__file__).resolve().parents[1] / "search" / "needles.py"
    spec = importlib.util.spec_from_file_location("flashtune_test_needles", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def recorded_tables(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two synthetic H200 tables: head_dim 256 (many infeasible) and 64 (all feasible)."""
    needles = _needles()
    folder = tmp_path_factory.mktemp("h200")
    paths = []
    for seed, workload in enumerate((needles.WORKLOAD, Workload(4, 16, 16, 1024, 1024, 64, causal=True))):
        path = folder / f"{workload.name}.jsonl"
        write_table(path, needles.needle_table(seed, workload=workload))
        paths.append(path)
    return paths


# -- studies (MLflow, Optuna storage, CLI) ------------------------------------------------


@pytest.fixture(scope="session")
def h200() -> HardwareSpec:
    return load_spec("h200")


@pytest.fixture(scope="session")
def replay_dir(tmp_path_factory: pytest.TempPathFactory, h200: HardwareSpec) -> Path:
    """Synthetic H200 tables for WORKLOAD and GQA_WORKLOAD."""
    return write_tables(tmp_path_factory.mktemp("tables") / "h200", h200, [WORKLOAD, GQA_WORKLOAD])


@pytest.fixture(scope="session")
def h100_replay_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Synthetic H100 tables (for comparing GPU models without either GPU)."""
    return write_tables(tmp_path_factory.mktemp("tables") / "h100", load_spec("h100"), [WORKLOAD])


@pytest.fixture(scope="session")
def empty_mlflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow database with its schema made once: MLflow's migrations take seconds."""
    from flashtune.experiments.tracking.tracker import mlflow_client

    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    mlflow_client(f"sqlite:///{path}").search_experiments(max_results=1)
    # Fold the write-ahead log into the file before copying it (closing(): sqlite3's own
    # context manager commits but leaves the connection open).
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@pytest.fixture
def stores(tmp_path: Path, empty_mlflow_db: Path) -> dict[str, str]:
    """A fresh MLflow tracking URI and Optuna storage URL in the test's folder."""
    shutil.copyfile(empty_mlflow_db, tmp_path / "mlflow.db")
    return {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "storage": f"sqlite:///{tmp_path / 'optuna.db'}"}


@pytest.fixture
def mlflow_client(stores: dict[str, str]) -> Iterator[object]:
    from mlflow import MlflowClient

    yield MlflowClient(tracking_uri=stores["tracking_uri"])

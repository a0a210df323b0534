"""Fixtures of the study tests: synthetic recorded tables and throw-away stores."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from study_support import GQA_WORKLOAD, WORKLOAD, write_tables

from flashtune.objectives.hardware import HardwareSpec, load_spec


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
    from flashtune.experiments.tracking import mlflow_client

    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    mlflow_client(f"sqlite:///{path}").search_experiments(max_results=1)
    with sqlite3.connect(path) as connection:  # fold the write-ahead log into the file before copying it
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

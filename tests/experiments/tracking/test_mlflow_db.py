"""The MLflow SQLite database is created whole or not at all; a half-created one is repaired."""

from __future__ import annotations

import contextlib
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from disk_support import small_disk

from flashtune.experiments.localhost import tune_sqlite_connections
from flashtune.experiments.tracking.mlflow_db import BrokenDatabase, prepare_sqlite_db, schema_problem

# Creates the database the way a study's start does, then says so on stdout.
_CREATE = "import sys; from pathlib import Path; from flashtune.experiments.tracking.mlflow_db import prepare_sqlite_db; " \
          "prepare_sqlite_db(Path(sys.argv[1])); print('created', flush=True)"


def _client(path: Path, fresh: bool = False):
    from mlflow import MlflowClient

    # MLflow keeps one engine per URI for the process: after the file was replaced, reach
    # the new one through another spelling of its path (a study opens it once, after).
    return MlflowClient(tracking_uri=f"sqlite:///{path.parent}/./{path.name}" if fresh else f"sqlite:///{path}")


def _broken(path: Path, *, runs: int = 0, leftover: bool = True) -> None:
    """A database as an interrupted migration leaves it (an ``_alembic_tmp_`` copy of a table
    still there: every later open failed, issue 16), or an out-of-date one (an older
    schema version), with ``runs`` runs."""
    prepare_sqlite_db(path)
    client = _client(path)
    experiment = client.create_experiment("e")
    for _ in range(runs):
        client.create_run(experiment)
    with contextlib.closing(sqlite3.connect(path)) as db:
        if leftover:
            db.execute("CREATE TABLE _alembic_tmp_metrics (key VARCHAR(250))")
        else:
            db.execute("UPDATE alembic_version SET version_num = '0584bdc529eb'")
        db.commit()


def test_a_new_database_is_complete_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "mlflow.db"
    assert prepare_sqlite_db(path) is None
    assert schema_problem(path) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]
    client = _client(path)
    client.create_run(client.create_experiment("e"))
    assert prepare_sqlite_db(path) is None  # a current one is left as it is


def test_a_new_database_needs_little_more_room_than_the_file(tmp_path):
    """It was built with a write-ahead log, whose migrations peaked at 4.9 MiB of disk for
    a 0.9 MiB file; MLflow alone needs about 1 MiB. A 2 MiB disk holds it now."""
    with small_disk(tmp_path / "small", "2m") as small:
        tune_sqlite_connections()  # as a study's start: its connections use WAL
        assert prepare_sqlite_db(small / "mlflow.db") is None
        assert schema_problem(small / "mlflow.db") is None
    # Only the database being built went without the log: the study's connections keep it.
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    finally:
        engine.dispose()


def test_a_half_migrated_database_without_runs_is_moved_aside_and_made_anew(tmp_path):
    path = tmp_path / "mlflow.db"
    _broken(path)
    assert "_alembic_tmp_metrics" in schema_problem(path)
    notice = prepare_sqlite_db(path)
    assert notice is not None and "moved aside to mlflow.db.broken-" in notice
    assert schema_problem(path) is None
    # The file and its write-ahead log side files, if any, all moved together.
    assert len([p for p in tmp_path.glob("mlflow.db.broken-*") if not p.name.endswith(("-wal", "-shm"))]) == 1
    _client(path, fresh=True).create_experiment("works")


@pytest.mark.parametrize("leftover, advice", [
    (True, "an interrupted `mlflow db upgrade` cannot be finished in place: restore the copy taken before it"),
    (False, "back it up (cp {path} {path}.bak), then run `mlflow db upgrade sqlite:///{path}`"),
])
def test_a_broken_database_with_runs_is_left_alone_and_the_error_says_what_repairs_it(tmp_path, leftover, advice):
    path = tmp_path / "mlflow.db"
    _broken(path, runs=2, leftover=leftover)
    problem = schema_problem(path)
    with pytest.raises(BrokenDatabase) as caught:
        prepare_sqlite_db(path)
    message = str(caught.value)
    assert message.startswith(f"MLflow database {path} holds 2 runs but is ")
    assert advice.format(path=path) in message
    # Left as it was: same problem, its runs, nothing moved aside (side files of SQLite's
    # write-ahead log may come and go with connections).
    assert schema_problem(path) == problem and not list(tmp_path.glob("mlflow.db.broken-*"))
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2


def test_a_missing_folder_is_an_error_not_created(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        prepare_sqlite_db(tmp_path / "no" / "such" / "mlflow.db")
    assert not (tmp_path / "no").exists()


@pytest.mark.slow
def test_a_kill_at_any_moment_of_creation_leaves_no_database_or_a_working_one(tmp_path):
    """SIGKILL and SIGTERM at random moments of a real creation: never a broken file."""
    rng = random.Random(16)
    path = tmp_path / "mlflow.db"
    outcomes = []
    for attempt in range(8):
        for leftover in tmp_path.iterdir():
            leftover.unlink()
        proc = subprocess.Popen([sys.executable, "-c", _CREATE, str(path)], stdout=subprocess.PIPE, text=True)
        # Kill between the temporary file's appearance and a little after the link.
        deadline = time.monotonic() + 300
        while not list(tmp_path.glob(".mlflow.db.*.creating")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 2.0))
        proc.send_signal(signal.SIGKILL if attempt % 2 == 0 else signal.SIGTERM)
        proc.communicate(timeout=120)
        outcomes.append("absent" if not path.exists() else "complete")
        assert not path.exists() or schema_problem(path) is None, attempt
        # The next start finishes the job and sweeps the dead process's temporary file.
        assert prepare_sqlite_db(path) is None and schema_problem(path) is None
        assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"], attempt
    print(f"\nkills during creation: {outcomes.count('absent')} left no file, {outcomes.count('complete')} a complete one")


@pytest.mark.parametrize("fraction", [0.004, 0.5, 0.99])
def test_a_truncated_database_with_runs_is_left_in_place_with_the_repair(tmp_path, fraction):
    """Issue 23: a truncated file was moved aside as one that "held no runs" (it held 101)."""
    path = tmp_path / "mlflow.db"
    prepare_sqlite_db(path)
    client = _client(path)
    experiment = client.create_experiment("e")
    for _ in range(30):
        client.create_run(experiment)
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = path.read_bytes()
    path.write_bytes(data[:max(4096, int(len(data) * fraction))])
    cut = path.read_bytes()
    with pytest.raises(BrokenDatabase, match=rf"MLflow database {path} is .*it may hold runs, so it is left as it is.*"
                                             rf"sqlite3 {path} \.recover.*mv {path} {path}\.damaged"):
        prepare_sqlite_db(path)
    assert path.read_bytes() == cut and not list(tmp_path.glob("mlflow.db.broken-*"))


def test_an_empty_file_held_nothing_and_is_made_anew(tmp_path):
    path = tmp_path / "mlflow.db"
    path.write_bytes(b"")
    assert "moved aside" in prepare_sqlite_db(path)
    assert schema_problem(path) is None

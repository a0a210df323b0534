"""The MLflow SQLite database: created whole or not at all; a half-created one repaired.

MLflow creates its schema by running its alembic migrations (about fifty) in place on the
user's file, and SQLite's migrations are not one transaction: alembic rebuilds tables
through ``_alembic_tmp_*`` copies. A process killed in that second (about 1 s at a study's
start) left a file that every later run refused (``table _alembic_tmp_experiments already
exists``, ``out-of-date database schema``), ``mlflow db upgrade`` included.

So the schema is built in a temporary file beside the database, and the finished file is
linked into place in one step (``os.link``: atomic, and it never replaces a database that
another process made meanwhile). A kill at any moment leaves no database or a complete
one; a temporary file of a killed process is removed by the next start. A database that a
kill left half-created by an earlier version holds no runs (creation comes before the
first run): it is moved aside and made anew. A database with runs whose schema is not
current, or a damaged one (truncated: its runs cannot be counted), is never touched: the
error says what repairs it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from pathlib import Path

from flashtune.experiments.localhost import journal_in_memory, process_alive

_log = logging.getLogger(__name__)

#: Suffix of the temporary database a process builds: ``.<name>.<pid>.creating``.
_CREATING = ".creating"


class BrokenDatabase(ValueError):
    """An MLflow database with runs whose schema is unusable; the message says how to repair it."""


def prepare_sqlite_db(path: Path) -> str | None:
    """Make ``path`` a complete MLflow database of this MLflow's schema.

    Args:
        path: the database file of a ``sqlite:///`` tracking URI; its folder must exist.

    Returns:
        A line for the user when a broken database was moved aside, else None.

    Raises:
        ValueError: the folder does not exist.
        BrokenDatabase: the file holds runs and its schema cannot be used as it is.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(f"MLflow database {path}: the folder {path.parent} does not exist")
    _remove_dead_temporaries(path)
    notice = None
    if path.exists():
        problem = schema_problem(path)
        if problem is None:
            return None
        runs = _count_runs(path)
        if runs is None:
            # Damaged (a truncated copy, a full disk): what it held cannot be counted, so it
            # is never taken for an empty one (101 runs were moved aside as none).
            raise BrokenDatabase(_damaged_advice(path, problem))
        if runs:
            raise BrokenDatabase(_repair_advice(path, problem, runs))
        aside = path.with_name(f"{path.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}")
        _move_database(path, aside)
        notice = (f"MLflow database {path} was {problem} (an interrupted start of an earlier version) and "
                  f"held no runs: moved aside to {aside.name}, and a new one created")
    _create(path)
    return notice


def schema_problem(path: Path) -> str | None:
    """What keeps ``path`` from being used as a current MLflow database; None if nothing."""
    try:
        with contextlib.closing(_connect(path)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            leftovers = sorted(t for t in tables if t.startswith("_alembic_tmp_"))
            if leftovers:
                return f"left half-migrated (table {leftovers[0]} of an interrupted migration)"
            missing = sorted(_expected_tables() - tables)
            if missing:
                return f"left half-created (table {missing[0]} missing)"
            versions = [row[0] for row in db.execute("SELECT version_num FROM alembic_version")]
            check = [row[0] for row in db.execute("PRAGMA quick_check")]
            if check != ["ok"]:
                return f"damaged ({check[0]})"
    except sqlite3.DatabaseError as exc:
        return f"not a usable SQLite database ({exc})"
    head = _head_revision()
    if versions != [head]:
        return f"at schema version {', '.join(versions) or 'none'}, not this MLflow's {head}"
    return None


def _connect(path: Path) -> sqlite3.Connection:
    # Read-write, never creating: a read-only connection cannot open a database that a
    # killed process left in WAL mode (SQLite must recover its log first).
    return sqlite3.connect(f"file:{path}?mode=rw", uri=True)


def _expected_tables() -> set[str]:
    import mlflow.store.tracking.dbmodels.models  # noqa: F401 - registers the tables on Base
    from mlflow.store.db.base_sql_model import Base

    return {"alembic_version", *Base.metadata.tables}


def _head_revision() -> str:
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


def _count_runs(path: Path) -> int | None:
    """The runs ``path`` holds: 0 when it has no runs table, None when it cannot be read."""
    try:
        with contextlib.closing(_connect(path)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "runs" not in tables:
                return 0  # creation stopped before the runs table: nothing to lose
            if [row[0] for row in db.execute("PRAGMA quick_check")] != ["ok"]:
                return None
            return int(db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])
    except sqlite3.DatabaseError:
        return None


def _damaged_advice(path: Path, problem: str) -> str:
    return (f"MLflow database {path} is {problem}: it may hold runs, so it is left as it is. Restore it from a "
            f"backup, or see what it still holds with `sqlite3 {path} .recover`; to start a new database "
            f"instead, move it aside (mv {path} {path}.damaged) and run again")


def _repair_advice(path: Path, problem: str, runs: int) -> str:
    uri = f"sqlite:///{path}"
    if "half-migrated" in problem:
        # Tried on such files: dropping the _alembic_tmp_ table and upgrading again fails
        # too (the step before was half applied); only the copy from before the upgrade helps.
        steps = (f"an interrupted `mlflow db upgrade` cannot be finished in place: restore the copy taken "
                 f"before it, then run `mlflow db upgrade {uri}` again (or move the file aside to start a "
                 "new database; its runs stay readable with sqlite3)")
    else:
        steps = f"back it up (cp {path} {path}.bak), then run `mlflow db upgrade {uri}`"
    return f"MLflow database {path} holds {runs} runs but is {problem}: {steps}"


def _create(path: Path) -> None:
    """Build the schema in a temporary file beside ``path``, then link it into place."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}{_CREATING}")
    _remove(temporary)
    try:
        _build_schema(temporary)
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)  # atomic, and never over a database made meanwhile
        except FileExistsError:
            pass  # another process created it first: theirs is as good
        _fsync_folder(path.parent)
    finally:
        _remove(temporary)


def _build_schema(temporary: Path) -> None:
    """MLflow's own creation (tables, migrations, default experiment) on ``temporary``,
    left as one self-contained file (no write-ahead log beside it)."""
    from mlflow.store.tracking import DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    uri = f"sqlite:///{temporary}"
    try:
        # No write-ahead log while building: the file is linked into place only once whole.
        with journal_in_memory():
            SqlAlchemyStore(uri, DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH)
    finally:
        engine = SqlAlchemyStore._engine_map.pop(uri, None)
        if engine is not None:
            engine.dispose()
    with contextlib.closing(sqlite3.connect(temporary)) as db:
        # The WAL (if this process's connections use one) goes into the file itself:
        # the link below moves one file, not its side files.
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("PRAGMA journal_mode=DELETE")


def _remove_dead_temporaries(path: Path) -> None:
    """Remove temporary databases of processes that are gone (killed while creating)."""
    for temporary in path.parent.glob(f".{path.name}.*{_CREATING}"):
        pid = temporary.name[len(path.name) + 2:-len(_CREATING)]
        if pid.isdigit() and not process_alive(int(pid)):
            _remove(temporary)


def _move_database(path: Path, aside: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):  # absent, or moved by another process now
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

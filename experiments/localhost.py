"""What the embedded stores share on this host: SQLite settings, whether a process lives.

Below both ``experiments/study`` (Optuna storage) and ``experiments/tracking`` (MLflow):
each opens SQLite files and checks whether the worker that wrote a row is still alive.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    # A zombie (killed, not yet reaped by its parent) answers kill(0) but runs nothing.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


# -- SQLite settings for the embedded stores (MLflow's and Optuna's default files) ------------
#
# Each MLflow or Optuna write is its own transaction, and SQLite's default rollback journal
# syncs the disk several times per commit: about 15 ms a commit on a plain disk, which made
# bookkeeping cost more than a replayed trial. Write-ahead logging with
# ``synchronous=NORMAL`` syncs once per checkpoint instead; a committed transaction still
# survives the process being killed (``kill -9``), which is the crash that studies must
# survive; only a power cut may lose the last commits. WAL also lets ``mlflow ui`` read
# while a study writes.

_sqlite_tuned = False
#: Set inside :func:`journal_in_memory`, for the connections this thread opens there.
_scratch = threading.local()


def tune_sqlite_connections() -> None:
    """Make every SQLite connection SQLAlchemy opens in this process use WAL (idempotent)."""
    global _sqlite_tuned
    if _sqlite_tuned:
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    event.listen(Engine, "connect", _on_connect)
    _sqlite_tuned = True


@contextlib.contextmanager
def journal_in_memory() -> Iterator[None]:
    """SQLite connections this thread opens inside the block keep their rollback journal in
    memory and never sync: for a scratch file that is used only if it is finished (then
    synced by the caller), never after a crash. Why: with WAL, the log beside the file
    grew to about 4 MiB during MLflow's migrations (SQLite checkpoints it every 1,000
    pages and does not shrink it), so creating a 0.9 MiB database needed 4.9 MiB free."""
    _scratch.active = True
    try:
        yield
    finally:
        _scratch.active = False


def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return  # PostgreSQL, MySQL...: their own settings
    cursor = dbapi_connection.cursor()
    try:
        if getattr(_scratch, "active", False):
            cursor.execute("PRAGMA journal_mode=MEMORY")
            cursor.execute("PRAGMA synchronous=OFF")
            return
        mode = cursor.execute("PRAGMA journal_mode").fetchone()
        if mode and str(mode[0]).lower() != "memory":  # :memory: databases cannot use WAL
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")  # a reader (mlflow ui) holding a lock: wait, don't fail
    except sqlite3.DatabaseError:
        pass  # a read-only or locked file: keep SQLite's defaults rather than fail the study
    finally:
        cursor.close()

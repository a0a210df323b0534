"""SQLite settings for the embedded stores (MLflow's and Optuna's default files).

Each MLflow or Optuna write is its own transaction, and SQLite's default rollback journal
syncs the disk several times per commit: about 15 ms a commit on a plain disk, which made
bookkeeping cost more than a replayed trial. Write-ahead logging with
``synchronous=NORMAL`` syncs once per checkpoint instead; a committed transaction still
survives the process being killed (``kill -9``), which is the crash that studies must
survive; only a power cut may lose the last commits. WAL also lets ``mlflow ui`` read
while a study writes.
"""

from __future__ import annotations

import sqlite3
from typing import Any

_installed = False


def tune_sqlite_connections() -> None:
    """Make every SQLite connection SQLAlchemy opens in this process use WAL (idempotent)."""
    global _installed
    if _installed:
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    event.listen(Engine, "connect", _on_connect)
    _installed = True


def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return  # PostgreSQL, MySQL...: their own settings
    cursor = dbapi_connection.cursor()
    try:
        mode = cursor.execute("PRAGMA journal_mode").fetchone()
        if mode and str(mode[0]).lower() != "memory":  # :memory: databases cannot use WAL
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")  # a reader (mlflow ui) holding a lock: wait, don't fail
    except sqlite3.DatabaseError:
        pass  # a read-only or locked file: keep SQLite's defaults rather than fail the study
    finally:
        cursor.close()

"""What the embedded stores share on this host: SQLite settings, whether a process lives.

Below both ``experiments/study`` (Optuna storage) and ``experiments/tracking`` (MLflow):
each opens SQLite files and checks whether the worker that wrote a row is still alive.
"""

from __future__ import annotations

import contextlib
import errno
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
    """Make every SQLite connection SQLAlchemy opens in this process use WAL, and its errors
    name their file (:func:`full_disk`) (idempotent)."""
    global _sqlite_tuned
    if _sqlite_tuned:
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    event.listen(Engine, "connect", _on_connect)
    event.listen(Engine, "handle_error", _name_the_file)
    _sqlite_tuned = True


#: Attribute set on a ``sqlite3.Error`` raised through SQLAlchemy: the database file.
DATABASE_FILE_ATTR = "flashtune_database_file"


def _name_the_file(context: Any) -> None:
    """Note the database file on SQLite's error: neither SQLite's message ("database or
    disk is full") nor the errors MLflow and Optuna raise from it say which file."""
    error, engine = context.original_exception, context.engine
    if isinstance(error, sqlite3.Error) and engine is not None and engine.url.get_backend_name() == "sqlite":
        with contextlib.suppress(AttributeError):
            setattr(error, DATABASE_FILE_ATTR, engine.url.database)


#: errno of a write that found no room: a full disk, a spent quota, a file-size limit.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def full_disk(exc: BaseException | None) -> tuple[str | None, str] | None:
    """Whether ``exc``, or an error it was raised from, is a write that found no room.

    Returns:
        (the file written, when known; what the system or SQLite said), or None.
    """
    for _ in range(20):  # a chain is short; never follow a cycle
        if exc is None:
            return None
        if isinstance(exc, OSError) and exc.errno in _NO_ROOM:
            # A copy or a rename names its source first: the full disk is the target's.
            return exc.filename2 or exc.filename, exc.strerror or str(exc)
        if isinstance(exc, sqlite3.OperationalError) and (
                getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc)):
            return getattr(exc, DATABASE_FILE_ATTR, None), str(exc)
        exc = exc.__cause__ or exc.__context__
    return None


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


def first_line(exc: BaseException) -> str:
    """The first line of an error's message: SQLAlchemy appends the statement, its
    parameters and a web link on the lines after."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

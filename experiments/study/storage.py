"""Trials of a study persisted in Optuna storage, whatever strategy asked for them.

Optuna's storage is the study's source of truth: SQLite by default, any RDB URL
(PostgreSQL for many hosts) or ``journal:PATH`` (Optuna's JournalStorage, for several
processes on one host). Every measured config is one Optuna trial: the config as its
params (and a user attribute), the ``Measurement.to_dict()`` as a user attribute, and
the state COMPLETE (value = median ms) or FAIL (the config failed: infeasible, wrong
result, ...).

A trial is created RUNNING *before* it is measured, so a process killed mid-trial
leaves a trace. On resume, a RUNNING trial whose measurement was already written is
finished as it should have been (nothing lost); one without a measurement is marked
FAIL with ``flashtune.interrupted`` and is not part of the history, so its config may
be measured again (it never was to the end). Trial numbers in the history are
contiguous (0, 1, ...): they number measurements, not Optuna rows.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sqlite3
import time
import warnings
from typing import TYPE_CHECKING, Any

from flashtune.experiments.localhost import process_alive, tune_sqlite_connections  # noqa: F401 - re-exported: the ledger names them from here

if TYPE_CHECKING:  # optuna loads in ~1 s: only when a study runs, not for `flashtune --help`
    from optuna.storages import BaseStorage

DEFAULT_STORAGE = "sqlite:///flashtune_optuna.db"
#: What an RDB says when another process created Optuna's schema first.
_SCHEMA_RACE_WORDS = ("UniqueViolation", "duplicate key", "already exists", "UNIQUE constraint failed")

#: Study user attribute: what defines the study (checked on resume).
IDENTITY_ATTR = "flashtune.identity"
#: Trial user attributes.
NUMBER_ATTR = "flashtune.trial_number"
CONFIG_ATTR = "flashtune.config"
OWNER_ATTR = "flashtune.owner"
ELAPSED_ATTR = "flashtune.elapsed_s"
MEASUREMENT_ATTR = "flashtune.measurement"  # written last: its presence means the trial is complete
INTERRUPTED_ATTR = "flashtune.interrupted"

_log = logging.getLogger(__name__)


def is_shared_storage(url: str) -> bool:
    """Whether many workers may share a study in this storage: a server database or a
    journal file. SQLite is one writer at a time (see docs/reference.md): one process per study."""
    return not url.startswith("sqlite:")


def journal_path(url: str) -> str | None:
    """The file of a ``journal:PATH`` storage URL (``journal:///abs`` and ``journal:rel`` both
    work); None for another kind of storage, "" for a journal URL without a path."""
    if not url.startswith("journal:"):
        return None
    path = url[len("journal:"):]
    return path[2:] if path.startswith("//") else path


def close_storage(storage: BaseStorage) -> None:
    """Give an RDB storage's pooled connections back to the server now, not at garbage
    collection: PostgreSQL has a fixed number of connection slots shared by every worker."""
    engine = getattr(storage, "engine", None)
    if engine is not None:
        engine.dispose()


def open_storage(url: str, *, heartbeat_s: float | None = None) -> BaseStorage:
    """Open an Optuna storage from a URL, or raise naming the URL and the problem.

    Args:
        url: an SQLAlchemy URL (``sqlite:///flashtune_optuna.db``,
            ``postgresql://user@host/db``) or ``journal:PATH`` for a journal file.
        heartbeat_s: RDB storage only: Optuna's heartbeat interval; a RUNNING trial
            whose worker has not beaten for three intervals is stale (failed by any
            worker of the study). Journal storage has no heartbeat: its workers share a
            host and reap dead ones by process id.

    Raises:
        ValueError: the URL is malformed, its driver is missing, or it cannot be opened.
    """
    import optuna

    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"storage URL must be a non-empty string, got {url!r}")
    if url.startswith("journal:"):
        path = journal_path(url)
        if not path:
            raise ValueError(f"storage URL {url!r}: journal storage needs a file path, e.g. journal:optuna.log")
        from flashtune.experiments.study.journal import SafeJournalBackend  # imports optuna: only for a journal

        try:
            return optuna.storages.JournalStorage(SafeJournalBackend(path))
        except OSError as exc:
            raise ValueError(f"storage URL {url!r}: {exc}") from None
    if "://" not in url:
        raise ValueError(
            f"storage URL {url!r} is not a URL: use e.g. {DEFAULT_STORAGE}, postgresql://user@host/db or journal:PATH"
        )
    if url.startswith("sqlite://") and not url.startswith("sqlite:///"):
        raise ValueError(f"storage URL {url!r}: SQLite URLs need three slashes, e.g. {DEFAULT_STORAGE}")

    check_sqlite_file(url)
    tune_sqlite_connections()
    url = postgres_driver(url)
    try:
        # Optuna's RDBStorage logs its own schema creation; quiet while opening.
        logging.getLogger("optuna").setLevel(logging.WARNING)
        kwargs: dict[str, Any] = {}
        if heartbeat_s is not None:
            interval = max(1, round(heartbeat_s))  # Optuna takes whole seconds
            kwargs = {"heartbeat_interval": interval, "grace_period": 3 * interval}
        for attempt in range(5):
            try:
                with warnings.catch_warnings():  # "experimental" since Optuna 2.9; said once per worker is noise
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    return optuna.storages.RDBStorage(url, **kwargs)
            except Exception as exc:  # the schema race has no type of its own; others re-raised
                # Workers (or processes started by hand) on a fresh database race to create
                # Optuna's schema: PostgreSQL's and SQLite's words for "made meanwhile".
                text = f"{type(exc).__name__} {exc}"
                if attempt == 4 or not any(w in text for w in _SCHEMA_RACE_WORDS):
                    raise
                time.sleep(2.0)
        raise AssertionError("unreachable")
    except Exception as exc:  # SQLAlchemy raises ArgumentError, OperationalError, ImportError, ...
        raise ValueError(f"storage URL {url!r} cannot be opened: {type(exc).__name__}: {exc}") from None


def repair_command(url: str, study: str | None = None, tracking_uri: str | None = None) -> str:
    """The command that rebuilds the SQLite study database of ``url``."""
    words = ["flashtune", "repair", url]
    if study:
        words += ["--study", study]
    if tracking_uri:
        words += ["--tracking-uri", tracking_uri]
    return shlex.join(words)



class DamagedDatabase(ValueError):
    """A damaged SQLite study file, left as it is; the message names the repair command."""

    def __init__(self, url: str, problem: str) -> None:
        self.url, self.problem = url, problem
        super().__init__(self.advice())

    def advice(self, study: str | None = None, tracking_uri: str | None = None) -> str:
        """The refusal, naming the study and the MLflow store the repair reads trials back from."""
        path = self.url[len("sqlite:///"):].split("?", 1)[0]
        return (f"Optuna database {path} is damaged ({self.problem}): it is left as it is. Rebuild it with "
                f"`{repair_command(self.url, study, tracking_uri)}` (keeps it aside; the study's trials come back "
                "from what it still holds and from the study's MLflow runs), or restore it from a backup")


def check_sqlite_file(url: str) -> None:
    """Refuse a damaged SQLite study file in one line, leaving it as it is.

    A truncated copy (or a disk that lost pages) read as "malformed" on open, or as a
    misleading ``StorageInternalError`` at the first commit.

    Raises:
        DamagedDatabase: the file exists and SQLite's ``quick_check`` fails, naming the repair.
    """
    if not url.startswith("sqlite:///"):
        return
    path = url[len("sqlite:///"):].split("?", 1)[0]
    if path in ("", ":memory:") or not os.path.isfile(path) or os.path.getsize(path) == 0:
        return
    try:
        # Read-only: a read-write connection, closed last, folds the ``-wal`` into the file,
        # which on a damaged file writes what may be all that is left over it (the repair
        # reads both as they are). A read-only one reads the log and writes nothing to the
        # file. Without a ``-wal`` (no connection is open: a WAL database keeps one while
        # any is) it is read as immutable, so that not even an empty ``-wal`` and ``-shm``
        # are left beside it, where the repair would keep them as the damaged file's.
        query = "mode=ro" if os.path.exists(f"{path}-wal") else "mode=ro&immutable=1"
        with contextlib.closing(sqlite3.connect(f"{_sqlite_file_uri(path)}?{query}", uri=True)) as db:
            problem = [str(row[0]).splitlines()[0] for row in db.execute("PRAGMA quick_check")]
    except sqlite3.DatabaseError as exc:
        problem = [str(exc)]
    if problem != ["ok"]:
        raise DamagedDatabase(url, problem[0])


def _sqlite_file_uri(path: str) -> str:
    """``file:`` URI of ``path`` (``?`` and ``#`` in a name would start the URI's query)."""
    from urllib.parse import quote

    return "file:" + quote(os.path.abspath(path))


def postgres_driver(url: str) -> str:
    """``postgresql://`` with the driver that is installed: SQLAlchemy 2.1 reads a plain
    scheme as psycopg 3, while flashtune's dev extras bring psycopg2."""
    if not url.startswith("postgresql://"):
        return url
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url

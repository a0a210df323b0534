"""``flashtune repair sqlite:///PATH``: rebuild a damaged Optuna SQLite study file.

SQLite is not append-only: a cut (a truncated copy, a disk that lost pages) takes every
page past it with it, wherever those pages were in the tables. What is left is read twice
over:

1. What SQLite itself still reads. The file's header still counts the lost pages, so
   SQLite refuses the whole file as malformed; opened with ``writable_schema`` it uses the
   pages that are there. Every row it reaches is copied out, each table walked from both
   ends (a lost page inside a table's B-tree stops a walk, not the other one). A trial
   read back whole (its measurement attribute survived) is kept as it was stored. When
   the cut took a page of the schema itself (the first ~100 KB of a study's file), SQLite
   reads nothing; nor does the ``sqlite3`` shell's ``.recover`` on such files (tried:
   "SQL logic error", no rows), so neither is relied on.
2. The study's MLflow children: a child holds its trial's number (tag ``trial``), its
   config (params) and its measurement (tag ``measurement``; children written before that
   tag: their metrics, status and error), and the parent run holds the study's identity.
   Every trial the file lost is added back from them.

The new database is built by this Optuna beside the file (``PATH.repairing``) and put in
its place; the damaged file, with its ``-wal`` and ``-shm``, is kept as
``PATH.damaged-<time>`` (never deleted). The study's lock (``locks.study_lock``) is held
throughout: a ``tune`` running on it refuses, and repair refuses while one runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from flashtune.experiments.evaluation.prior_mlflow import RUN_ID_KEY, parse_workload, trial_measurements_of_run
from flashtune.experiments.study.ledger import TrialStore
from flashtune.experiments.study.locks import studies_locked_in, study_lock
from flashtune.experiments.study.signals import signals_deferred
from flashtune.experiments.study.storage import (
    CONFIG_ATTR,
    ELAPSED_ATTR,
    IDENTITY_ATTR,
    MEASUREMENT_ATTR,
    NUMBER_ATTR,
    check_sqlite_file,
    close_storage,
    open_storage,
    repair_command,
)
from flashtune.experiments.tracking.tags import (
    MEASUREMENT_TAG,
    PARENT_TAG,
    ROLE_TAG,
    STUDY_TAG,
    TRIAL_TAG,
    int_or_none,
)
from flashtune.experiments.tracking.tracker import mlflow_client, sqlite_path
from flashtune.kernels.config import Config
from flashtune.kernels.space import tunables_for
from flashtune.objectives.types import Measurement, Workload
from flashtune.search.loop import Trial
from flashtune.search.space import SearchSpace

_log = logging.getLogger(__name__)

#: Suffix of the damaged file kept aside: ``PATH.damaged-<YYYYmmdd-HHMMSS>``.
DAMAGED_SUFFIX = ".damaged-"
#: Side files SQLite keeps beside a database (they belong to the damaged file).
_SIDE_FILES = ("-wal", "-shm", "-journal")


@dataclass(frozen=True)
class StudyRepair:
    """What came back of one study."""

    name: str  # the Optuna study name (``<GPU>/<study>``)
    from_file: int  # trials read back whole from the damaged file
    from_mlflow: int  # trials added back from the study's MLflow children
    parent_run_id: str  # its MLflow parent run ("" when MLflow holds none)
    missing: tuple[int, ...]  # trial numbers below the highest one that neither source holds

    def summary(self) -> str:
        run = (f"the children of MLflow run {self.parent_run_id}" if self.parent_run_id
               else "MLflow (it holds no run of this study)")
        lost = f"; trials {', '.join(map(str, self.missing))} held by neither" if self.missing else ""
        return (f"study {self.name!r}: {self.from_file + self.from_mlflow} trials, {self.from_file} read back from "
                f"the file, {self.from_mlflow} from {run}{lost}")


@dataclass(frozen=True)
class SqliteRepair:
    """What :func:`repair` did."""

    path: Path
    studies: tuple[StudyRepair, ...]
    aside: Path | None  # where the damaged file was kept (None: there was none)

    def summary(self) -> str:
        kept = f"the damaged file is kept as {self.aside}" if self.aside else "there was no file to keep"
        return f"Optuna database {self.path} rebuilt: {'; '.join(s.summary() for s in self.studies)}; {kept}"


@dataclass
class _Study:
    """One study as the two sources hold it."""

    name: str
    identity: dict[str, Any] | None = None
    attrs: dict[str, Any] = field(default_factory=dict)  # the study's other user attributes
    trials: dict[int, tuple[Trial, dict[str, Any], datetime | None]] = field(default_factory=dict)  # from the file


def repair(url: str, tracking_uri: str, studies: Iterable[str] = ()) -> SqliteRepair:
    """Rebuild the Optuna SQLite database of ``url`` from what it still holds and from MLflow.

    Args:
        url: the study's ``--storage`` (``sqlite:///PATH``).
        tracking_uri: the MLflow tracking URI the study used.
        studies: Optuna names (``<GPU>/<study>``) of studies to rebuild besides those the
            file still names (a cut can take the row naming a study).

    Raises:
        ValueError: not a SQLite URL; the file is whole (nothing to repair); no study could
            be named; a study is being run now (its lock is held).
    """
    if not url.startswith("sqlite:///"):
        raise ValueError(f"repair {url!r}: not a SQLite URL (sqlite:///PATH)")
    path = Path(url[len("sqlite:///"):].split("?", 1)[0])
    exists = path.is_file() and path.stat().st_size > 0
    found: dict[str, _Study] = {}
    if exists:
        whole, found = _read_what_reads(path)
        if whole:
            raise ValueError(f"Optuna database {path} is whole (SQLite's quick_check passes): nothing to repair")
    named = list(studies)
    for name in [*named, *studies_locked_in(path)]:  # a lock file names a study the cut took from the file
        found.setdefault(name, _Study(name))
    if not found:
        raise ValueError(
            f"Optuna database {path}: {'no study can be read from it' if exists else 'no such file'}; name the "
            f"study to rebuild from MLflow: {repair_command(url, '<GPU>/<study>', tracking_uri)} (the name `tune` "
            "printed as its Optuna study)")
    with contextlib.ExitStack() as locks:  # every study held: none is run while it is rebuilt
        for name in sorted(found):
            locks.enter_context(study_lock(path, name))
        fresh = path.with_name(f"{path.name}.repairing")
        _remove_with_side_files(fresh)
        try:
            done = _build(fresh, found, tracking_uri, set(named))
            with signals_deferred():  # a SIGTERM here is taken once both files are where they belong
                aside = _keep_aside(path) if path.exists() else None
                os.replace(fresh, path)
        finally:
            _remove_with_side_files(fresh)
    return SqliteRepair(path, done, aside)


# -- 1. what SQLite still reads ---------------------------------------------------------------------


def _read_what_reads(path: Path) -> tuple[bool, dict[str, _Study]]:
    """Whether the file is whole, and the studies it still names, with their identity and
    their whole trials. Read from a copy: SQLite writes to a file it opens (closing the last
    connection folds the write-ahead log in), and the damaged file is kept as it is."""
    with tempfile.TemporaryDirectory(prefix="flashtune-repair-") as tmp:
        copy = Path(tmp) / "damaged.db"
        shutil.copyfile(path, copy)
        for suffix in _SIDE_FILES:  # a write-ahead log holds the newest pages
            if Path(f"{path}{suffix}").is_file():
                shutil.copyfile(f"{path}{suffix}", f"{copy}{suffix}")
        try:
            check_sqlite_file(f"sqlite:///{copy}")
            whole = True
        except ValueError:
            whole = False
        tables = {} if whole else _tables(copy)
    studies = {row["study_id"]: _Study(row["study_name"]) for row in tables.get("studies", [])
               if isinstance(row.get("study_name"), str)}
    for row in tables.get("study_user_attributes", []):
        study = studies.get(row.get("study_id"))
        value = _json(row.get("value_json"))
        if study is None or value is _UNREADABLE:
            continue
        if row.get("key") == IDENTITY_ATTR and isinstance(value, dict):
            study.identity = value
        else:
            study.attrs[str(row.get("key"))] = value
    trial_study = {row["trial_id"]: row.get("study_id") for row in tables.get("trials", [])}
    started = {row["trial_id"]: _datetime(row.get("datetime_start")) for row in tables.get("trials", [])}
    attrs: dict[Any, dict[str, Any]] = {}
    for row in tables.get("trial_user_attributes", []):
        value = _json(row.get("value_json"))
        if value is not _UNREADABLE:
            attrs.setdefault(row.get("trial_id"), {})[str(row.get("key"))] = value
    for trial_id, trial_attrs in attrs.items():
        # A trial whose row was lost: its study is the file's only one, if it has one.
        study = studies.get(trial_study.get(trial_id)) or (next(iter(studies.values())) if len(studies) == 1 else None)
        trial = _trial_from_attrs(trial_attrs)
        if study is not None and trial is not None and trial.number not in study.trials:
            study.trials[trial.number] = (trial, trial_attrs, started.get(trial_id))
    return whole, {s.name: s for s in studies.values()}


def _tables(copy: Path) -> dict[str, list[dict[str, Any]]]:
    """Every row SQLite reaches in every table of ``copy``; {} when it reads no schema."""
    rows: dict[str, list[dict[str, Any]]] = {}
    try:
        db = sqlite3.connect(copy)
    except sqlite3.DatabaseError:
        return rows
    with contextlib.closing(db):
        try:
            # The header counts the pages the cut took: without this SQLite refuses the file.
            db.execute("PRAGMA writable_schema = ON")
            names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        except sqlite3.DatabaseError:
            return rows
        for name in names:
            found: dict[int, dict[str, Any]] = {}
            for order in ("ASC", "DESC"):
                try:
                    cursor = db.execute(f'SELECT rowid AS "_flashtune_rowid", * FROM "{name}" ORDER BY rowid {order}')
                    columns = [d[0] for d in cursor.description]
                    for values in cursor:
                        row = dict(zip(columns, values))
                        found.setdefault(row.pop("_flashtune_rowid"), row)
                except sqlite3.DatabaseError:
                    continue  # a lost page: this walk ends here, the other one starts from the far end
            rows[name] = [found[k] for k in sorted(found)]
    return rows


_UNREADABLE = object()


def _json(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return _UNREADABLE


def _datetime(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return None


def _trial_from_attrs(attrs: Mapping[str, Any]) -> Trial | None:
    """A whole trial from its user attributes (as ``TrialStore`` writes them); None if not whole."""
    number = attrs.get(NUMBER_ATTR)
    if MEASUREMENT_ATTR not in attrs or not isinstance(number, int) or isinstance(number, bool) or number < 0:
        return None
    try:
        measurement = Measurement.from_dict(attrs[MEASUREMENT_ATTR])
        config = Config.from_dict(attrs.get(CONFIG_ATTR) or measurement.config.to_dict())
        elapsed = float(attrs.get(ELAPSED_ATTR, 0.0))
    except (TypeError, ValueError, KeyError):
        return None
    return Trial(number, config, measurement, elapsed if math.isfinite(elapsed) else 0.0)


# -- 2. the study's MLflow children ----------------------------------------------------------------


@dataclass(frozen=True)
class Child:
    """A finished (or, when none finished, half-written) MLflow child run of a study: the
    trial it holds and its run id."""

    trial: Trial
    run_id: str


def mlflow_study(tracking_uri: str, name: str, identity: Mapping[str, Any] | None) -> tuple[Any, Any]:
    """The MLflow client and the parent run of Optuna study ``name`` (None when there is none).

    Shared by the SQLite repair and the journal's restore (``journal_restore``): one reading
    of a study's MLflow runs."""

    db = sqlite_path(tracking_uri)
    if db is not None and not db.is_file():
        return None, None  # no MLflow database there: nothing to read (and none to create)
    client = mlflow_client(tracking_uri)
    gpus = [identity["gpu"]] if identity and isinstance(identity.get("gpu"), str) else [
        e.name[len("flashtune/"):] for e in client.search_experiments() if e.name.startswith("flashtune/")]
    for gpu in gpus:
        if not name.startswith(f"{gpu}/"):
            continue
        experiment = client.get_experiment_by_name(f"flashtune/{gpu}")
        if experiment is None:
            continue
        study = name[len(gpu) + 1:].replace("'", "\\'")
        runs = client.search_runs([experiment.experiment_id],
                                  filter_string=f"tags.{ROLE_TAG} = 'study' AND tags.{STUDY_TAG} = '{study}'",
                                  order_by=["attributes.start_time ASC"], max_results=10)
        if runs:
            return client, runs[0]
    return client, None


def _identity_from_parent(parent: Any) -> dict[str, Any]:
    """A study's identity (``runner.Study.identity``) from its MLflow parent's params and tags."""

    params, tags = parent.data.params, parent.data.tags
    return {
        "workload": parse_workload(params).to_dict(),
        "gpu": tags["gpu"],
        "fingerprint": tags["fingerprint"],
        "strategy": params["strategy"],
        "strategy_options": {k[len("option."):]: json.loads(v) for k, v in params.items() if k.startswith("option.")},
        "seed": int(params["seed"]),
        "objective": params["objective"],
    }


def mlflow_children(client: Any, parent: Any, tracking_uri: str, *, finished_only: bool = False) -> dict[int, Child]:
    """The trials the study's children hold, by trial number (with the child's run id).

    Args:
        finished_only: leave out RUNNING children (a kill mid-write); the repair counts one
            when no finished child holds its number, a restore beside live workers never does.
    """

    children, token = [], None
    while True:
        page = client.search_runs([parent.info.experiment_id], max_results=1000, page_token=token,
                                  filter_string=f"tags.{ROLE_TAG} = 'trial' AND tags.{PARENT_TAG} = '{parent.info.run_id}'")
        children.extend(page)
        token = page.token
        if not token:
            break
    rebuilt: dict[str, Measurement] | None = None  # children without the measurement tag (older ones)
    trials: dict[int, Child] = {}
    # Finished children first: a RUNNING one (a kill mid-write) counts only when none finished.
    for child in sorted(children, key=lambda run: run.info.status not in ("FINISHED", "FAILED")):
        number = int_or_none(child.data.tags.get(TRIAL_TAG))
        if number is None or number < 0 or number in trials:
            continue
        if finished_only and child.info.status not in ("FINISHED", "FAILED"):
            continue
        measurement = None
        try:
            measurement = Measurement.from_dict(json.loads(child.data.tags[MEASUREMENT_TAG]))
        except (KeyError, TypeError, ValueError):
            if child.info.status in ("FINISHED", "FAILED"):
                if rebuilt is None:
                    rebuilt = {m.versions.get(RUN_ID_KEY, ""): m for m in trial_measurements_of_run(
                        tracking_uri, parent.info.run_id)}
                found = rebuilt.get(child.info.run_id)
                if found is not None:
                    versions = {k: v for k, v in found.versions.items() if k != RUN_ID_KEY}
                    measurement = Measurement.from_dict({**found.to_dict(), "versions": versions})
        if measurement is None:
            continue
        elapsed = child.data.metrics.get("elapsed_s", 0.0)
        trials[number] = Child(Trial(number, measurement.config, measurement, float(elapsed)), child.info.run_id)
    return trials


# -- 3. the new database ---------------------------------------------------------------------------


def _build(fresh: Path, found: Mapping[str, _Study], tracking_uri: str, named: set[str]) -> tuple[StudyRepair, ...]:
    """Write every study of ``found`` into a new database at ``fresh``.

    Raises:
        ValueError: a study named by the user is known to neither source.
    """

    done = []
    storage = open_storage(f"sqlite:///{fresh}")
    try:
        for name in sorted(found):
            study = found[name]
            client, parent = mlflow_study(tracking_uri, name, study.identity)
            identity = study.identity
            if identity is None and parent is not None:
                identity = _identity_from_parent(parent)
            if identity is None:
                if name not in named:
                    continue  # named by a lock file only: it never got as far as a trial
                raise ValueError(f"study {name!r}: neither the file nor MLflow ({tracking_uri}) holds it; "
                                 "check --study and --tracking-uri (the one the study used)")
            from_mlflow = {n: c.trial for n, c in mlflow_children(client, parent, tracking_uri).items()
                           } if parent is not None else {}
            workload = Workload.from_dict(identity["workload"])
            store = TrialStore(storage, name, identity, SearchSpace(tunables_for(workload)))
            for key, value in study.attrs.items():
                storage.set_study_user_attr(store.study_id, key, value)
            configs = {t.config for t, _, _ in study.trials.values()}
            added = 0
            for number in sorted({*study.trials, *from_mlflow}):
                if number in study.trials:
                    trial, attrs, started = study.trials[number]
                    store.add_recorded(trial, attrs, started)
                elif from_mlflow[number].config not in configs:
                    store.add_recorded(from_mlflow[number])
                    configs.add(from_mlflow[number].config)
                    added += 1
            numbers = {*study.trials, *from_mlflow}
            missing = tuple(n for n in range(max(numbers, default=-1)) if n not in numbers)
            done.append(StudyRepair(name, len(study.trials), added, parent.info.run_id if parent else "", missing))
    finally:
        close_storage(storage)
    with contextlib.closing(sqlite3.connect(fresh)) as db:
        # One self-contained file: the replace below moves the file, not its write-ahead log.
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("PRAGMA journal_mode = DELETE")
    return tuple(done)


def _keep_aside(path: Path) -> Path:
    """Keep the damaged file (and its side files) as ``PATH.damaged-<time>``; it stays at
    ``path`` too until the new file replaces it (a hard link: no moment without a database)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}{DAMAGED_SUFFIX}{stamp}")
    n = 1
    while any(Path(f"{aside}{s}").exists() for s in ("", *_SIDE_FILES)):
        n += 1
        aside = path.with_name(f"{path.name}{DAMAGED_SUFFIX}{stamp}-{n}")
    try:
        os.link(path, aside)
    except OSError:  # a file system without hard links
        shutil.copyfile(path, aside)
    # Then its write-ahead log: left beside the new file, SQLite would apply it to it.
    for suffix in _SIDE_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
    return aside


def _remove_with_side_files(path: Path) -> None:
    for suffix in ("", *_SIDE_FILES):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")

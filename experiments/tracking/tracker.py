"""MLflow tracking of a study: a callback of the run loop, never called by strategies.

Layout in the tracking store:

- one experiment per GPU model (``flashtune/NVIDIA H200``);
- one parent run per study, named after it and tagged with the GPU, compute capability,
  hardware fingerprint, driver/CUDA/torch/Triton versions, strategy, seed and workload;
  ``best_ms`` / ``best_tflops`` logged with ``step`` = trial number, so MLflow's chart
  view overlays the convergence of strategies; artifacts: convergence PNG, best config
  JSON, the trials table (CSV and JSON lines);
- one child run per trial (config as params, the measurement as metrics, status as a
  tag; FAILED for a config that failed), failed trials too.

Idempotent per trial: a child carries its trial number as a tag, and :meth:`start`
reconciles the store with the study's history (from Optuna), so a study killed at any
point and resumed ends with exactly one finished child per trial: missing ones are
created, half-written ones (left RUNNING by a kill) are deleted and written again.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import socket
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from flashtune.experiments.localhost import first_line, full_disk, tune_sqlite_connections
from flashtune.experiments.tracking import report
from flashtune.experiments.tracking.mlflow_db import prepare_sqlite_db
from flashtune.experiments.tracking.shared import SharedTracking
from flashtune.experiments.tracking.tags import (  # re-exported: the tracker's vocabulary
    DEFAULT_TAG,
    MEASUREMENT_TAG,
    PARENT_TAG,
    ROLE_TAG,
    SANITIZER_FINDING_TAG,
    SANITIZER_TOOL_TAG,
    STATUS_TAG,
    STUDY_TAG,
    TRIAL_TAG,
    WORKER_TAG,
    int_or_none,
    measurement_tag,
)
from flashtune.experiments.tracking.ui_view import view_tag
from flashtune.objectives.metrics import logged_metrics
from flashtune.objectives.sanitize import parse_unsafe_reason
from flashtune.objectives.types import Status
from flashtune.search.loop import Trial

if TYPE_CHECKING:  # mlflow takes seconds to import: only when a study or the UI runs
    from mlflow import MlflowClient

    from flashtune.objectives.types import Measurement

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
#: MLflow 3's UI picks its pages by this experiment tag (ExperimentKind in mlflow/server/js).
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"

#: Schemes MLflow can track to (SQLAlchemy ones may carry a driver: postgresql+psycopg2).
_SCHEMES = ("", "file", "sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")



_log = logging.getLogger(__name__)


def experiment_name(gpu_name: str) -> str:
    """The MLflow experiment of a GPU model: every study on that GPU lands in it."""
    return f"flashtune/{gpu_name}"


def check_tracking_uri(uri: str) -> str:
    """Validate a tracking URI and check that the store answers.

    Raises:
        ValueError: naming the URI and what is wrong with it.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise ValueError(f"tracking URI must be a non-empty string, got {uri!r}")
    scheme = uri_scheme(uri)
    if scheme not in _SCHEMES:
        raise ValueError(
            f"tracking URI {uri!r}: unknown scheme {scheme!r}; use e.g. {DEFAULT_TRACKING_URI}, "
            "http://host:5000, postgresql://user@host/db or a local folder"
        )
    if scheme == "sqlite" and not uri.startswith("sqlite:///"):
        raise ValueError(f"tracking URI {uri!r}: SQLite URIs need three slashes, e.g. {DEFAULT_TRACKING_URI}")
    _check_writable(uri)
    # A down server would otherwise be retried for minutes before the study even starts.
    saved = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "15"
    try:
        for attempt in range(5):
            try:
                mlflow_client(uri).search_experiments(max_results=1)
                break
            except Exception as exc:  # MLflow's schema race has no type of its own; others re-raised
                # Workers started together on a fresh database race to create MLflow's
                # schema; the losers see a duplicate and find the schema made a moment later.
                if attempt == 4 or not _schema_race(exc):
                    raise
                time.sleep(2.0)
    except Exception as exc:  # any store error: the URI is what the user must fix
        raise ValueError(f"tracking URI {uri!r} cannot be used: {type(exc).__name__}: {exc}") from None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return uri


def uri_scheme(uri: str) -> str:
    """A tracking URI's scheme without its driver (``postgresql+psycopg2``: ``postgresql``),
    "" for a local path."""
    scheme = urlparse(uri).scheme.split("+", 1)[0].lower()
    return "" if len(scheme) == 1 else scheme  # one letter: a Windows drive, C:\\...: a local path


def record_default(tracking_uri: str, parent_run_id: str, default: Measurement) -> None:
    """Tag a study's parent run with the runtime's default config measured on its workload
    (successes only: a failure has no time to compare a tuned config with). Never fails the
    main job, whose study is done: a store that refuses the tag only costs export its check."""
    if not default.ok:
        return
    text = json.dumps(default.to_dict())
    try:
        retry_insert_race(lambda: mlflow_client(tracking_uri).set_tag(parent_run_id, DEFAULT_TAG, text))
    except Exception as exc:  # the study's results are already stored
        _log.warning("could not tag MLflow run %s with the default config's time: %s", parent_run_id, exc)


def _check_writable(uri: str) -> None:
    """Refuse a SQLite database this process cannot write, before MLflow opens it: MLflow
    retries a failed schema write for about 100 s before giving up.

    Raises:
        ValueError: naming the URI and the file or folder that cannot be written.
    """
    path = sqlite_path(uri)
    if path is None:
        return
    # Tried, not read off the mode bits (root passes os.access where the kernel refuses,
    # as in /proc). SQLite writes a journal beside the database: the folder must take a file.
    target = path.parent
    try:
        if path.exists():
            target = path
            with path.open("ab"):
                pass
        if path.parent.is_dir():
            target = path.parent
            with tempfile.TemporaryFile(dir=path.parent):
                pass
    except OSError as exc:
        kind = "file" if target == path else "folder"
        raise ValueError(f"tracking URI {uri!r}: {kind} {str(target)!r} is not writable "
                         f"({exc.strerror or exc})") from None


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for other stores and :memory:)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def get_or_create_experiment(client: MlflowClient, name: str, uri: str, tags: Mapping[str, str]) -> str:
    """The id of experiment ``name``, created (or restored if deleted) when needed."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        location = None
        db = sqlite_path(uri)
        if db is not None:
            # Artifacts beside the database, not in whatever folder the study ran from.
            slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
            location = (db.resolve().parent / "mlartifacts" / slug).as_uri()
        try:
            return client.create_experiment(name, artifact_location=location, tags=dict(tags))
        except Exception:  # created meanwhile by another process: use theirs
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.lifecycle_stage == "deleted":
        client.restore_experiment(experiment.experiment_id)
    return experiment.experiment_id


class MlflowTracker(SharedTracking):
    """Loop callback that mirrors a study into MLflow (see the module docstring).

    Args:
        tracking_uri: any MLflow tracking URI (validated by :func:`check_tracking_uri`).
        study_name: names the parent run and tags every run of the study.
        gpu_name: picks the experiment (one per GPU model).
        parent_tags: tags of the parent (GPU, versions, strategy, seed, workload, ...).
        parent_params: params of the parent (written once; must not change on resume).
        child_tags: extra tags of every child (strategy, workload, GPU: to filter trials).
        trial_tags: tags of one trial's child, from the trial (which prior it came from).
        study_info: what the best-config JSON says about the study.
        shared: many workers track this study at once (see ``shared.py``): the
            parent is found or created race-safely, and no worker deletes a child that a
            live worker may still be writing.
    """

    def __init__(
        self,
        tracking_uri: str,
        *,
        study_name: str,
        gpu_name: str,
        parent_tags: Mapping[str, str],
        parent_params: Mapping[str, str],
        child_tags: Mapping[str, str] | None = None,
        study_info: Mapping[str, Any] | None = None,
        shared: bool = False,
        trial_tags: Callable[[Trial], Mapping[str, str]] | None = None,
    ) -> None:
        self.shared = shared
        self.tracking_uri = tracking_uri
        self.study_name = study_name
        self.gpu_name = gpu_name
        self._parent_tags = {k: str(v) for k, v in parent_tags.items()}
        self._parent_params = {k: str(v) for k, v in parent_params.items()}
        self._child_tags = {k: str(v) for k, v in (child_tags or {}).items()}
        self._study_info = dict(study_info or {})
        self._trial_tags = trial_tags
        self.client = mlflow_client(tracking_uri)
        self.experiment_id = ""
        self.parent_run_id = ""
        self._opened = False  # whether this tracker set the parent RUNNING (and must close it)
        self._children: dict[int, str] = {}  # trial number -> finished child run id
        self._best_ms = math.inf
        self._best_tflops = 0.0

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, trials: Sequence[Trial]) -> None:
        """Find or create the parent, reconcile its children, and mark it RUNNING.

        Raises:
            ValueError: MLflow holds trials the storage does not (see :meth:`_reconcile`);
                an existing parent is then left as it was.
        """
        from mlflow.entities import Param

        self.experiment_id = get_or_create_experiment(
            self.client, experiment_name(self.gpu_name), self.tracking_uri,
            {"gpu": self.gpu_name, "flashtune": "1"},
        )
        self._save_ui_view()
        tags = {**self._parent_tags, ROLE_TAG: "study", STUDY_TAG: self.study_name}
        if self.shared:
            self.parent_run_id = self._shared_parent(tags)
            self._shared_reconcile(trials)
            self.client.update_run(self.parent_run_id, status="RUNNING")
            self._opened = True
            # Every worker logs the same params; two inserting at once collide on SQLite.
            params = [Param(k, v) for k, v in self._parent_params.items()]
            retry_insert_race(lambda: self.client.log_batch(self.parent_run_id, params=params))
            return
        parent = self._find_parent()
        if parent is None:
            run = self.client.create_run(self.experiment_id, tags=tags, run_name=self.study_name)
            self.parent_run_id = run.info.run_id
            self._opened = True  # created RUNNING: from here on it must be closed
            self._reconcile(trials)  # a new parent of a resumed study: write every stored trial
        else:
            self.parent_run_id = parent.info.run_id
            self._reconcile(trials)  # before touching the parent: a refusal leaves it as it was
            self.client.update_run(self.parent_run_id, status="RUNNING")
            self._opened = True
            for key, value in tags.items():
                self.client.set_tag(self.parent_run_id, key, value)
        # Re-logging an identical param is allowed; the Optuna identity check keeps them identical.
        self.client.log_batch(self.parent_run_id, params=[Param(k, v) for k, v in self._parent_params.items()])

    def __call__(self, trial: Trial, trials: Sequence[Trial]) -> None:
        """Loop callback: one child run for ``trial`` and the parent's best so far."""
        if trial.number not in self._children:
            self._children[trial.number] = self._write_child(trial)
            if self.shared:
                    self._shared_dedupe_child(trial.number)
        self._note_best(trial)
        self._log_best_now(trial.number)

    def end(self, status: str, trials: Sequence[Trial], *, failed_on: BaseException | None = None) -> None:
        """Upload the parent's artifacts and close it with ``status`` (FINISHED, FAILED, KILLED).

        The status is set even when the artifacts cannot be written: a parent must never
        stay RUNNING because a plot failed.

        Args:
            failed_on: the error the study stopped on. When it is a full disk, the same full
                disk failing these writes is not said again: the study's error line says it,
                and the same command, run again, writes them.
        """
        if not self._opened:
            return

        def note(what: str, exc: Exception) -> None:
            if failed_on is None or full_disk(failed_on) is None or full_disk(exc) is None:
                _log.warning("study %r: %s: %s", self.study_name, what, first_line(exc))

        if self.shared:
            try:  # a killed worker's trial may lack its child: whoever ends writes it
                self._shared_reconcile(trials)
            except Exception as exc:  # reported: a failed reconcile must not keep the run open
                note("could not reconcile MLflow children", exc)
        try:
            self._write_summary(trials)
        except Exception as exc:  # reported, then the run is closed all the same
            note("could not write the parent's artifacts", exc)
        finally:
            self.client.set_terminated(self.parent_run_id, status=status)

    def _save_ui_view(self) -> None:
        """The study's saved view and the experiment's kind, for the MLflow UI.

        Written at every start (idempotent: fixed keys), so a store made by an older
        flashtune gains them on resume. The kind keeps MLflow 3's UI on its runs pages
        rather than its GenAI ones (traces, prompts), which hold nothing for a study.
        """
        key, value = view_tag(self.study_name, _now_ms())
        try:  # workers of a shared study write the same tags at once
            retry_insert_race(lambda: self.client.set_experiment_tag(self.experiment_id, key, value))
            retry_insert_race(lambda: self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG,
                                                                      EXPERIMENT_KIND))
        except Exception as exc:  # a convenience: never worth a study
            _log.warning("study %r: could not save its MLflow UI view: %s", self.study_name, exc)

    # -- parent ----------------------------------------------------------------------------

    def _find_parent(self) -> Any:
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.{ROLE_TAG} = 'study' AND tags.{STUDY_TAG} = '{self.study_name}'",
            order_by=["attributes.start_time ASC"],
            max_results=10,
        )
        if len(runs) > 1:
            _log.warning("study %r has %d parent runs; using the first", self.study_name, len(runs))
        return runs[0] if runs else None

    def _note_best(self, trial: Trial) -> None:
        if trial.cost_ms < self._best_ms:
            self._best_ms = trial.cost_ms
            self._best_tflops = trial.measurement.tflops

    def _log_best_now(self, step: int) -> None:
        from mlflow.entities import Metric

        if not math.isfinite(self._best_ms):
            return  # nothing ran yet: MLflow would draw inf as a huge number
        now = _now_ms()
        self.client.log_batch(self.parent_run_id, metrics=[
            Metric("best_ms", self._best_ms, now, step),
            Metric("best_tflops", self._best_tflops, now, step),
        ])

    def _write_summary(self, trials: Sequence[Trial]) -> None:
        import json

        from mlflow.entities import Metric

        now, step = _now_ms(), len(trials)
        ok = sum(1 for t in trials if math.isfinite(t.cost_ms))
        self.client.log_batch(self.parent_run_id, metrics=[
            Metric("trials", float(len(trials)), now, step),
            Metric("trials_ok", float(ok), now, step),
            Metric("trials_failed", float(len(trials) - ok), now, step),
        ])
        title = f"{self.study_name} on {self.gpu_name}"
        # The run page's Description: what a person wants first, without opening artifacts.
        note = report.summary_text(trials, title=title)
        self.client.set_tag(self.parent_run_id, "mlflow.note.content", f"```\n{note}\n```")
        with tempfile.TemporaryDirectory(prefix="flashtune-artifacts-") as tmp:
            folder = Path(tmp)
            report.write_convergence_png(trials, folder / "convergence.png", title=title)
            document = report.best_config_document(trials, {"name": self.study_name, **self._study_info})
            (folder / "best_config.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
            report.write_trials_csv(trials, folder / "trials.csv")
            report.write_trials_jsonl(trials, folder / "trials.jsonl")
            self.client.log_artifacts(self.parent_run_id, str(folder))

    # -- children ----------------------------------------------------------------------------

    def _reconcile(self, trials: Sequence[Trial]) -> None:
        """Make the children match ``trials`` exactly: one finished child per trial.

        A child is written only after its trial is stored, so a *finished* child that the
        storage does not know means the storage is not the one this study used: refuse,
        rather than delete what MLflow holds. Unfinished children (a kill mid-write) and
        duplicates are deleted (MLflow's soft delete) and written again.

        Raises:
            ValueError: a finished child contradicts the stored trials.
        """
        by_number = {t.number: t for t in trials}
        keep: dict[int, str] = {}
        for run in self._list_children():
            number = int_or_none(run.data.tags.get(TRIAL_TAG))
            trial = by_number.get(number) if number is not None else None
            complete = run.info.status in ("FINISHED", "FAILED")
            matches = trial is not None and all(
                run.data.params.get(k) == str(v) for k, v in trial.config.items()
            )
            if complete and not matches:
                raise ValueError(
                    f"study {self.study_name!r}: MLflow run {run.info.run_id} holds trial {number} "
                    f"({run.data.params}), which the Optuna storage "
                    f"{'does not have' if trial is None else 'stored with another config'}; "
                    "resume with the --storage this study used, or choose another --study-name"
                )
            if complete and number not in keep:
                keep[number] = run.info.run_id
            else:
                # Half-written by a killed process, or a duplicate of a kept child.
                self.client.delete_run(run.info.run_id)
        self._children = keep
        logged_steps = {m.step for m in self.client.get_metric_history(self.parent_run_id, "best_ms")}
        for trial in trials:
            if trial.number not in self._children:
                self._children[trial.number] = self._write_child(trial)
            self._note_best(trial)
            if trial.number not in logged_steps:
                self._log_best_now(trial.number)

    def _list_children(self) -> list[Any]:
        runs, token = [], None
        while True:
            page = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.{PARENT_TAG} = '{self.parent_run_id}'",
                max_results=1000,
                page_token=token,
            )
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def _write_child(self, trial: Trial) -> str:
        from mlflow.entities import Metric, Param

        m = trial.measurement
        data = m.to_dict()
        tags = {
            **self._child_tags,
            **({k: str(v) for k, v in self._trial_tags(trial).items()} if self._trial_tags else {}),
            ROLE_TAG: "trial",
            STUDY_TAG: self.study_name,
            TRIAL_TAG: str(trial.number),
            STATUS_TAG: m.status.value,
            "source": m.source,
            PARENT_TAG: self.parent_run_id,
            WORKER_TAG: f"{socket.gethostname()}:{os.getpid()}",
            MEASUREMENT_TAG: measurement_tag(data),
        }
        if m.error:
            tags["error"] = m.error[:500]
        tags.update(sanitizer_tags(m))
        # The trial number is a tag from the first write on: a kill after this call leaves a
        # RUNNING child that the next start() recognizes and replaces.
        run = self.client.create_run(self.experiment_id, tags=tags, run_name=f"trial {trial.number}")
        now = _now_ms()
        metrics = [Metric("ok", 1.0 if m.ok else 0.0, now, 0), Metric("elapsed_s", trial.elapsed_s, now, 0)]
        for declared in logged_metrics():  # non-finite and missing values are skipped
            value = data.get(declared.field)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                metrics.append(Metric(declared.mlflow, float(value), now, 0))
        params = [Param(k, str(v)) for k, v in trial.config.items()]
        self.client.log_batch(run.info.run_id, metrics=metrics, params=params)
        if m.compiler_output:
            # All the compiler printed (an MLIR reproducer runs to hundreds of lines): the
            # error tag carries its first meaningful line, the artifact the whole of it.
            self.client.log_text(run.info.run_id, m.compiler_output, "compiler_output.txt")
        self.client.set_terminated(run.info.run_id, status="FINISHED" if m.ok else "FAILED")
        return run.info.run_id


@functools.lru_cache(maxsize=8)
def mlflow_client(uri: str) -> MlflowClient:
    """An MLflow client for ``uri`` (one per URI: opening a store checks its schema, which
    takes seconds), with MLflow's schema-migration chatter quieted. A SQLite database is
    created whole or repaired first (:func:`~flashtune.experiments.tracking.mlflow_db.prepare_sqlite_db`).

    Raises:
        ValueError: a SQLite database whose folder is missing, or that holds runs but is
            broken (the message says what repairs it).
    """

    # A tuner has no business sending usage data anywhere (MLflow 3 does by default).
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    # MLflow's store set-up logs schema migrations at INFO: noise in a terminal study.
    for name in ("mlflow.store.db.utils", "alembic", "alembic.runtime.migration"):
        logging.getLogger(name).setLevel(logging.WARNING)
    tune_sqlite_connections()
    db = sqlite_path(uri)
    if db is not None:
        # MLflow would build its schema in place, where a kill leaves a broken file.
        notice = prepare_sqlite_db(db)
        if notice:
            _log.warning("%s", notice)
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _schema_race(exc: BaseException) -> bool:
    """Whether ``exc`` is another process creating the same database schema right now."""
    return insert_race(exc) or "already exists" in str(exc)


def insert_race(exc: BaseException) -> bool:
    """Whether ``exc`` is another process inserting the same row a moment earlier."""
    text = f"{type(exc).__name__} {exc}"
    return any(word in text for word in ("UNIQUE constraint failed", "UniqueViolation", "duplicate key"))


def retry_insert_race(write: Callable[[], object], attempts: int = 4) -> None:
    """Run ``write``; when another process inserted the same row first, run it again (the
    row is there now, and MLflow accepts an identical param or tag written twice)."""
    for attempt in range(attempts):
        try:
            write()
            return
        except Exception as exc:  # the insert race has no type of its own; others re-raised
            if attempt == attempts - 1 or not insert_race(exc):
                raise
            time.sleep(0.1 * (attempt + 1))


def _now_ms() -> int:
    return int(time.time() * 1000)


def sanitizer_tags(m: Measurement) -> dict[str, str]:
    """``sanitizer.tool`` and ``sanitizer.finding`` of an ``unsafe`` trial (read from its
    error, ``compute-sanitizer TOOL: FINDING``); none for any other."""
    parsed = parse_unsafe_reason(m.error) if m.status is Status.UNSAFE else None
    if parsed is None:
        return {}
    tool, finding = parsed
    return {SANITIZER_TOOL_TAG: tool, SANITIZER_FINDING_TAG: finding[:500]}


def mark_trial_unsafe(tracking_uri: str, parent_run_id: str, trial_number: int, measurement: Measurement) -> bool:
    """Re-label a study's child run ``unsafe`` after the fact (``tune --sanitize-top``): its
    status and measurement tags, the sanitizer's tool and finding, ``ok`` 0 and FAILED.
    Whether a child run of that trial was found."""
    from mlflow.entities import Metric, RunTag  # mlflow takes seconds to import: only when a study sanitizes

    client = mlflow_client(tracking_uri)
    parent = client.get_run(parent_run_id)
    children = client.search_runs([parent.info.experiment_id], max_results=10,
                                  filter_string=f"tags.{PARENT_TAG} = '{parent_run_id}' AND "
                                                f"tags.{TRIAL_TAG} = '{trial_number}'")
    if not children:
        return False
    tags = {STATUS_TAG: measurement.status.value, "error": measurement.error[:500],
            MEASUREMENT_TAG: measurement_tag(measurement.to_dict()), **sanitizer_tags(measurement)}
    for child in children:
        client.log_batch(child.info.run_id, metrics=[Metric("ok", 0.0, _now_ms(), 0)],
                         tags=[RunTag(k, v) for k, v in tags.items()])
        client.set_terminated(child.info.run_id, status="FAILED")
    return True

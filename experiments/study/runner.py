"""A study: one workload tuned on one GPU model by one strategy, persisted and tracked.

``run_study`` wires the pieces in the order that makes a crash lose nothing:

1. build the search space and the strategy (bad options fail here, before any write);
2. open the study's Optuna storage, finish or fail what a killed run left RUNNING, and
   load the history (the same name resumes);
3. open the MLflow parent run and reconcile its children with that history;
4. run the loop: each trial is stored in Optuna first, then mirrored to MLflow;
5. close the parent FINISHED, or FAILED on an exception, or KILLED on SIGTERM/Ctrl-C.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flashtune.experiments.evaluation import priors as prior_tags
from flashtune.experiments.localhost import first_line, full_disk
from flashtune.experiments.study.journal_restore import restore_from_mlflow
from flashtune.experiments.study.ledger import SharedLedger, StoreLedger, TrialStore
from flashtune.experiments.study.locks import study_lock
from flashtune.experiments.study.signals import StudyInterrupted, signals_deferred
from flashtune.experiments.study.storage import DamagedDatabase, is_shared_storage, journal_path, open_storage
from flashtune.experiments.tracking.tracker import MlflowTracker, sqlite_path
from flashtune.kernels.config import Config
from flashtune.objectives.feasibility import for_workload
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.types import Measurement, Workload
from flashtune.search import make_strategy, strategy_names
from flashtune.search.loop import Callback, History, Trial, best_trial, run
from flashtune.search.space import SearchSpace

_log = logging.getLogger(__name__)
#: Seconds between Optuna heartbeats of a worker on a shared RDB study (stale after 3x).
DEFAULT_HEARTBEAT_S = 10.0
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/+=:@ ]{0,199}$")


def check_study_name(name: str) -> str:
    """A study name is an MLflow run name and part of an MLflow filter: keep it plain."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(
            f"study name {name!r}: use 1-200 letters, digits, spaces and ._-/+=:@ (starting with a letter or digit)"
        )
    return name


@dataclass(frozen=True)
class Study:
    """What defines a study (the same name with the same facts resumes it).

    Attributes:
        name: the study's name: Optuna study name and MLflow parent run name.
        workload: the attention problem tuned.
        hardware: the GPU model (its spec decides feasibility and the MLflow experiment).
        strategy: a registered strategy name (``flashtune.search.strategy_names()``).
        strategy_options: options of that strategy; unknown ones raise.
        trials: budget: measured trials in total, earlier runs of the study included.
        seed: seeds the strategy (and the replay noise).
        objective: ``live`` (this machine's GPU) or ``replay`` (recorded tables).
        max_seconds: optional wall-time budget of one run.
    """

    name: str
    workload: Workload
    hardware: HardwareSpec
    strategy: str = "random"
    strategy_options: Mapping[str, Any] = field(default_factory=dict)
    trials: int = 50
    seed: int = 0
    objective: str = "replay"
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        check_study_name(self.name)
        if not isinstance(self.workload, Workload):
            raise TypeError(f"workload must be a Workload, got {type(self.workload).__name__}")
        if not isinstance(self.hardware, HardwareSpec):
            raise TypeError(f"hardware must be a HardwareSpec, got {type(self.hardware).__name__}")
        if self.strategy not in strategy_names():
            raise ValueError(f"unknown strategy {self.strategy!r}; registered: {strategy_names()}")
        if not isinstance(self.trials, int) or isinstance(self.trials, bool) or self.trials < 1:
            raise ValueError(f"trials must be a positive int, got {self.trials!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an int, got {self.seed!r}")
        if self.objective not in ("live", "replay"):
            raise ValueError(f"objective {self.objective!r}: use 'live' or 'replay'")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be positive, got {self.max_seconds!r}")
        try:
            options = json.loads(json.dumps(dict(self.strategy_options), sort_keys=True))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"strategy_options must be JSON-ready: {exc}") from None
        object.__setattr__(self, "strategy_options", options)

    @property
    def storage_name(self) -> str:
        """The Optuna study name: ``<GPU name>/<study name>``."""
        return f"{self.hardware.name}/{self.name}"

    def identity(self, fingerprint: str) -> dict[str, Any]:
        """Facts a resumed study must share with its first run (the budget may grow)."""
        return {
            "workload": self.workload.to_dict(),
            "gpu": self.hardware.name,
            "fingerprint": fingerprint,
            "strategy": self.strategy,
            "strategy_options": dict(self.strategy_options),
            "seed": self.seed,
            "objective": self.objective,
        }


@dataclass(frozen=True)
class StudyResult:
    """How a study run ended."""

    study: Study
    trials: tuple[Trial, ...]
    status: str  # FINISHED | FAILED | KILLED (the MLflow parent's status)
    experiment_id: str
    parent_run_id: str
    resumed_trials: int  # trials loaded from an earlier run

    @property
    def best(self) -> Trial | None:
        return best_trial(self.trials)


def run_study(
    study: Study,
    evaluate: Callable[[Config], Measurement],
    *,
    tracking_uri: str,
    storage_url: str,
    fingerprint: str | None = None,
    versions: Mapping[str, str] | None = None,
    callbacks: Iterable[Callback] = (),
    on_start: Callable[[StudyResult], None] | None = None,
    priors: Iterable[Measurement] = (),
    constraint: Callable[[Config], bool] | None = None,
    worker: int | None = None,
    heartbeat_s: float = DEFAULT_HEARTBEAT_S,
) -> StudyResult:
    """Run (or resume) ``study`` with ``evaluate`` measuring configs of its workload.

    Args:
        study: what to tune.
        evaluate: measures one config of ``study.workload`` (live or replayed).
        tracking_uri: MLflow tracking URI.
        storage_url: Optuna storage URL (see ``flashtune.experiments.study.storage.open_storage``).
        fingerprint: fingerprint of the measuring machine (default: the spec's).
        versions: driver/CUDA/torch/Triton of the measuring machine (default: the spec's).
        callbacks: more loop callbacks (a progress bar), called after storage and MLflow.
        on_start: called once the history is loaded and the parent is open (trials so far).
        priors: measurements from elsewhere told to the strategy first (not trials here);
            the parent records their sources, and each trial whose config they held
            records which (``flashtune.experiments.evaluation.priors``).
        constraint: narrows the space further (replay: only the recorded configs).
        worker: shared storage only: this worker's index; seeds its strategy apart from
            the other workers' (default: derived from the process id).
        heartbeat_s: shared RDB storage only: Optuna's heartbeat interval.

    With a shared storage (PostgreSQL, ``journal:PATH``; see ``storage.is_shared_storage``)
    any number of processes may run the same study at once: each claims its trials in the
    storage before measuring them (``ledger.SharedLedger``).

    Returns:
        The study's trials (all runs) and how the MLflow parent ended.

    Raises:
        Whatever ended the study, after the parent run was closed FAILED or KILLED.
    """
    db = sqlite_path(storage_url)
    if db is not None:  # one process per SQLite study: refused before any write
        with study_lock(db, study.storage_name):
            return _run_study(study, evaluate, storage_url, tracking_uri, fingerprint, versions, callbacks, on_start,
                              priors, constraint, worker, heartbeat_s)
    return _run_study(study, evaluate, storage_url, tracking_uri, fingerprint, versions, callbacks, on_start,
                      priors, constraint, worker, heartbeat_s)


def _run_study(study: Study, evaluate: Callable[[Config], Measurement], storage_url: str, tracking_uri: str,
               fingerprint: str | None, versions: Mapping[str, str] | None, callbacks: Iterable[Callback],
               on_start: Callable[[StudyResult], None] | None, priors: Iterable[Measurement],
               constraint: Callable[[Config], bool] | None, worker: int | None, heartbeat_s: float) -> StudyResult:
    priors = list(priors)  # told to the strategy, and described in MLflow
    fingerprint = fingerprint or study.hardware.fingerprint
    versions = dict(versions) if versions else {
        "driver": study.hardware.driver, "cuda": study.hardware.cuda,
        "torch": study.hardware.torch, "triton": study.hardware.triton,
    }
    space = for_workload(study.workload, study.hardware)
    if constraint is not None:
        fits = space.is_feasible
        space = SearchSpace(space.tunables, lambda config: fits(config) and constraint(config))
    shared = is_shared_storage(storage_url)
    strategy = make_strategy(study.strategy, space, seed=worker_seed(study.seed, worker) if shared else study.seed,
                             **study.strategy_options)
    # Keyed by GPU model too: the same study name on two GPUs is two studies (as in MLflow,
    # where each GPU model has its own experiment), even in one shared storage.
    try:
        storage = open_storage(storage_url, heartbeat_s=heartbeat_s if shared else None)
    except DamagedDatabase as exc:  # the repair command, with what it needs to find the study's trials
        raise ValueError(exc.advice(study.storage_name, tracking_uri)) from None
    store = TrialStore(storage, study.storage_name, study.identity(fingerprint), space)
    ledger: StoreLedger | SharedLedger
    journal = journal_path(storage_url)
    if journal:
        # Before any trial is asked or reaped: what a cut of the journal lost, MLflow holds.
        restore_from_mlflow(store, journal, tracking_uri)
    if shared:
        ledger = SharedLedger(store)
        ledger.reap(own_too=True)  # dead workers' claims; live ones belong to workers running now
    else:
        ledger = StoreLedger(store)
    history = History(ledger.refresh())
    resumed = len(history.trials)
    tracker = MlflowTracker(
        tracking_uri,
        study_name=study.name,
        gpu_name=study.hardware.name,
        parent_tags={**_parent_tags(study, fingerprint, versions), **prior_tags.parent_tags(priors)},
        parent_params=_parent_params(study),
        child_tags={"strategy": study.strategy, "workload": study.workload.name, "gpu": study.hardware.name},
        study_info={**study.identity(fingerprint), "budget_trials": study.trials},
        shared=shared,
        trial_tags=prior_tags.trial_tagger(priors) if priors else None,
    )

    def result(status: str, trials: Sequence[Trial]) -> StudyResult:
        return StudyResult(study, tuple(trials), status, tracker.experiment_id, tracker.parent_run_id, resumed)

    def load_final() -> list[Trial]:
        return ledger.refresh() if shared else ledger.reload()

    def whole(callback: Callback) -> Callback:
        # A SIGTERM raised inside an MLflow write can leave its SQLite session unusable, and
        # then closing the parent KILLED fails (seen in CI under load): let the write finish,
        # take the signal right after it.
        def call(trial: Trial, trials: Sequence[Trial]) -> None:
            with signals_deferred():
                callback(trial, trials)

        return call

    # Trials carry the ledger's numbers and the study's elapsed time (all its runs).
    loop_callbacks = [whole(tracker), *callbacks]
    try:
        # Inside the try: a failure while reconciling must not leave the parent RUNNING.
        tracker.start(history.trials)
        if on_start is not None:
            on_start(result("RUNNING", history.trials))
        run(strategy, evaluate, ledger=ledger, max_trials=study.trials, max_seconds=study.max_seconds,
            callbacks=loop_callbacks, priors=priors)
    except BaseException as exc:
        status = "KILLED" if isinstance(exc, (KeyboardInterrupt, StudyInterrupted)) else "FAILED"
        with signals_deferred():
            try:
                final = load_final()
            except Exception:  # the storage may be what failed: close MLflow with what we have
                final = history.trials
            try:
                tracker.end(status, final, failed_on=exc)
            except Exception as end_exc:  # keep the original error; this one is secondary
                if full_disk(exc) is None or full_disk(end_exc) is None:  # else the error line says it
                    _log.error("study %r: could not close the MLflow parent run: %s", study.name, first_line(end_exc))
        raise
    status = "FINISHED"
    with signals_deferred():
        # Reloaded from storage: the trials as persisted, with the study's elapsed times.
        final = load_final()
        tracker.end(status, final)
    return result(status, final)


def worker_seed(seed: int, worker: int | None) -> int:
    """The strategy seed of one worker of a shared study: worker 0 keeps the study's seed,
    others are spread apart (partitioning by seed); no index: the process id decides."""
    index = os.getpid() if worker is None else worker
    return seed + 1_000_003 * index


def _parent_tags(study: Study, fingerprint: str, versions: Mapping[str, str]) -> dict[str, str]:
    major, minor = study.hardware.compute_capability
    return {
        "gpu": study.hardware.name,
        "compute_capability": f"{major}.{minor}",
        "arch": study.hardware.arch,
        "fingerprint": fingerprint,
        "driver": versions.get("driver", ""),
        "cuda": versions.get("cuda", ""),
        "torch": versions.get("torch", ""),
        "triton": versions.get("triton", ""),
        "strategy": study.strategy,
        "seed": str(study.seed),
        "workload": study.workload.name,
        "objective": study.objective,
        "budget_trials": str(study.trials),
    }


def _parent_params(study: Study) -> dict[str, str]:
    params = {
        "strategy": study.strategy,
        "seed": str(study.seed),
        "objective": study.objective,
        **{f"workload.{k}": str(v) for k, v in study.workload.to_dict().items()},
    }
    params.update({f"option.{k}": json.dumps(v) for k, v in study.strategy_options.items()})
    return params


def studies_for(
    name: str,
    workloads: Sequence[Workload],
    **fields: Any,
) -> list[Study]:
    """One study per workload: ``name`` alone for one workload, ``name/<workload>`` for several."""
    if not workloads:
        raise ValueError("give at least one workload")
    if len(set(workloads)) != len(workloads):
        raise ValueError(f"workloads repeated: {[w.name for w in workloads]}")
    if len(workloads) == 1:
        return [Study(name=name, workload=workloads[0], **fields)]
    return [Study(name=f"{name}/{w.name}", workload=w, **fields) for w in workloads]


__all__ = ["Study", "StudyInterrupted", "StudyResult", "run_study", "studies_for"]

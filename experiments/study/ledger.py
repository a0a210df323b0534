"""A study's trials in Optuna storage (``TrialStore``) and its ledgers: one process, or many
workers sharing it.

``StoreLedger``: one process (SQLite by default); a killed run's trials are recovered on
resume (see ``TrialStore.recover``). ``SharedLedger``: claims on a study that many workers
share, made only through Optuna's storage:

Several processes (one per GPU, on one host or many) tune one study. They coordinate
through nothing but the study's Optuna storage (PostgreSQL, or ``journal:PATH`` on one
host): no scheduler, no queue, no lock of our own.

A worker *claims* a config by creating the RUNNING Optuna trial for it before measuring
it. The storage makes creation atomic: RDBStorage locks the study row while it numbers a
trial, JournalStorage appends under a file lock, and the config is a user attribute of
the template trial, so it is written in the same step. After creating its claim a worker
reads the study back and keeps the claim only if

- no live trial (measured, or RUNNING and not released) created before it has the same
  config (uniqueness: the oldest claim of a config wins), and
- fewer than ``budget`` live trials were created before it (the budget is exact).

A losing claim is *released*: marked FAIL with ``flashtune.released`` (the reason) and
never part of the history; the worker asks its strategy again. Every worker applies the
same rule to the same ordering (the storage's trial ids), so all agree on the winner.

Dead workers: a claim whose worker was SIGKILLed stays RUNNING until it is *reaped*:
on the worker's own host by its process id (immediately), from any host by Optuna's
heartbeat (RDB storage with ``heartbeat_interval``: ``fail_stale_trials``). A reaped
claim that had written its measurement still counts (the measurement attribute is what
makes a trial measured); one without is failed with ``flashtune.interrupted`` and its
config is free to be claimed again: retried once, recorded once.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from flashtune.experiments.localhost import first_line, full_disk
from flashtune.experiments.study.signals import signals_deferred
from flashtune.experiments.study.storage import (
    CONFIG_ATTR,
    ELAPSED_ATTR,
    IDENTITY_ATTR,
    INTERRUPTED_ATTR,
    MEASUREMENT_ATTR,
    NUMBER_ATTR,
    OWNER_ATTR,
    process_alive,
)
from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement
from flashtune.search import cost_ms
from flashtune.search.loop import Evaluate, History, Ledger, Trial
from flashtune.search.space import SearchSpace

if TYPE_CHECKING:  # optuna loads in ~1 s: only when a study runs, not for `flashtune --help`
    from optuna.storages import BaseStorage

_log = logging.getLogger(__name__)

#: Seconds between reads of the study while the last trials of the budget run elsewhere.
POLL_S = 0.2
#: Trial user attribute of a released claim: why it lost ("duplicate" or "over budget").
RELEASED_ATTR = "flashtune.released"


@dataclass(frozen=True)
class Recovery:
    """What opening a study found left over from an earlier process."""

    salvaged: int = 0  # RUNNING trials whose measurement was written: finished now
    interrupted: int = 0  # RUNNING trials without a measurement: marked FAIL
    foreign: int = 0  # RUNNING trials of a process on another host: left alone


class TrialStore:
    """One study's trials in Optuna storage: recover, load the history, record new trials.

    Args:
        storage: an opened Optuna storage (see :func:`open_storage`).
        study_name: the Optuna study name (the flashtune study name).
        identity: JSON-ready facts that define the study (workload, strategy, seed, ...);
            a study resumed with different facts is refused, naming them.
        space: the search space; its tunables become the trials' Optuna distributions.
        clock: monotonic clock for the elapsed time of trials.
    """

    def __init__(
        self,
        storage: BaseStorage,
        study_name: str,
        identity: Mapping[str, Any],
        space: SearchSpace,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import optuna

        self._optuna = optuna
        self.storage = storage
        self.study_name = study_name
        self.identity = json.loads(json.dumps(dict(identity), sort_keys=True))
        self.space = space
        self._clock = clock
        self.distributions = {
            name: optuna.distributions.CategoricalDistribution(list(values)) for name, values in space.tunables.items()
        }
        self.study_id = self._create_or_load()
        self._next_number = 0
        self._elapsed_offset_s = 0.0
        self._session_start = clock()
        self._elapsed_by_number: dict[int, float] = {}

    # -- opening ----------------------------------------------------------------------------

    def _create_or_load(self) -> int:
        optuna = self._optuna
        try:
            study_id = self.storage.get_study_id_from_name(self.study_name)
        except KeyError:
            try:
                study_id = self.storage.create_new_study(
                    [optuna.study.StudyDirection.MINIMIZE], study_name=self.study_name
                )
            except optuna.exceptions.DuplicatedStudyError:  # created by a racing process
                study_id = self.storage.get_study_id_from_name(self.study_name)
            else:
                self.storage.set_study_user_attr(study_id, IDENTITY_ATTR, self.identity)
                return study_id
        stored = self.storage.get_study_user_attrs(study_id).get(IDENTITY_ATTR)
        deadline = time.monotonic() + 10.0
        while stored is None and time.monotonic() < deadline:
            # A worker racing this one created the study and is writing its identity now.
            time.sleep(0.1)
            stored = self.storage.get_study_user_attrs(study_id).get(IDENTITY_ATTR)
        if stored is None:
            raise ValueError(
                f"study {self.study_name!r} exists in the Optuna storage but was not made by flashtune; "
                "choose another --study-name"
            )
        differing = sorted(k for k in set(stored) | set(self.identity) if stored.get(k) != self.identity.get(k))
        if differing:
            details = "; ".join(f"{k}: stored {stored.get(k)!r}, asked {self.identity.get(k)!r}" for k in differing)
            raise ValueError(
                f"study {self.study_name!r} was created with other settings ({details}); "
                "resume it with the same settings or choose another --study-name"
            )
        return study_id

    def recover(self) -> Recovery:
        """Finish or fail the trials that a killed process left RUNNING.

        Raises:
            ValueError: a live process on this host is running this study now.
        """
        TrialState = self._optuna.trial.TrialState
        here = socket.gethostname()
        salvaged = interrupted = foreign = 0
        for frozen in self.storage.get_all_trials(self.study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, frozen.number)
            attrs = frozen.user_attrs
            if MEASUREMENT_ATTR in attrs:
                # Measured and written, killed before the state change: finish it, lose nothing.
                measurement = Measurement.from_dict(attrs[MEASUREMENT_ATTR])
                self.set_final_state(trial_id, measurement)
                salvaged += 1
                continue
            owner = attrs.get(OWNER_ATTR) or {}
            if owner.get("host") not in (None, here):
                # Another host may still be measuring it (PostgreSQL studies): not ours to judge.
                foreign += 1
                continue
            pid = owner.get("pid")
            if isinstance(pid, int) and pid != os.getpid() and process_alive(pid):
                raise ValueError(
                    f"study {self.study_name!r} is being run right now by process {pid} on this host; "
                    "wait for it or stop it (SQLite storage is for one process at a time)"
                )
            self.storage.set_trial_user_attr(trial_id, INTERRUPTED_ATTR, True)
            self.storage.set_trial_state_values(trial_id, TrialState.FAIL)
            interrupted += 1
        if foreign:
            warnings.warn(f"study {self.study_name!r}: {foreign} trial(s) RUNNING on another host were left alone",
                          stacklevel=2)
        return Recovery(salvaged, interrupted, foreign)

    def load_history(self) -> History:
        """The study's measured trials, in order, as a ``search.loop.History`` (for resume)."""
        TrialState = self._optuna.trial.TrialState
        stored = []
        for frozen in self.storage.get_all_trials(
            self.study_id, deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)
        ):
            attrs = frozen.user_attrs
            if MEASUREMENT_ATTR not in attrs:
                continue  # interrupted before it was measured
            stored.append((attrs.get(NUMBER_ATTR, frozen.number), frozen.number, attrs))
        stored.sort(key=lambda item: (item[0], item[1]))
        history = History()
        for number_attr, _, attrs in stored:
            measurement = Measurement.from_dict(attrs[MEASUREMENT_ATTR])
            config = Config.from_dict(attrs.get(CONFIG_ATTR) or measurement.config.to_dict())
            if config in history.known:
                # Only two processes writing one study can do this; keep the first, say so.
                warnings.warn(f"study {self.study_name!r}: config {config} stored twice; keeping the first",
                              stacklevel=2)
                continue
            number = len(history.trials)
            if number_attr != number:
                _log.warning("study %r: stored trial number %s renumbered %s", self.study_name, number_attr, number)
            elapsed = float(attrs.get(ELAPSED_ATTR, 0.0))
            history.trials.append(Trial(number, config, measurement, elapsed))
            history.known[config] = measurement
            self._elapsed_by_number[number] = elapsed
        self._next_number = len(history.trials)
        self._elapsed_offset_s = max(self._elapsed_by_number.values(), default=0.0)
        self._session_start = self._clock()
        return history

    # -- recording ----------------------------------------------------------------------------

    def measuring(self, evaluate: Evaluate) -> Evaluate:
        """Wrap ``evaluate`` so every measurement is a stored trial (RUNNING, then final).

        Call :meth:`load_history` first: it sets the next trial number.
        """

        def measure(config: Config) -> Measurement:
            trial_id: int | None = None
            finished = False
            try:
                # Each write whole: a SIGTERM landing in one is taken after it, here or in
                # the handler below, never between a trial's measurement and its state.
                with signals_deferred():
                    trial_id = self._begin(config)
                measurement = evaluate(config)
                with signals_deferred():
                    self._finish(trial_id, measurement)
                    finished = True
            except BaseException as exc:
                # An exception or a signal mid-measurement: the trial is failed, not left RUNNING.
                if trial_id is not None and not finished:
                    with signals_deferred():
                        self.abandon(trial_id, failed_on=exc)
                raise
            return measurement

        return measure

    def elapsed_s(self, number: int) -> float:
        """Elapsed tuning time at trial ``number`` (sessions summed, pauses between them not)."""
        return self._elapsed_by_number[number]

    @property
    def next_number(self) -> int:
        return self._next_number

    def _begin(self, config: Config) -> int:
        template = self._template(config, self._optuna.trial.TrialState.RUNNING, None, {
            NUMBER_ATTR: self._next_number,
            CONFIG_ATTR: config.to_dict(),
            OWNER_ATTR: {"host": socket.gethostname(), "pid": os.getpid()},
        })
        return self.storage.create_new_trial(self.study_id, template_trial=template)

    def _template(self, config: Config, state: Any, values: list[float] | None, user_attrs: dict[str, Any]) -> Any:
        in_space = config in self.space
        return self._optuna.trial.create_trial(
            state=state,
            values=values,
            # A config outside the declared space (never asked by our strategies) is kept in
            # the user attribute only: Optuna needs one distribution per param name.
            params=config.to_dict() if in_space else {},
            distributions=self.distributions if in_space else {},
            user_attrs=user_attrs,
        )

    def add_recorded(self, trial: Trial, user_attrs: Mapping[str, Any] | None = None,
                     started: datetime | None = None) -> None:
        """Store a trial measured earlier, finished, as :meth:`measuring` would have stored it
        (``flashtune repair`` rebuilding a study from what survived of it).

        Args:
            trial: the trial: its flashtune number, config, measurement and elapsed time.
            user_attrs: more attributes it carried (its owner, ...); ours are set from ``trial``.
            started: when it started (Optuna's ``datetime_start``), if known.
        """
        TrialState = self._optuna.trial.TrialState
        value = cost_ms(trial.measurement)
        finite = math.isfinite(value)
        template = self._template(trial.config, TrialState.COMPLETE if finite else TrialState.FAIL,
                                  [value] if finite else None, {
                                      **(user_attrs or {}),
                                      NUMBER_ATTR: trial.number,
                                      CONFIG_ATTR: trial.config.to_dict(),
                                      ELAPSED_ATTR: trial.elapsed_s,
                                      MEASUREMENT_ATTR: trial.measurement.to_dict(),
                                  })
        if started is not None:
            template.datetime_start = started
        self.storage.create_new_trial(self.study_id, template_trial=template)

    def _finish(self, trial_id: int, measurement: Measurement) -> None:
        elapsed = self._elapsed_offset_s + (self._clock() - self._session_start)
        self.storage.set_trial_user_attr(trial_id, ELAPSED_ATTR, elapsed)
        # The measurement goes last: once it is there, a resume can finish the trial.
        self.storage.set_trial_user_attr(trial_id, MEASUREMENT_ATTR, measurement.to_dict())
        self.set_final_state(trial_id, measurement)
        self._elapsed_by_number[self._next_number] = elapsed
        self._next_number += 1

    def set_final_state(self, trial_id: int, measurement: Measurement) -> None:
        TrialState = self._optuna.trial.TrialState
        value = cost_ms(measurement)
        if math.isfinite(value):
            self.storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [value])
        else:
            self.storage.set_trial_state_values(trial_id, TrialState.FAIL)

    def abandon(self, trial_id: int, *, failed_on: BaseException | None = None) -> None:
        """Fail a trial that ``failed_on`` (an exception or a signal) interrupted."""
        TrialState = self._optuna.trial.TrialState
        try:
            self.storage.set_trial_user_attr(trial_id, INTERRUPTED_ATTR, True)
            self.storage.set_trial_state_values(trial_id, TrialState.FAIL)
        except Exception as exc:  # the storage itself may be what failed; resume cleans up
            if full_disk(failed_on) is None or full_disk(exc) is None:  # else the study's error line says it
                _log.warning("study %r: could not mark trial %s failed: %s", self.study_name, trial_id,
                             first_line(exc))


@dataclass
class Snapshot:
    """The shared study as one read of the storage saw it.

    Attributes:
        measured: measured trials by Optuna trial number (the flashtune trial number).
        claims: configs of live RUNNING claims without a measurement, by trial id.
        live_ids: storage trial ids of measured trials and live claims, in creation order.
        configs_by_id: the config of each live trial id.
        started: wall-clock start of the study (its first trial), epoch seconds.
    """

    measured: dict[int, Trial] = field(default_factory=dict)
    claims: dict[int, Config] = field(default_factory=dict)
    live_ids: list[int] = field(default_factory=list)
    configs_by_id: dict[int, Config] = field(default_factory=dict)
    started: float = math.inf

    @property
    def known(self) -> dict[Config, Measurement]:
        return {t.config: t.measurement for t in self.measured.values()}

    def trials(self) -> list[Trial]:
        return [self.measured[n] for n in sorted(self.measured)]


@dataclass(frozen=True)
class Claim:
    """A config this worker holds: the RUNNING trial created for it."""

    trial_id: int
    number: int
    config: Config


class SharedLedger(Ledger):
    """Claim, measure and reap trials of one study that many workers run at once.

    Args:
        store: the study's :class:`TrialStore` (opened, identity checked).
    """

    def __init__(self, store: TrialStore) -> None:
        import optuna

        self._optuna = optuna
        self.store = store
        self.storage = store.storage
        self.study_id = store.study_id
        self._here = socket.gethostname()
        self._study: Any = None  # an optuna.Study view, only for fail_stale_trials
        self._snap = Snapshot()
        self._mine: list[Trial] = []  # recorded by this worker since the last refresh

    # -- the Ledger interface ---------------------------------------------------------------

    def refresh(self) -> Sequence[Trial]:
        self._snap = self.snapshot()
        self._mine = []
        return self._snap.trials()

    def known(self, config: Config) -> Measurement | None:
        return self._snap.known.get(config)

    def in_flight(self) -> Sequence[Config]:
        return list(self._snap.claims.values())

    def wait(self) -> None:
        if not self.reap():
            time.sleep(POLL_S)

    def measure(self, config: Config, evaluate: Evaluate, *, budget: int | None,
                elapsed_s: Callable[[], float]) -> Trial | None:
        if budget is None:
            raise ValueError("a shared study needs a trial budget (max_trials)")
        claim: Claim | None = None
        finished = False
        try:
            # Each write whole (the claim; the measurement with the final state): a SIGTERM
            # is taken after it, and a claim it interrupts is abandoned below.
            with signals_deferred():
                claim = self.claim(config, budget)
            if claim is None:
                return None  # an older claim won; the next read shows it
            with self.heartbeat(claim):
                measurement = evaluate(config)
            # Workers' clocks differ: a shared study's time is the wall time since its first trial.
            with signals_deferred():
                trial = self.finish(claim, measurement, wall_elapsed_s(self._snap))
                finished = True
        except BaseException as exc:
            if claim is not None and not finished:
                with signals_deferred():
                    self.abandon(claim, failed_on=exc)
            raise
        self._mine.append(trial)
        return trial

    @property
    def trials(self) -> Sequence[Trial]:
        return sorted([*self._snap.measured.values(), *self._mine], key=lambda t: t.number)

    # -- reading ----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """One read of every trial of the study, classified (see :class:`Snapshot`)."""
        TrialState = self._optuna.trial.TrialState
        snap = Snapshot()
        frozen_trials = sorted(self.storage.get_all_trials(self.study_id, deepcopy=False), key=lambda t: t._trial_id)
        for frozen in frozen_trials:
            if frozen.datetime_start is not None:
                snap.started = min(snap.started, frozen.datetime_start.timestamp())
            attrs = frozen.user_attrs
            raw = attrs.get(CONFIG_ATTR)
            if raw is None:
                continue
            config = Config.from_dict(raw)
            if MEASUREMENT_ATTR in attrs:
                measurement = Measurement.from_dict(attrs[MEASUREMENT_ATTR])
                if any(t.config == config for t in snap.measured.values()):
                    continue  # cannot happen with claims; keep the oldest if a pre-claim study has it
                elapsed = float(attrs.get(ELAPSED_ATTR, 0.0))
                snap.measured[frozen.number] = Trial(frozen.number, config, measurement, elapsed)
            elif frozen.state == TrialState.RUNNING and RELEASED_ATTR not in attrs:
                snap.claims[frozen._trial_id] = config
            else:
                continue  # released, interrupted: not part of the study
            snap.live_ids.append(frozen._trial_id)
            snap.configs_by_id[frozen._trial_id] = config
        return snap

    # -- claiming ---------------------------------------------------------------------------

    def claim(self, config: Config, budget: int) -> Claim | None:
        """Create the RUNNING trial for ``config``; None if an older trial wins (released)."""
        optuna = self._optuna
        in_space = config in self.store.space
        template = optuna.trial.create_trial(
            state=optuna.trial.TrialState.RUNNING,
            params=config.to_dict() if in_space else {},
            distributions=self.store.distributions if in_space else {},
            user_attrs={
                CONFIG_ATTR: config.to_dict(),
                OWNER_ATTR: {"host": self._here, "pid": os.getpid()},
            },
        )
        trial_id = self.storage.create_new_trial(self.study_id, template_trial=template)
        number = self.storage.get_trial_number_from_id(trial_id)
        snap = self.snapshot()
        older = [i for i in snap.live_ids if i < trial_id]
        if any(snap.configs_by_id[i] == config for i in older):
            self._release(trial_id, "duplicate")
            return None
        if len(older) >= budget:
            self._release(trial_id, "over budget")
            return None
        self.storage.set_trial_user_attr(trial_id, NUMBER_ATTR, number)
        return Claim(trial_id, number, config)

    def heartbeat(self, claim: Claim) -> Any:
        """A context manager that beats for ``claim`` while it is measured (RDB storage with
        a heartbeat interval; a no-op otherwise)."""
        from optuna.storages._heartbeat import get_heartbeat_thread

        return get_heartbeat_thread(claim.trial_id, self.storage)

    def finish(self, claim: Claim, measurement: Measurement, elapsed_s: float) -> Trial:
        """Write the measurement (it makes the trial measured), then the final state."""
        self.storage.set_trial_user_attr(claim.trial_id, ELAPSED_ATTR, elapsed_s)
        self.storage.set_trial_user_attr(claim.trial_id, MEASUREMENT_ATTR, measurement.to_dict())
        self.store.set_final_state(claim.trial_id, measurement)
        return Trial(claim.number, claim.config, measurement, elapsed_s)

    def abandon(self, claim: Claim, *, failed_on: BaseException | None = None) -> None:
        """An exception or a signal mid-measurement: fail the claim now (its config is free)."""
        self.store.abandon(claim.trial_id, failed_on=failed_on)

    def _release(self, trial_id: int, reason: str) -> None:
        self.storage.set_trial_user_attr(trial_id, RELEASED_ATTR, reason)
        self.storage.set_trial_state_values(trial_id, self._optuna.trial.TrialState.FAIL)

    # -- dead workers -------------------------------------------------------------------------

    def reap(self, *, own_too: bool = False) -> int:
        """Fail claims of dead workers: this host's by process id, any host's by heartbeat.

        Args:
            own_too: also this process's claims: at the start of a run, those are leftovers
                of an earlier run in this process (a cut journal left them RUNNING).

        Returns:
            How many claims were failed.
        """
        TrialState = self._optuna.trial.TrialState
        reaped = 0
        for frozen in self.storage.get_all_trials(self.study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            owner = frozen.user_attrs.get(OWNER_ATTR) or {}
            pid = owner.get("pid")
            if owner.get("host") != self._here or not isinstance(pid, int):
                continue
            if process_alive(pid) and not (own_too and pid == os.getpid()):
                continue
            try:
                if MEASUREMENT_ATTR in frozen.user_attrs:
                    # Measured and written, killed before the state change: finish it, lose nothing.
                    measurement = Measurement.from_dict(frozen.user_attrs[MEASUREMENT_ATTR])
                    self.store.set_final_state(frozen._trial_id, measurement)
                else:
                    self.storage.set_trial_user_attr(frozen._trial_id, INTERRUPTED_ATTR, True)
                    self.storage.set_trial_state_values(frozen._trial_id, TrialState.FAIL)
            except self._optuna.exceptions.UpdateFinishedTrialError:
                continue  # another worker reaped it first
            reaped += 1
        return reaped + self._reap_stale()

    def _reap_stale(self) -> int:
        """Optuna's own heartbeat check, for workers on other hosts (RDB storage only)."""
        from optuna.storages._heartbeat import is_heartbeat_enabled

        if not is_heartbeat_enabled(self.storage):
            return 0
        stale = self.storage._get_stale_trial_ids(self.study_id)  # what fail_stale_trials reads
        if not stale:
            return 0
        if self._study is None:
            self._study = self._optuna.load_study(study_name=self.store.study_name, storage=self.storage)
        with warnings.catch_warnings():  # experimental since Optuna 2.9, stable in use
            warnings.simplefilter("ignore", self._optuna.exceptions.ExperimentalWarning)
            self._optuna.storages.fail_stale_trials(self._study)
        return len(stale)


def wall_elapsed_s(snapshot: Snapshot, now: float | None = None) -> float:
    """Seconds since the shared study's first trial started (wall clock: workers differ)."""
    now = time.time() if now is None else now
    return max(0.0, now - snapshot.started) if math.isfinite(snapshot.started) else 0.0


class StoreLedger(Ledger):
    """A study of one process in Optuna storage: every trial stored RUNNING, then final.

    The first refresh recovers what a killed run left (``TrialStore.recover``) and loads
    the study's trials; a resumed study neither loses nor repeats a trial.
    """

    def __init__(self, store: TrialStore) -> None:
        self.store = store
        self._trials: list[Trial] | None = None
        self._known: dict[Config, Measurement] = {}

    def refresh(self) -> Sequence[Trial]:
        if self._trials is None:  # one process writes the study: read it once
            self.store.recover()
            self._trials = self.store.load_history().trials
            self._known = {t.config: t.measurement for t in self._trials}
        return self._trials

    def known(self, config: Config) -> Measurement | None:
        return self._known.get(config)

    def measure(self, config: Config, evaluate: Evaluate, *, budget: int | None,
                elapsed_s: Callable[[], float]) -> Trial:
        trials = self.refresh()
        number = self.store.next_number
        measurement = self.store.measuring(evaluate)(config)
        # The study's tuning time (earlier sessions summed), not this run's.
        trial = Trial(number, config, measurement, self.store.elapsed_s(number))
        trials.append(trial)
        self._known[config] = measurement
        return trial

    @property
    def trials(self) -> Sequence[Trial]:
        return self.refresh()

    def reload(self) -> list[Trial]:
        """The trials as persisted (a fresh read of the storage)."""
        return self.store.load_history().trials

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

import json
import logging
import math
import os
import socket
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flashtune.experiments.study.sqlite import tune_sqlite_connections
from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement
from flashtune.search import cost_ms
from flashtune.search.loop import Evaluate, History, Trial
from flashtune.search.space import SearchSpace

if TYPE_CHECKING:  # optuna loads in ~1 s: only when a study runs, not for `flashtune --help`
    from optuna.storages import BaseStorage

DEFAULT_STORAGE = "sqlite:///flashtune_optuna.db"

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
        path = url[len("journal:"):]
        path = path[2:] if path.startswith("//") else path  # journal:///abs and journal:rel both work
        if not path:
            raise ValueError(f"storage URL {url!r}: journal storage needs a file path, e.g. journal:optuna.log")
        from optuna.storages.journal import JournalFileBackend

        try:
            return optuna.storages.JournalStorage(JournalFileBackend(path))
        except OSError as exc:
            raise ValueError(f"storage URL {url!r}: {exc}") from None
    if "://" not in url:
        raise ValueError(
            f"storage URL {url!r} is not a URL: use e.g. {DEFAULT_STORAGE}, postgresql://user@host/db or journal:PATH"
        )
    if url.startswith("sqlite://") and not url.startswith("sqlite:///"):
        raise ValueError(f"storage URL {url!r}: SQLite URLs need three slashes, e.g. {DEFAULT_STORAGE}")

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
            except Exception as exc:
                # Workers started together on a fresh database race to create Optuna's schema.
                text = f"{type(exc).__name__} {exc}"
                if attempt == 4 or not any(w in text for w in ("UniqueViolation", "duplicate key", "already exists")):
                    raise
                time.sleep(2.0)
        raise AssertionError("unreachable")
    except Exception as exc:  # SQLAlchemy raises ArgumentError, OperationalError, ImportError, ...
        raise ValueError(f"storage URL {url!r} cannot be opened: {type(exc).__name__}: {exc}") from None


def postgres_driver(url: str) -> str:
    """``postgresql://`` with the driver that is installed: SQLAlchemy 2.1 reads a plain
    scheme as psycopg 3, while flashtune's dev extras bring psycopg2."""
    if not url.startswith("postgresql://"):
        return url
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


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
            trial_id = self._begin(config)
            try:
                measurement = evaluate(config)
            except BaseException:
                # An exception or a signal mid-measurement: the trial is failed, not left RUNNING.
                self.abandon(trial_id)
                raise
            self._finish(trial_id, measurement)
            return measurement

        return measure

    def elapsed_s(self, number: int) -> float:
        """Elapsed tuning time at trial ``number`` (sessions summed, pauses between them not)."""
        return self._elapsed_by_number[number]

    @property
    def next_number(self) -> int:
        return self._next_number

    def _begin(self, config: Config) -> int:
        optuna = self._optuna
        in_space = config in self.space
        template = optuna.trial.create_trial(
            state=optuna.trial.TrialState.RUNNING,
            # A config outside the declared space (never asked by our strategies) is kept in
            # the user attribute only: Optuna needs one distribution per param name.
            params=config.to_dict() if in_space else {},
            distributions=self.distributions if in_space else {},
            user_attrs={
                NUMBER_ATTR: self._next_number,
                CONFIG_ATTR: config.to_dict(),
                OWNER_ATTR: {"host": socket.gethostname(), "pid": os.getpid()},
            },
        )
        return self.storage.create_new_trial(self.study_id, template_trial=template)

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

    def abandon(self, trial_id: int) -> None:
        TrialState = self._optuna.trial.TrialState
        try:
            self.storage.set_trial_user_attr(trial_id, INTERRUPTED_ATTR, True)
            self.storage.set_trial_state_values(trial_id, TrialState.FAIL)
        except Exception as exc:  # the storage itself may be what failed; resume cleans up
            _log.warning("study %r: could not mark trial %s failed: %s", self.study_name, trial_id, exc)


def process_alive(pid: int) -> bool:
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

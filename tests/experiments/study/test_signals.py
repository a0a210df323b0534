"""A SIGTERM landing while a trial is written is taken after the write: never a trial left RUNNING."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import optuna
import pytest
from study_support import WORKLOAD

from flashtune.experiments.study.ledger import TrialStore
from flashtune.experiments.study.runner import Study, StudyInterrupted
from flashtune.experiments.study.signals import signals_deferred
from flashtune.experiments.study.storage import ELAPSED_ATTR, MEASUREMENT_ATTR, open_storage
from flashtune.kernels.space import SAFE_DEFAULT
from flashtune.objectives.feasibility import for_workload
from flashtune.objectives.types import Measurement, Status


def _raise(signum, frame):
    raise StudyInterrupted(f"signal {signum}")


@pytest.fixture
def sigterm_raises():
    """The study CLI's handler: SIGTERM raises StudyInterrupted wherever the main thread is."""
    previous = signal.signal(signal.SIGTERM, _raise)
    yield
    signal.signal(signal.SIGTERM, previous)


class _SignalOnWrite:
    """Wraps an Optuna storage; sends this process SIGTERM as ``key`` is written, as a user's
    ``kill`` landing in that write does (before the write returns)."""

    def __init__(self, storage, key: str) -> None:
        self._storage, self._key = storage, key

    def set_trial_user_attr(self, trial_id, key, value):
        self._storage.set_trial_user_attr(trial_id, key, value)
        if key == self._key:
            os.kill(os.getpid(), signal.SIGTERM)

    def __getattr__(self, name):
        return getattr(self._storage, name)


@pytest.mark.parametrize("key", [MEASUREMENT_ATTR, ELAPSED_ATTR])
def test_a_sigterm_as_the_measurement_is_stored_leaves_the_trial_finished(stores, h200, sigterm_raises, key):
    study = Study(name="race", workload=WORKLOAD, hardware=h200, trials=3, seed=5)
    space = for_workload(study.workload, h200)
    store = TrialStore(open_storage(stores["storage"]), study.storage_name, study.identity(h200.fingerprint), space)
    store.load_history()
    store.storage = _SignalOnWrite(store.storage, key)
    measurement = Measurement(SAFE_DEFAULT, WORKLOAD, Status.OK, median_ms=1.5, p20_ms=1.4, p80_ms=1.6)
    with pytest.raises(StudyInterrupted):
        store.measuring(lambda config: measurement)(SAFE_DEFAULT)
    (trial,) = optuna.load_study(study_name=study.storage_name, storage=stores["storage"]).get_trials()
    assert trial.state is optuna.trial.TrialState.COMPLETE and trial.value == 1.5
    assert trial.user_attrs[MEASUREMENT_ATTR]["median_ms"] == 1.5


def test_sigterms_at_random_moments_of_trials_never_leave_one_running(stores, h200, sigterm_raises):
    """100 trials, each hit by a SIGTERM from another thread at a random moment of its
    writes (what `kill` does to the study's process): every trial ends COMPLETE or FAIL."""
    study = Study(name="storm", workload=WORKLOAD, hardware=h200, trials=3, seed=5)
    space = for_workload(study.workload, h200)
    store = TrialStore(open_storage(stores["storage"]), study.storage_name, study.identity(h200.fingerprint), space)
    store.load_history()
    configs = [c for c in space.configs() if c in space][:100]
    rng = random.Random(16)

    def measurement(config):
        return Measurement(config, WORKLOAD, Status.OK, median_ms=1.5, p20_ms=1.4, p80_ms=1.6)

    started = time.perf_counter()
    store.measuring(measurement)(configs[0])  # how long one trial's writes take here
    window = time.perf_counter() - started
    interrupted = 0
    for config in configs[1:]:
        timer = threading.Timer(rng.uniform(0.0, 1.2 * window), os.kill, (os.getpid(), signal.SIGTERM))
        try:
            timer.start()
            store.measuring(measurement)(config)
            timer.join()
            time.sleep(0.001)  # a signal sent after the trial: taken here, between trials
        except StudyInterrupted:
            interrupted += 1
        finally:
            timer.join()
    trials = optuna.load_study(study_name=study.storage_name, storage=stores["storage"]).get_trials()
    # A signal before a trial's first write leaves no trial at all; every trial written ended.
    assert len(configs) - interrupted <= len(trials) <= len(configs)
    assert not [t.number for t in trials if t.state is optuna.trial.TrialState.RUNNING]
    assert interrupted > 20  # the signals landed in the trials, not all between them


def test_a_deferred_signal_is_delivered_once_after_the_block(sigterm_raises):
    with pytest.raises(StudyInterrupted):
        with signals_deferred():
            with signals_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)
            reached = True  # the inner block held it too
        pytest.fail("not delivered")
    assert reached

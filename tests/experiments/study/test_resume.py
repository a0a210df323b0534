"""Resume from Optuna storage: what earlier (killed) runs left is finished, failed or reused."""

from __future__ import annotations

import os
import subprocess
import sys

import optuna
import pytest
from study_support import WORKLOAD

from flashtune.experiments.study import measurers
from flashtune.experiments.study.ledger import TrialStore
from flashtune.experiments.study.runner import Study, run_study
from flashtune.experiments.study.storage import (
    INTERRUPTED_ATTR,
    MEASUREMENT_ATTR,
    NUMBER_ATTR,
    OWNER_ATTR,
    open_storage,
)
from flashtune.objectives.feasibility import for_workload


def make_study(h200, *, trials: int, name: str = "resume", **fields) -> Study:
    return Study(name=name, workload=WORKLOAD, hardware=h200, trials=trials, seed=5, **fields)


def replay(replay_dir, stores, study: Study):
    source = measurers.open_replay(study.hardware, [study.workload], replay_dir)
    return run_study(study, source.evaluator(study.workload), tracking_uri=stores["tracking_uri"],
                     storage_url=stores["storage"], fingerprint=source.fingerprint, versions=source.versions,
                     constraint=source.constraint(study.workload))


def optuna_trials(stores, study: Study) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study.storage_name, storage=stores["storage"]).get_trials(deepcopy=False)


def children(mlflow_client, result) -> list:
    return mlflow_client.search_runs([result.experiment_id], filter_string="tags.role = 'trial'", max_results=1000)


def test_same_name_resumes_to_the_budget(replay_dir, stores, h200, mlflow_client) -> None:
    first = replay(replay_dir, stores, make_study(h200, trials=6))
    second = replay(replay_dir, stores, make_study(h200, trials=15))
    assert second.resumed_trials == 6 and len(second.trials) == 15
    assert second.trials[:6] == first.trials  # the same trials, not measured again
    configs = [t.config for t in second.trials]
    assert len(set(configs)) == 15
    assert [t.number for t in second.trials] == list(range(15))
    assert first.parent_run_id == second.parent_run_id
    assert sorted(int(r.data.tags["trial"]) for r in children(mlflow_client, second)) == list(range(15))
    assert mlflow_client.get_run(second.parent_run_id).info.status == "FINISHED"
    # Stored in Optuna with the config as params and the measurement as a user attribute.
    stored = [t for t in optuna_trials(stores, second.study) if MEASUREMENT_ATTR in t.user_attrs]
    assert len(stored) == 15
    for frozen in stored:
        assert frozen.params == frozen.user_attrs[MEASUREMENT_ATTR]["config"]
    # Elapsed time keeps growing across runs.
    elapsed = [t.elapsed_s for t in second.trials]
    assert elapsed == sorted(elapsed)


def test_resume_with_other_settings_is_refused(replay_dir, stores, h200) -> None:
    replay(replay_dir, stores, make_study(h200, trials=2))
    with pytest.raises(ValueError, match=r"other settings \(seed: stored 5, asked 6\)"):
        replay(replay_dir, stores, Study(name="resume", workload=WORKLOAD, hardware=h200, trials=2, seed=6))


def _store(stores, study: Study, h200) -> TrialStore:
    space = for_workload(study.workload, h200)
    return TrialStore(open_storage(stores["storage"]), study.storage_name, study.identity(h200.fingerprint), space)


def test_running_trials_of_dead_processes(stores, h200) -> None:
    """A killed process leaves RUNNING trials: one with its measurement written is finished
    (nothing lost), one without is marked FAIL/interrupted and left out of the history."""
    from flashtune.kernels.config import Config
    from flashtune.objectives.types import Measurement, Status

    study = make_study(h200, trials=3)
    store = _store(stores, study, h200)
    store.load_history()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    measured = Config(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, **_extra_tunables())
    unmeasured = measured.replace(num_stages=3)
    m = Measurement(measured, WORKLOAD, Status.OK, median_ms=1.5, p20_ms=1.4, p80_ms=1.6)
    for config, attrs in ((measured, {MEASUREMENT_ATTR: m.to_dict()}), (unmeasured, {})):
        trial_id = store._begin(config)
        store.storage.set_trial_user_attr(trial_id, OWNER_ATTR, {"host": os.uname().nodename, "pid": dead_pid})
        for key, value in attrs.items():
            store.storage.set_trial_user_attr(trial_id, key, value)

    reopened = _store(stores, study, h200)
    recovery = reopened.recover()
    assert (recovery.salvaged, recovery.interrupted) == (1, 1)
    history = reopened.load_history()
    assert [t.config for t in history.trials] == [measured]
    states = {t.params["num_stages"]: t for t in optuna_trials(stores, study)}
    assert states[2].state is optuna.trial.TrialState.COMPLETE and states[2].value == 1.5
    assert states[3].state is optuna.trial.TrialState.FAIL and states[3].user_attrs[INTERRUPTED_ATTR] is True


def test_a_live_process_is_not_robbed(stores, h200) -> None:
    """A RUNNING trial of a process still alive on this host: refuse to run the study twice."""
    from flashtune.kernels.config import Config

    study = make_study(h200, trials=3)
    store = _store(stores, study, h200)
    store.load_history()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        trial_id = store._begin(Config(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, **_extra_tunables()))
        store.storage.set_trial_user_attr(trial_id, OWNER_ATTR, {"host": os.uname().nodename, "pid": sleeper.pid})
        with pytest.raises(ValueError, match=f"being run right now by process {sleeper.pid}"):
            _store(stores, study, h200).recover()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_half_written_child_is_replaced(replay_dir, stores, h200, mlflow_client) -> None:
    """A child left RUNNING (killed between create and finish) and a duplicate are replaced
    by exactly one finished child per trial."""
    first = replay(replay_dir, stores, make_study(h200, trials=4))
    trial = first.trials[2]
    # What a kill mid-write leaves: a RUNNING child tagged with the trial number, no metrics.
    mlflow_client.create_run(first.experiment_id, run_name="trial 2", tags={
        "role": "trial", "study": "resume", "trial": "2", "mlflow.parentRunId": first.parent_run_id})
    # And a child of a trial storage never kept (killed before the Optuna write).
    mlflow_client.create_run(first.experiment_id, run_name="trial 4", tags={
        "role": "trial", "study": "resume", "trial": "4", "mlflow.parentRunId": first.parent_run_id})
    second = replay(replay_dir, stores, make_study(h200, trials=4))
    runs = children(mlflow_client, second)
    assert sorted(int(r.data.tags["trial"]) for r in runs) == [0, 1, 2, 3]
    assert all(r.info.status in ("FINISHED", "FAILED") for r in runs)
    two = next(r for r in runs if r.data.tags["trial"] == "2")
    assert two.data.params["BLOCK_M"] == str(trial.config["BLOCK_M"])


def test_exception_ends_failed_and_trial_is_not_left_running(replay_dir, stores, h200, mlflow_client) -> None:
    source = measurers.open_replay(h200, [WORKLOAD], replay_dir)
    evaluate = source.evaluator(WORKLOAD)
    calls = []

    def flaky(config):
        calls.append(config)
        if len(calls) == 4:
            raise RuntimeError("the objective broke")
        return evaluate(config)

    study = make_study(h200, trials=8)
    with pytest.raises(RuntimeError, match="objective broke"):
        run_study(study, flaky, tracking_uri=stores["tracking_uri"], storage_url=stores["storage"],
                  fingerprint=source.fingerprint, constraint=source.constraint(WORKLOAD))
    experiment = mlflow_client.get_experiment_by_name("flashtune/NVIDIA H200")
    parent = mlflow_client.search_runs([experiment.experiment_id], filter_string="tags.role = 'study'")[0]
    assert parent.info.status == "FAILED"
    states = [t.state for t in optuna_trials(stores, study)]
    assert optuna.trial.TrialState.RUNNING not in states
    assert states.count(optuna.trial.TrialState.FAIL) >= 1
    # Resuming finishes the study: three kept, the broken config measured again, five more.
    result = replay(replay_dir, stores, study)
    assert result.resumed_trials == 3 and len(result.trials) == 8 and result.status == "FINISHED"
    assert len({t.config for t in result.trials}) == 8


def test_storage_url_errors_name_the_url() -> None:
    for url, words in (("sqlite://x.db", "three slashes"), ("not a url", "is not a URL"), ("", "non-empty"),
                       ("nosuchdriver://a/b", "cannot be opened")):
        with pytest.raises(ValueError, match=words):
            open_storage(url)


def test_journal_storage(replay_dir, tmp_path, stores, h200) -> None:
    journal = {**stores, "storage": f"journal:{tmp_path / 'optuna.log'}"}
    replay(replay_dir, journal, make_study(h200, trials=3))
    result = replay(replay_dir, journal, make_study(h200, trials=5))
    assert result.resumed_trials == 3 and len({t.config for t in result.trials}) == 5


def _extra_tunables() -> dict:
    """Values for tunables beyond the four classic ones (the kernel's space may grow)."""
    from flashtune.kernels.space import TUNABLES

    return {name: values[0] for name, values in TUNABLES.items()
            if name not in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")}


def test_stored_numbers_are_contiguous(replay_dir, stores, h200) -> None:
    result = replay(replay_dir, stores, make_study(h200, trials=5))
    numbers = sorted(t.user_attrs[NUMBER_ATTR] for t in optuna_trials(stores, result.study))
    assert numbers == list(range(5))


def test_mlflow_trials_unknown_to_the_storage_are_not_deleted(replay_dir, stores, tmp_path, h200,
                                                               mlflow_client) -> None:
    """The same tracking store with a fresh Optuna storage: refuse, naming the cause."""
    first = replay(replay_dir, stores, make_study(h200, trials=3))
    other_storage = {**stores, "storage": f"sqlite:///{tmp_path / 'other-optuna.db'}"}
    with pytest.raises(ValueError, match="resume with the --storage this study used"):
        replay(replay_dir, other_storage, make_study(h200, trials=3))
    assert len(children(mlflow_client, first)) == 3
    parent = mlflow_client.get_run(first.parent_run_id)
    assert parent.info.status == "FINISHED"  # the refused resume left it as it was

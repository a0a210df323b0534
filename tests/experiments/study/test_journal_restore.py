"""A cut journal study loses no complete trial: what the cut took comes back from MLflow (issue 23).

Counted strictly: against the study *before* the cut (not against what the cut file still
held whole), as BENCHMARKS.md's Robustness section counts it.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient
from study_support import WORKLOAD

from flashtune.experiments.study import measurers
from flashtune.experiments.study.journal import SafeJournalBackend
from flashtune.experiments.study.runner import Study, run_study
from flashtune.experiments.study.storage import CONFIG_ATTR, MEASUREMENT_ATTR

BUDGET, RESUMED_BUDGET = 6, 9


def _study(h200, trials: int) -> Study:
    return Study(name="cut", workload=WORKLOAD, hardware=h200, trials=trials, seed=5)


def _run(replay_dir, folder: Path, trials: int, h200, mlflow_db: str = "mlflow.db",
         avoid: frozenset[tuple] = frozenset()) -> None:
    """Run the study to ``trials``; ``avoid``: configs the strategy may not ask (not part of
    the study's identity: as if another strategy's resume had asked other configs)."""
    study = _study(h200, trials)
    source = measurers.open_replay(study.hardware, [study.workload], replay_dir)
    fits = source.constraint(study.workload)
    run_study(study, source.evaluator(study.workload), tracking_uri=f"sqlite:///{folder / mlflow_db}",
              storage_url=f"journal:{folder / 'study.log'}", fingerprint=source.fingerprint,
              versions=source.versions,
              constraint=lambda config: fits(config) and tuple(sorted(config.to_dict().items())) not in avoid)


def _measured(folder: Path, h200) -> dict[int, tuple]:
    """The study's measured trials by number: (config, COMPLETE?)."""
    storage = optuna.storages.JournalStorage(SafeJournalBackend(str(folder / "study.log")))
    loaded = optuna.load_study(study_name=_study(h200, 1).storage_name, storage=storage)
    return {t.number: (tuple(sorted(t.user_attrs[CONFIG_ATTR].items())), t.state == optuna.trial.TrialState.COMPLETE)
            for t in loaded.get_trials(deepcopy=False) if MEASUREMENT_ATTR in t.user_attrs}


def _children(folder: Path) -> list[tuple[int, tuple]]:
    """The study's finished MLflow children: (trial number, params), one entry per child."""
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              filter_string="tags.role = 'trial' AND tags.study = 'cut'", max_results=1000)
    return [(int(r.data.tags["trial"]), tuple(sorted(r.data.params.items())))
            for r in runs if r.info.status in ("FINISHED", "FAILED")]


def _complete_configs(measured: dict[int, tuple]) -> set[tuple]:
    return {config for config, complete in measured.values() if complete}


def _assert_nothing_lost(folder: Path, before: dict[int, tuple], h200) -> None:
    after = _measured(folder, h200)
    assert _complete_configs(before) <= _complete_configs(after)  # 0 complete trials lost
    configs = [config for config, _ in after.values()]
    assert len(configs) == len(set(configs))  # no config measured twice
    children = _children(folder)
    numbers = Counter(n for n, _ in children)
    assert all(count == 1 for count in numbers.values()), numbers  # no duplicate child numbers
    # Children = trials, by number and params (MLflow params are strings).
    assert dict(children) == {n: tuple((k, str(v)) for k, v in config) for n, (config, _) in after.items()}
    assert sum(complete for _, complete in after.values()) >= RESUMED_BUDGET - 1 or len(after) >= RESUMED_BUDGET


@pytest.fixture(scope="module")
def made(replay_dir, empty_mlflow_db, h200, tmp_path_factory) -> tuple[Path, dict[int, tuple]]:
    """A journal study of 6 trials with its MLflow children; made once, each test cuts a copy."""
    base = tmp_path_factory.mktemp("journal-base")
    shutil.copyfile(empty_mlflow_db, base / "mlflow.db")
    _run(replay_dir, base, BUDGET, h200)
    before = _measured(base, h200)
    assert len(before) == BUDGET
    return base, before


def _cut(base: Path, folder: Path, fraction: float) -> int:
    shutil.copytree(base, folder)
    journal = folder / "study.log"
    data = journal.read_bytes()
    at = int(len(data) * fraction)
    journal.write_bytes(data[:at])
    return at


def _cut_and_resume(base: Path, folder: Path, fraction: float, replay_dir, h200) -> dict[int, tuple]:
    _cut(base, folder, fraction)
    _run(replay_dir, folder, RESUMED_BUDGET, h200)
    return _measured(folder, h200)


@pytest.mark.parametrize("fraction", [0.5, pytest.param(0.15, marks=pytest.mark.slow),
                                      pytest.param(0.85, marks=pytest.mark.slow)])
def test_a_cut_journal_study_loses_no_complete_trial(fraction, made, replay_dir, h200, tmp_path) -> None:
    base, before = made
    folder = tmp_path / "copy"
    after = _cut_and_resume(base, folder, fraction, replay_dir, h200)
    _assert_nothing_lost(folder, before, h200)
    assert {n: after[n] for n in before} == before  # each back at its own number
    # A second worker (or the next run) opening the study re-adds nothing: it sees them.
    _run(replay_dir, folder, RESUMED_BUDGET, h200)
    assert _measured(folder, h200) == after


@pytest.mark.slow
def test_twenty_cuts_of_a_journal_study_lose_no_complete_trial(made, replay_dir, h200, tmp_path) -> None:
    base, before = made
    for i in range(1, 21):
        folder = tmp_path / f"cut-{i}"
        after = _cut_and_resume(base, folder, i / 21, replay_dir, h200)
        _assert_nothing_lost(folder, before, h200)
        assert {n: after[n] for n in before} == before, i


def test_children_an_older_resume_contradicted_are_put_back_at_new_numbers(made, replay_dir, h200, tmp_path,
                                                                          empty_mlflow_db) -> None:
    """As an older version left it: cut, resumed without MLflow's children (its new trials
    took the lost numbers), then the study's MLflow database back: children at those
    numbers hold other configs than the trials."""
    base, before = made
    folder = tmp_path / "copy"
    _cut(base, folder, 0.3)
    kept = _measured(folder, h200)
    lost = frozenset(config for n, (config, _) in before.items() if n not in kept)
    assert lost
    shutil.copyfile(empty_mlflow_db, folder / "other.db")  # an MLflow store without this study's runs
    _run(replay_dir, folder, BUDGET, h200, "other.db", avoid=lost)  # the lost numbers taken by other configs
    reused = _measured(folder, h200)
    assert all(reused[n][0] != before[n][0] for n in before if n not in kept and n in reused)
    _run(replay_dir, folder, RESUMED_BUDGET + 2, h200)  # back on the study's own MLflow store
    _assert_nothing_lost(folder, before, h200)

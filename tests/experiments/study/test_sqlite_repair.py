"""``flashtune repair sqlite:///PATH``: a cut Optuna database rebuilt, the study resumed, nothing lost (issue 23)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient
from study_support import cli_env, flashtune_command, tune_args

from flashtune.experiments.cli.main import main
from flashtune.experiments.study.storage import MEASUREMENT_ATTR, NUMBER_ATTR
from flashtune.experiments.tracking.tags import MEASUREMENT_TAG

STUDY = "NVIDIA H200/cut"


def _trials(storage: str) -> dict[int, tuple]:
    """Measured trials of the study by flashtune number: config and measurement."""
    study = optuna.load_study(study_name=STUDY, storage=storage)
    measured = [t for t in study.get_trials(deepcopy=False) if MEASUREMENT_ATTR in t.user_attrs]
    numbers = [t.user_attrs[NUMBER_ATTR] for t in measured]
    assert len(numbers) == len(set(numbers)), numbers
    return {t.user_attrs[NUMBER_ATTR]: (tuple(sorted(t.params.items())), t.user_attrs[MEASUREMENT_ATTR])
            for t in measured}


def _children(tracking_uri: str) -> Counter:
    client = MlflowClient(tracking_uri=tracking_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              filter_string="tags.role = 'trial' AND tags.study = 'cut'", max_results=1000)
    return Counter(int(r.data.tags["trial"]) for r in runs if r.info.status in ("FINISHED", "FAILED"))


@pytest.fixture(scope="module")
def made(replay_dir, empty_mlflow_db, tmp_path_factory) -> tuple[Path, dict[int, tuple]]:
    """A study of 6 trials, its database's write-ahead log folded in (a cut then cuts data);
    made once: each test cuts a copy."""
    base = tmp_path_factory.mktemp("base")
    shutil.copyfile(empty_mlflow_db, base / "mlflow.db")
    uris = _uris(base)
    assert main(tune_args(uris, replay_dir, "--trials", "6", "--study-name", "cut", "--strategy", "random")) == 0
    # Closed, not only committed: an open connection leaves a -wal and -shm that every copy
    # would carry (the user's side files, kept aside by the repair with the damaged file).
    with contextlib.closing(sqlite3.connect(base / "optuna.db")) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return base, _trials(uris["storage"])


def _uris(folder: Path) -> dict[str, str]:
    return {"tracking_uri": f"sqlite:///{folder / 'mlflow.db'}", "storage": f"sqlite:///{folder / 'optuna.db'}"}


def _cut_repair_resume(base: Path, folder: Path, fraction: float, replay_dir, capsys) -> tuple[str, dict, Counter]:
    """Copy the study, cut its database at ``fraction`` of its length, follow the refusal's
    command, resume to 8 trials; the repair's line, the trials and the MLflow children."""
    shutil.copytree(base, folder)
    capsys.readouterr()
    db = folder / "optuna.db"
    cut = db.read_bytes()[:int(db.stat().st_size * fraction)]
    db.write_bytes(cut)
    uris = _uris(folder)
    args = tune_args(uris, replay_dir, "--trials", "8", "--study-name", "cut", "--strategy", "random")
    assert main(args) == 2
    refusal = capsys.readouterr().err.strip().splitlines()
    assert len(refusal) == 1 and f"Optuna database {db} is damaged" in refusal[0], refusal
    command = f"flashtune repair sqlite:///{db} --tracking-uri sqlite:///{folder / 'mlflow.db'}"
    assert f"`{command}`" in refusal[0], refusal
    assert db.read_bytes() == cut  # refused, left as it was
    assert main(command.split()[1:]) == 0
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1, said
    # The copy carries the -wal and -shm of the in-process study's open connection: kept with it.
    aside = [p for p in folder.iterdir() if p.name.startswith("optuna.db.damaged-")
             and not p.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1 and aside[0].read_bytes() == cut  # kept, never deleted
    assert main(args) == 0, capsys.readouterr().err
    capsys.readouterr()
    return said[0], _trials(uris["storage"]), _children(uris["tracking_uri"])


@pytest.mark.parametrize("fraction", [0.3, 0.9])
def test_a_cut_sqlite_study_is_rebuilt_and_resumes_losing_nothing(fraction, made, replay_dir, tmp_path,
                                                                  capsys) -> None:
    base, before = made
    said, after, children = _cut_repair_resume(base, tmp_path / "copy", fraction, replay_dir, capsys)
    assert "rebuilt: study 'NVIDIA H200/cut': 6 trials" in said and "held by neither" not in said, said
    assert {n: after[n] for n in before} == before  # every trial back, as it was stored, at its number
    assert sorted(after) == list(range(8))  # resumed to the budget
    assert len({config for config, _ in after.values()}) == 8  # no config measured twice
    assert children == Counter(range(8))  # one MLflow child per trial


def test_the_schema_lost_older_children_without_the_measurement_tag_still_rebuild(made, replay_dir, tmp_path,
                                                                                  capsys) -> None:
    shared, before = made
    base = tmp_path / "older"
    shutil.copytree(shared, base)
    client = MlflowClient(tracking_uri=_uris(base)["tracking_uri"])
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.role = 'trial'")
    for run in runs:  # as a study tracked before the tag existed
        client.delete_tag(run.info.run_id, MEASUREMENT_TAG)
    # The first pages only: the schema is gone, SQLite reads nothing; the study's lock file names it.
    said, after, children = _cut_repair_resume(base, tmp_path / "copy", 0.05, replay_dir, capsys)
    assert "6 trials, 0 read back from the file, 6 from the children of MLflow run" in said, said
    assert {n: after[n][0] for n in before} == {n: config for n, (config, _) in before.items()}
    assert all(after[n][1]["median_ms"] == measurement["median_ms"] for n, (_, measurement) in before.items())
    assert sorted(after) == list(range(8)) and children == Counter(range(8))


def test_repair_refuses_a_whole_database_and_a_study_it_cannot_find(made, tmp_path, capsys) -> None:
    base, _ = made
    uris = _uris(base)
    capsys.readouterr()
    assert main(["repair", uris["storage"], "--tracking-uri", uris["tracking_uri"]]) == 2
    assert "is whole (SQLite's quick_check passes): nothing to repair" in capsys.readouterr().err
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["repair", missing, "--tracking-uri", uris["tracking_uri"], "--study", "NVIDIA H200/nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "study 'NVIDIA H200/nope': neither the file nor MLflow" in err[0], err
    assert not (tmp_path / "none.db").exists()
    nowhere = tmp_path / "no-mlflow.db"  # a mistyped --tracking-uri: read as holding nothing, never created
    assert main(["repair", missing, "--tracking-uri", f"sqlite:///{nowhere}", "--study", "NVIDIA H200/nope"]) == 2
    assert "neither the file nor MLflow" in capsys.readouterr().err and not nowhere.exists()


def test_a_lost_database_is_rebuilt_from_mlflow_alone(made, tmp_path, capsys) -> None:
    shared, before = made
    base = tmp_path / "lost"
    shutil.copytree(shared, base)
    (base / "optuna.db").unlink()
    uris = _uris(base)
    capsys.readouterr()
    assert main(["repair", uris["storage"], "--tracking-uri", uris["tracking_uri"], "--study", STUDY]) == 0
    assert "there was no file to keep" in capsys.readouterr().err
    assert {n: c for n, (c, _) in _trials(uris["storage"]).items()} == {n: c for n, (c, _) in before.items()}


def test_sigterm_during_a_repair_leaves_the_damaged_file_or_the_rebuilt_one(made, tmp_path, capsys) -> None:
    base, before = made
    folder = tmp_path / "copy"
    shutil.copytree(base, folder)
    db = folder / "optuna.db"
    cut = db.read_bytes()[:db.stat().st_size // 3]
    db.write_bytes(cut)
    uris = _uris(folder)
    command = ["repair", uris["storage"], "--tracking-uri", uris["tracking_uri"]]
    proc = subprocess.Popen(flashtune_command(*command), cwd=folder, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    fresh = folder / "optuna.db.repairing"
    try:
        deadline = time.monotonic() + 120
        while not fresh.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)  # until the new database is being built: the signal lands mid-repair
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err, err
    aside = sorted(folder.glob("optuna.db.damaged-*"))
    assert not fresh.exists()  # nothing half-built left behind, whenever the signal landed
    if proc.returncode != 0:  # stopped before the swap: the damaged file as it was, nothing kept aside
        assert proc.returncode == 143 and "stopped by SIGTERM" in err.strip().splitlines()[-1], err
        assert db.read_bytes() == cut and aside == []
        assert main(command) == 0
        aside = sorted(folder.glob("optuna.db.damaged-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == cut
    assert _trials(uris["storage"]) == before


@pytest.mark.slow
def test_twenty_cuts_all_rebuilt_and_resumed(made, replay_dir, tmp_path, capsys) -> None:
    base, before = made
    for i in range(1, 21):
        said, after, children = _cut_repair_resume(base, tmp_path / f"copy-{i}", i / 21, replay_dir, capsys)
        assert {n: after[n] for n in before} == before, (i, said)
        assert sorted(after) == list(range(8)) and children == Counter(range(8)), (i, said)

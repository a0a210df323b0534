"""What a user can cause or meet ends in one line and an exit code, and resumes (issue 23)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from disk_support import grow, small_disk
from study_support import cli_env, flashtune_command, run_cli, tune_args

from flashtune.experiments.cli.main import main
from flashtune.experiments.study.storage import CONFIG_ATTR, MEASUREMENT_ATTR, NUMBER_ATTR, close_storage, open_storage


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its SigCgt mask, /proc)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(next(line.split()[1] for line in text.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask >> (signum - 1) & 1)


@pytest.mark.parametrize("signum, code, words", [(signal.SIGINT, 130, "stopped by Ctrl-C"),
                                                 (signal.SIGTERM, 143, "stopped by SIGTERM")])
def test_a_signal_in_the_first_instants_is_one_line(signum, code, words, replay_dir, stores, tmp_path) -> None:
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to see when the handler is in place")
    # SIGINT at its default, as in a terminal: a test run started in the background by a
    # shell (CI's, nohup's) inherits SIGINT ignored, and Python then keeps ignoring Ctrl-C.
    proc = subprocess.Popen(flashtune_command(*tune_args(stores, replay_dir, "--trials", "1000")), cwd=tmp_path,
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # The moment main() is running (its SIGTERM handler in place): still importing.
        deadline = time.monotonic() + 120
        while not _catches(proc.pid, signal.SIGTERM) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    # A budget no machine finishes in the instants before the signal: the signal is always tested.
    assert proc.returncode == code, err
    assert "Traceback" not in err and words in err.strip().splitlines()[-1], err


def test_a_damaged_optuna_database_is_one_line_and_left_alone(replay_dir, stores, tmp_path, capsys) -> None:
    db = tmp_path / "optuna.db"
    study = optuna.create_study(storage=stores["storage"], study_name="other")
    for x in range(30):
        study.add_trial(optuna.trial.create_trial(params={"x": float(x)}, distributions={
            "x": optuna.distributions.FloatDistribution(0, 100)}, value=float(x)))
    # closing(): sqlite3's own context manager commits but leaves the connection open.
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.write_bytes(db.read_bytes()[:db.stat().st_size // 2])
    cut = db.read_bytes()
    assert main(tune_args(stores, replay_dir, "--trials", "2")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"Optuna database {db} is damaged" in err[0]
    assert f"`flashtune repair sqlite:///{db} --tracking-uri {stores['tracking_uri']}`" in err[0]
    assert db.read_bytes() == cut


@pytest.mark.slow
def test_a_full_disk_on_sqlite_is_one_line_and_resumes(replay_dir, tmp_path) -> None:
    with small_disk(tmp_path / "small", "5m") as mnt:
        stores = {"tracking_uri": f"sqlite:///{mnt}/mlflow.db", "storage": f"sqlite:///{mnt}/optuna.db"}
        args = tune_args(stores, replay_dir, "--strategy", "random", "--trials", "400")
        full = run_cli(*args, cwd=tmp_path)
        assert full.returncode == 2, full.stderr
        assert "Traceback" not in full.stderr and "disk is full" in full.stderr.strip().splitlines()[-1], full.stderr
        storage = open_storage(stores["storage"])
        before = len(optuna.load_study(study_name="NVIDIA H200/random-seed0", storage=storage).trials)
        close_storage(storage)  # an open connection would keep the tmpfs busy
        grow(mnt)
        resumed = run_cli(*args, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        assert "resuming study 'random-seed0' at trial" in resumed.stderr and before > 0


def _measured(storage_url: str) -> dict[int, str]:
    """The study's measured trials: their numbers and configs."""
    storage = open_storage(storage_url)
    try:
        trials = optuna.load_study(study_name="NVIDIA H200/random-seed0", storage=storage).trials
    finally:
        close_storage(storage)  # an open connection would keep the tmpfs busy
    return {t.user_attrs[NUMBER_ATTR]: str(t.user_attrs[CONFIG_ATTR]) for t in trials if MEASUREMENT_ATTR in t.user_attrs}


@pytest.mark.slow
@pytest.mark.parametrize("full", ["optuna", "mlflow"])
def test_a_full_disk_is_one_line_naming_the_database(full, replay_dir, stores, tmp_path) -> None:
    """Optuna said "invalid data in the commit", MLflow named no file, and the study's notes on
    what it could not close after the failure added SQLAlchemy's link: 3 to 6 lines."""
    # Room for Optuna's schema and a few trials; for the MLflow database and a few runs.
    with small_disk(tmp_path / "small", {"optuna": "400k", "mlflow": "1200k"}[full]) as small:
        on_disk = dict(stores)
        if full == "optuna":
            on_disk["storage"] = f"sqlite:///{small}/optuna.db"
        else:
            shutil.copyfile(stores["tracking_uri"][len("sqlite:///"):], small / "mlflow.db")
            on_disk["tracking_uri"] = f"sqlite:///{small}/mlflow.db"
        args = tune_args(on_disk, replay_dir, "--strategy", "random", "--trials", "30")
        done = run_cli(*args, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        # The replay's notice ("no GPU found ...", wrapped: its continuation lines are indented) aside.
        lines = [line for line in done.stderr.strip().splitlines()
                 if "no GPU found" not in line and not line.startswith(" ")]
        assert len(lines) == 1, done.stderr
        (line,) = lines
        assert line.startswith(f"flashtune tune: error: {small}/{full}.db: the disk is full (database or disk is full);")
        assert "run the same command again to resume" in line
        before = _measured(on_disk["storage"])
        grow(small)
        resumed = run_cli(*args, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        after = _measured(on_disk["storage"])
        assert before and before.items() <= after.items() and len(after) == 30  # nothing measured was lost

"""One process per SQLite study: others are refused, naming the holder (issue 23)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import optuna
import pytest
from study_support import cli_env, flashtune_command, tune_args

from flashtune.experiments.study.locks import StudyLocked, lock_path, study_lock


def test_three_processes_on_one_sqlite_study_measure_no_config_twice(replay_dir, stores, tmp_path) -> None:
    args = tune_args(stores, replay_dir, "--strategy", "random", "--trials", "24", "--study-name", "three")
    procs = [subprocess.Popen(flashtune_command(*args), cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [proc.communicate(timeout=300) for proc in procs]
    codes = [proc.returncode for proc in procs]
    assert 0 in codes, outputs
    for code, (_, err) in zip(codes, outputs):
        if code != 0:  # refused at the door, in one line naming the holder
            assert code == 2, err
            assert "is being run right now by process" in err and "Traceback" not in err, err
    study = optuna.load_study(study_name="NVIDIA H200/three", storage=stores["storage"])
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    configs = Counter(tuple(sorted(t.params.items())) for t in complete)
    assert len(complete) <= 24 and max(configs.values()) == 1


def test_a_live_holder_is_named_and_a_dead_ones_lock_is_reclaimed(tmp_path) -> None:
    db = tmp_path / "optuna.db"
    code = ("import os, signal, sys\n"
            "from pathlib import Path\n"
            "from flashtune.experiments.study.locks import study_lock\n"
            "with study_lock(Path(sys.argv[1]), 'GPU/s'):\n"
            "    print('held', flush=True)\n"
            "    sys.stdin.readline()\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StudyLocked, match=rf"study 'GPU/s' in {db} is being run right now by process "
                                              rf"{holder.pid} on .*-c"):
            with study_lock(db, "GPU/s"):
                pass
        with study_lock(db, "GPU/other"):  # keyed per study
            pass
    finally:
        holder.stdin.write("go\n")
        holder.stdin.close()
        holder.wait(60)
    assert lock_path(db, "GPU/s").exists()  # left behind by the kill, and reclaimed:
    with study_lock(db, "GPU/s"):
        with study_lock(db, "GPU/s"):  # nested in one process
            pass

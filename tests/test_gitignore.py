"""Files the tools write into the working folder are ignored by git (a user's `git add .` stays clean)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
@pytest.mark.parametrize("name", ["flashtune_optuna.db", "mlflow.db", "mlruns/x", "flashtune_runs/x", "artifacts/ui/x.png"])
def test_files_the_main_job_writes_are_ignored(name):
    # `git check-ignore -q` exits 0 when the path is ignored; the file need not exist.
    assert subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT).returncode == 0, name


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_the_study_lock_beside_the_default_database_is_ignored():
    # The main job holds a flock file per study beside its SQLite database; it stays after
    # the run (the kernel releases the lock, not the file) and must not show in `git status`.
    from flashtune.experiments.study.locks import lock_path

    name = lock_path(Path("flashtune_optuna.db"), "NVIDIA H200/portfolio-seed0").name
    assert subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT).returncode == 0, name

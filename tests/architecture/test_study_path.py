"""One study followed from the CLI to MLflow: the package files on the way (issue 12).

Measured, not read: ``flashtune tune`` runs in this process under a profile hook, and every
call into mlflow made from the package records the package files on the stack at that
moment, outermost first. A chain's *stays* are its runs of one file; a *return* is a stay in
a file the chain had already left (A -> B -> A). Issue 12's targets: at most 8 files on the
way, at most 3 returns.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from import_graph import ROOT

MAX_FILES = 8
MAX_RETURNS = 3
_VENV = str(ROOT / ".venv")


def _package_files_on_stack(frame) -> tuple[str, ...]:
    files = []
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(str(ROOT)) and not name.startswith(_VENV) and "/tests/" not in name:
            files.append(str(Path(name).relative_to(ROOT)))
        frame = frame.f_back
    return tuple(reversed(files))


def _stays(chain: tuple[str, ...]) -> list[str]:
    stays: list[str] = []
    for name in chain:
        if not stays or stays[-1] != name:
            stays.append(name)
    return stays


def test_a_study_reaches_mlflow_through_few_files(tmp_path, monkeypatch) -> None:
    from flashtune.experiments.cli.main import main

    chains: set[tuple[str, ...]] = set()

    def profile(frame, event, arg) -> None:
        if event == "call" and "/mlflow/" in frame.f_code.co_filename:
            caller = frame.f_back
            if caller is not None and "/mlflow/" not in caller.f_code.co_filename:
                chain = _package_files_on_stack(caller)
                if chain:
                    chains.add(chain)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the replay, on any machine
    args = ["tune", "--trials", "3", "--study-name", "path", "--no-progress",
            "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--storage", f"sqlite:///{tmp_path / 'optuna.db'}"]
    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        assert main(args) == 0
    finally:
        sys.setprofile(None)
        threading.setprofile(None)

    assert chains, "no call into mlflow was seen: the hook measured nothing"
    files = {name for chain in chains for name in chain}
    report = "\n".join(" -> ".join(_stays(chain)) for chain in sorted(chains))
    assert len(files) <= MAX_FILES, f"{len(files)} files on the way to MLflow:\n{report}"
    for chain in chains:
        stays = _stays(chain)
        returns = len(stays) - len(set(stays))
        assert returns <= MAX_RETURNS, f"{returns} returns: {' -> '.join(stays)}"
    # The way goes through the CLI, the study runner and the tracker, as the layout says.
    assert {"experiments/cli/tune.py", "experiments/study/runner.py", "experiments/tracking/tracker.py"} <= files

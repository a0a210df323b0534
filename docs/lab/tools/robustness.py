"""Cut each file a study writes at many offsets, fill the disk mid-study: is anything lost?

    python docs/lab/tools/robustness.py --offsets 20 --out robustness.json

CPU only (the CLI replaying the shipped H200 tables). For each file (the journal, the
SQLite Optuna database, the MLflow database, the tuned-config store), a study of
``--trials`` trials is made once; then, for each offset, a copy of it has that file cut
there and the same command (``tune`` with a larger budget; ``export`` for the store) runs
again. Counted per run: the exit code, tracebacks on stderr, whether the study reached its
budget (after doing what the error line said, when it said something), and the complete
trials the resumed study lacks, counted against the whole study before the cut for the
journal and SQLite (strict: the records a cut took count too) and against what the cut
file still held whole for MLflow and the store. A full disk: the
journal and SQLite studies on a small tmpfs, grown after the failure (needs root).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from flashtune.experiments.study.storage import CONFIG_ATTR, MEASUREMENT_ATTR, NUMBER_ATTR, close_storage, open_storage

STUDY = "robust"
GPU_STUDY = f"NVIDIA H200/{STUDY}"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "flashtune.experiments.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def _tune(folder: Path, storage: str, trials: int, tracking_uri: str = "sqlite:///mlflow.db"
          ) -> subprocess.CompletedProcess[str]:
    return _cli("tune", "--strategy", "random", "--trials", str(trials), "--study-name", STUDY, "--storage", storage,
                "--tracking-uri", tracking_uri, "--no-progress", cwd=folder)


def _study_trials(folder: Path, storage: str) -> list[Any]:
    """The GPU study's trials, read with ``folder`` as the working directory (a relative
    SQLite URL names a file there); empty if the study cannot be read."""
    import optuna  # heavy (about 1 s): only when counting trials

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    cwd = os.getcwd()
    os.chdir(folder)
    opened = None
    try:
        opened = open_storage(storage)
        return optuna.load_study(study_name=GPU_STUDY, storage=opened).get_trials(deepcopy=False)
    except Exception:  # unreadable counts as empty
        return []
    finally:
        if opened is not None:
            close_storage(opened)
        os.chdir(cwd)


def _measured(folder: Path, storage: str) -> dict[int, dict[str, str]]:
    """The study's trials that hold a measurement (COMPLETE or FAIL), by the trial number
    MLflow names them by, with their configs as MLflow params read them ({} if unreadable)."""
    return {t.user_attrs.get(NUMBER_ATTR, t.number): {k: str(v) for k, v in t.user_attrs[CONFIG_ATTR].items()}
            for t in _study_trials(folder, storage) if MEASUREMENT_ATTR in t.user_attrs}


def _children(folder: Path, tracking_uri: str) -> list[tuple[int, dict[str, str]]]:
    """The study's finished MLflow children: trial number and params (a number twice: a duplicate)."""
    path = Path(tracking_uri[len("sqlite:///"):])
    path = path if path.is_absolute() else folder / path
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            rows = db.execute(
                "SELECT r.run_uuid, t.value FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = 'trial' "
                "JOIN tags s ON s.run_uuid = r.run_uuid AND s.key = 'study' AND s.value = ? "
                "WHERE r.lifecycle_stage = 'active' AND r.status IN ('FINISHED', 'FAILED')", (STUDY,)).fetchall()
            params = {}
            for run, key, value in db.execute("SELECT run_uuid, key, value FROM params"):
                params.setdefault(run, {})[key] = value
            return [(int(number), params.get(run, {})) for run, number in rows]
    except sqlite3.DatabaseError:
        return []


def children_match(folder: Path, storage: str, tracking_uri: str) -> bool:
    """MLflow mirrors the study: one finished child per measured trial, at its number, with its config."""
    children = _children(folder, tracking_uri)
    return len(children) == len(dict(children)) and dict(children) == _measured(folder, storage)


def _complete(folder: Path, storage: str) -> set[str]:
    """Configs of the study's COMPLETE trials (empty if it cannot be read)."""
    return set(_complete_configs(folder, storage))


def _complete_configs(folder: Path, storage: str) -> list[str]:
    """Configs of the study's COMPLETE trials, one per trial (empty if it cannot be read)."""
    import optuna

    return [json.dumps(t.params, sort_keys=True) for t in _study_trials(folder, storage)
            if t.state == optuna.trial.TrialState.COMPLETE]


def _checkpoint(path: Path) -> None:
    """Fold a database's write-ahead log into the file, so that cutting the file cuts data."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _advice_followed(stderr: str, folder: Path) -> subprocess.CompletedProcess[str] | None:
    """Do what a refusal's line says when it is a command to run: mv aside or flashtune repair
    (its run returned; a move returns an empty one)."""
    moved = re.search(r"\(mv (\S+) (\S+)\)(?! and run with another)", stderr)
    if moved:
        shutil.move(folder / moved.group(1), folder / moved.group(2))
        return subprocess.CompletedProcess(["mv"], 0, "", "")
    repair = re.search(r"`flashtune (repair [^`]+)`", stderr)
    if repair:
        return _cli(*shlex.split(repair.group(1)), cwd=folder)
    return None


def _outcome(folder: Path, storage: str, trials: int, before: set[str], run: Any,
             tracking_uri: str = "sqlite:///mlflow.db") -> dict[str, Any]:
    runs = [run]
    followed = _advice_followed(run.stderr, folder) if run.returncode != 0 else None
    if followed is not None:
        runs += [followed, _tune(folder, storage, trials, tracking_uri)]
    after = _complete(folder, storage)
    return {
        "codes": [r.returncode for r in runs],
        "tracebacks": sum(r.stderr.count("Traceback") for r in runs),
        "first_error": next((line for r in runs for line in r.stderr.splitlines() if "error:" in line), ""),
        "advice_said": (followed.stderr.strip().splitlines() or [""])[-1] if followed is not None else "",
        # The budget, or every config the recorded space holds (the strategy says it ran out).
        "resumed": runs[-1].returncode == 0 and (len(after) >= trials or "ran out of configs" in runs[-1].stdout),
        "lost": len(before - after),
        "children_match": children_match(folder, storage, tracking_uri),
    }


def cut_runs(kind: str, offsets: int, trials: int, root: Path) -> list[dict[str, Any]]:
    """Make the study once, then cut its ``kind`` file at ``offsets`` offsets and resume."""
    base = root / f"{kind}-base"
    base.mkdir()
    storage = "journal:study.log" if kind == "journal" else "sqlite:///optuna.db"
    made = _tune(base, storage, trials)
    if made.returncode != 0:
        raise RuntimeError(f"{kind}: the first study failed: {made.stderr[-500:]}")
    for db in ("mlflow.db", "optuna.db"):
        if (base / db).exists():
            _checkpoint(base / db)
    run_id = re.search(r"export mlflow:(\w+)", made.stdout).group(1)
    if kind == "store":
        _cli("export", f"mlflow:{run_id}", "--to", "store.json", "--tracking-uri", "sqlite:///mlflow.db", cwd=base)
    target = {"journal": "study.log", "sqlite": "optuna.db", "mlflow": "mlflow.db", "store": "store.json"}[kind]
    size = (base / target).stat().st_size
    results = []
    for i in range(1, offsets + 1):
        at = size * i // (offsets + 1)
        folder = root / f"{kind}-{i}"
        shutil.copytree(base, folder)
        data = (folder / target).read_bytes()[:at]
        (folder / target).write_bytes(data)
        if kind in ("journal", "sqlite"):
            # Strict: against the whole study before the cut (what the cut took counts too).
            before = _complete(base, storage)
        else:
            before = _complete(folder, storage)
        if kind == "store":
            run = _cli("export", f"mlflow:{run_id}", "--to", "store.json", "--tracking-uri", "sqlite:///mlflow.db",
                       cwd=folder)
            entries = run.returncode == 0 and "the file holds 1" in run.stdout
            result = {"codes": [run.returncode], "tracebacks": run.stderr.count("Traceback"),
                      "first_error": next((ln for ln in run.stderr.splitlines() if "error" in ln), ""),
                      "resumed": entries, "lost": 0 if entries else 1}
        else:
            result = _outcome(folder, storage, trials + 4, before, _tune(folder, storage, trials + 4))
        results.append({"kind": kind, "offset": at, "size": size, **result})
        print(json.dumps(results[-1]), flush=True)
    return results


def three_process_runs(runs: int, trials: int, root: Path) -> list[dict[str, Any]]:
    """Three ``tune`` processes started at once on one new SQLite study, ``runs`` times."""
    results = []
    for i in range(runs):
        folder = root / f"three-{i}"
        folder.mkdir()
        command = [sys.executable, "-m", "flashtune.experiments.cli.main", "tune", "--strategy", "random", "--trials",
                   str(trials), "--study-name", STUDY, "--storage", "sqlite:///optuna.db", "--tracking-uri",
                   "sqlite:///mlflow.db", "--no-progress"]
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
        procs = [subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(3)]
        errs = [proc.communicate(timeout=600)[1] for proc in procs]
        configs = _complete_configs(folder, "sqlite:///optuna.db")
        results.append({
            "kind": "three-processes-sqlite", "codes": [proc.returncode for proc in procs],
            "tracebacks": sum(err.count("Traceback") for err in errs),
            "refused": sum("is being run right now by" in err for err in errs),
            "complete": len(configs), "duplicates": len(configs) - len(set(configs)),
            "resumed": len(configs) == trials, "lost": 0,
            "children_match": children_match(folder, "sqlite:///optuna.db", "sqlite:///mlflow.db"),
        })
        print(json.dumps(results[-1]), flush=True)
    return results


def disk_full_runs(trials: int, root: Path) -> list[dict[str, Any]]:
    """The study's storage on a small tmpfs (MLflow beside it, on the disk) until it fills
    mid-study; the tmpfs grown, then the same command resumes."""
    results = []
    for kind, storage, size in (("journal", "journal:study.log", "96k"), ("sqlite", "sqlite:///optuna.db", "600k")):
        mnt = root / f"full-{kind}"
        mnt.mkdir()
        tracking_uri = f"sqlite:///{root}/full-{kind}-mlflow.db"
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=False,
                                 capture_output=True, text=True)
        if mounted.returncode:
            results.append({"kind": f"disk-full-{kind}", "skipped": mounted.stderr.strip()})
            continue
        try:
            first = _tune(mnt, storage, trials, tracking_uri)
            subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)
            before = _complete(mnt, storage)
            result = _outcome(mnt, storage, trials, before, _tune(mnt, storage, trials, tracking_uri), tracking_uri)
            result["trials_before_full"] = len(before)
            results.append({"kind": f"disk-full-{kind}", "first_code": first.returncode,
                            "first_tracebacks": first.stderr.count("Traceback"),
                            "full_error": (first.stderr.strip().splitlines() or [""])[-1],
                            **result})
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
        print(json.dumps(results[-1]), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--offsets", type=int, default=20, help="cuts per file (default: 20)")
    parser.add_argument("--trials", type=int, default=10, help="trials of the study before a cut (default: 10)")
    parser.add_argument("--kinds", default="journal,sqlite,mlflow,store",
                        help="files to cut, comma-separated ('' for the full disk only)")
    parser.add_argument("--three", type=int, default=4,
                        help="runs of three processes on one SQLite study (default: 4; 0: none)")
    parser.add_argument("--out", type=Path, default=None, help="write every run's outcome here (JSON)")
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="flashtune-robustness-") as tmp:
        root = Path(tmp)
        for kind in filter(None, args.kinds.split(",")):
            results += cut_runs(kind, args.offsets, args.trials, root)
        if args.three:
            results += three_process_runs(args.three, 30, root)
        results += disk_full_runs(120, root)
    print(f"{'file':18s} {'runs':>4s} {'not resumed':>11s} {'trials lost':>11s} {'tracebacks':>10s} "
          f"{'MLflow != trials':>16s}")
    for kind in dict.fromkeys(r["kind"] for r in results):
        rows = [r for r in results if r["kind"] == kind and "skipped" not in r]
        if not rows:
            print(f"{kind:18s} skipped")
            continue
        print(f"{kind:18s} {len(rows):4d} {sum(not r['resumed'] for r in rows):11d} {sum(r['lost'] for r in rows):11d} "
              f"{sum(r['tracebacks'] + r.get('first_tracebacks', 0) for r in rows):10d} "
              f"{sum(not r.get('children_match', True) for r in rows):16d}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

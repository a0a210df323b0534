"""Journal studies survive a cut, a damaged line and a killed lock holder (issue 23)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from study_support import WORKLOAD

from flashtune.experiments.study import measurers
from flashtune.experiments.study.journal import DamagedJournal, SafeJournalBackend, repair
from flashtune.experiments.study.runner import Study, run_study


def _study(h200, trials: int) -> Study:
    return Study(name="cut", workload=WORKLOAD, hardware=h200, trials=trials, seed=3)


def _run(replay_dir, tracking_uri: str, storage: str, study: Study):
    source = measurers.open_replay(study.hardware, [study.workload], replay_dir)
    return run_study(study, source.evaluator(study.workload), tracking_uri=tracking_uri, storage_url=storage,
                     fingerprint=source.fingerprint, versions=source.versions,
                     constraint=source.constraint(study.workload))


def _complete_trials(path: Path, study: Study) -> set[int]:
    import optuna

    storage = optuna.storages.JournalStorage(SafeJournalBackend(str(path)))
    loaded = optuna.load_study(study_name=study.storage_name, storage=storage)
    return {t.number for t in loaded.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE}


@pytest.mark.parametrize("cut", [-10, 0.5, pytest.param(-1, marks=pytest.mark.slow),
                                 pytest.param(-200, marks=pytest.mark.slow)])
def test_a_cut_journal_keeps_every_whole_record_and_resumes(cut, replay_dir, stores, h200, tmp_path) -> None:
    journal = tmp_path / "study.log"
    storage = f"journal:{journal}"
    _run(replay_dir, stores["tracking_uri"], storage, _study(h200, 5))
    size = journal.stat().st_size
    at = int(size * cut) if isinstance(cut, float) else size + cut
    data = journal.read_bytes()
    journal.write_bytes(data[:at])
    whole = data[:data.rfind(b"\n", 0, at) + 1]
    kept_before = _complete_trials_of_prefix(tmp_path, whole, _study(h200, 5))
    result = _run(replay_dir, stores["tracking_uri"], storage, _study(h200, 8))
    assert len(result.trials) == 8
    assert journal.read_bytes().startswith(whole)  # nothing before the cut rewritten
    sides = list(tmp_path.glob("study.log.partial-*"))
    if at > len(whole):
        assert [p.name for p in sides] == [f"study.log.partial-{len(whole)}"]
        assert sides[0].read_bytes() == data[len(whole):at]
    assert kept_before <= _complete_trials(journal, _study(h200, 8))
    # And it reads again, whole, on the next run.
    assert len(_run(replay_dir, stores["tracking_uri"], storage, _study(h200, 8)).trials) == 8


def _complete_trials_of_prefix(tmp_path: Path, data: bytes, study: Study) -> set[int]:
    copy = tmp_path / "prefix.log"
    copy.write_bytes(data)
    try:
        return _complete_trials(copy, study)
    except KeyError:  # cut before the study was created
        return set()


def test_a_damaged_line_is_named_and_repaired(replay_dir, stores, h200, tmp_path) -> None:
    """What older versions left: a partial record with the next run's record glued after it."""
    journal = tmp_path / "study.log"
    storage = f"journal:{journal}"
    _run(replay_dir, stores["tracking_uri"], storage, _study(h200, 4))
    lines = journal.read_bytes().splitlines(keepends=True)
    middle = len(lines) // 2
    glued = lines[middle][:-30] + lines[middle + 1]
    journal.write_bytes(b"".join(lines[:middle] + [glued] + lines[middle + 2:]))
    with pytest.raises(DamagedJournal, match=rf"{journal}: line {middle + 1} .*flashtune repair journal:{journal}"):
        _run(replay_dir, stores["tracking_uri"], storage, _study(h200, 6))
    fixed = repair(str(journal))
    assert fixed.damaged_lines == (middle + 1,) and fixed.recovered == 1
    assert fixed.side_file is not None and fixed.side_file.read_bytes() == lines[middle][:-30] + b"\n"
    assert len(_run(replay_dir, stores["tracking_uri"], storage, _study(h200, 6)).trials) == 6


def test_a_killed_lock_holder_does_not_stall_the_others(tmp_path) -> None:
    journal = tmp_path / "study.log"
    journal.touch()
    code = ("import os, signal, sys\n"
            "from flashtune.experiments.study.journal import journal_lock\n"
            "with journal_lock(sys.argv[1]):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", code, str(journal)], timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL
    # Optuna's own lock file would be left behind here, and waited on for 30 s.
    backend = SafeJournalBackend(str(journal))
    finished = threading.Event()
    threading.Thread(target=lambda: (backend.append_logs([{"op_code": 0}]), finished.set()), daemon=True).start()
    assert finished.wait(20)
    assert list(backend.read_logs(0)) == [{"op_code": 0}]


def test_a_live_lock_holder_is_never_broken(tmp_path) -> None:
    journal = tmp_path / "study.log"
    journal.touch()
    release = tmp_path / "release"
    code = ("import os, sys, time\n"
            "from flashtune.experiments.study.journal import journal_lock\n"
            "with journal_lock(sys.argv[1]):\n"
            "    print('held', flush=True)\n"
            "    while not os.path.exists(sys.argv[2]):\n"
            "        time.sleep(0.05)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(journal), str(release)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        backend = SafeJournalBackend.__new__(SafeJournalBackend)  # its __init__ would wait for the lock too
        backend._path, backend._offsets = str(journal), {0: 0}
        finished = threading.Event()
        threading.Thread(target=lambda: (backend.append_logs([{"op_code": 0}]), finished.set()), daemon=True).start()
        assert not finished.wait(1.0)  # blocked while the holder lives, however long it takes
        assert journal.read_bytes() == b""
        release.touch()
        assert holder.wait(60) == 0
        assert finished.wait(20)
    finally:
        release.touch()
        holder.wait(60)
    assert journal.read_bytes() == b'{"op_code":0}\n'


def test_a_failed_write_is_taken_back(tmp_path) -> None:
    """A full disk in the middle of an append leaves the journal ending with a whole record."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=False).returncode:
        pytest.skip("mount -t tmpfs is not allowed here")
    try:
        backend = SafeJournalBackend(str(mnt / "study.log"))
        record = {"op_code": 4, "pad": "x" * 1000}
        written = 0
        with pytest.raises(OSError, match=r"No space left on device \(writing journal .*study.log"):
            for _ in range(200):
                backend.append_logs([record, record])
                written += 2
        data = (mnt / "study.log").read_bytes()
        line = len(json.dumps(record, separators=(",", ":"))) + 1
        assert data.count(b"\n") == written and len(data) == written * line  # nothing of the failed write
        assert len(list(backend.read_logs(0))) == written
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)

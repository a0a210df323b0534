"""One process per SQLite study, enforced: a lock held while the process runs the study.

SQLite storage takes one writer per study (docs/reference.md); three ``tune`` processes
started by hand on one study each saw no RUNNING trial of another, and together measured
198 trials for a budget of 100. The lock is ``flock`` on a file beside the
database, one per study (``<db>.<study key>.lock``): the kernel releases it when its
holder exits or is killed, so a lock of a dead process is reclaimed by the next start,
and a live holder's is never broken. The file records the holder (pid, host, command) for
the refusal; what it says is only read, never trusted for the lock itself.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class StudyLocked(ValueError):
    """Another live process runs this study; the message names it."""


#: Locks this process holds, by file, with how many callers hold each (nested runs).
_held: dict[str, list[int]] = {}


def lock_path(db: Path, study_name: str) -> Path:
    """The lock file of ``study_name`` in the SQLite database ``db``."""
    key = hashlib.sha256(study_name.encode()).hexdigest()[:12]
    return db.with_name(f"{db.name}.{key}.lock")


@contextmanager
def study_lock(db: Path, study_name: str) -> Iterator[Path]:
    """Hold the study's lock while the block runs (the whole run of the study).

    Raises:
        StudyLocked: a live process holds it; the message names it and what to do.
    """
    path = _acquire(Path(db), study_name)
    try:
        yield path
    finally:
        entry = _held[str(path)]
        entry[1] -= 1
        if entry[1] == 0:
            del _held[str(path)]
            os.close(entry[0])  # releases the flock


def _acquire(db: Path, study_name: str) -> Path:
    path = lock_path(db, study_name)
    if str(path) in _held:
        _held[str(path)][1] += 1
        return path
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        raise StudyLocked(
            f"study {study_name!r} in {db} is being run right now by {holder}; wait for it or stop it "
            "(SQLite storage takes one process per study: for several workers use --storage journal:PATH)"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "study": study_name,
                         "command": " ".join(sys.argv)[:500]}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, record + b"\n", 0)
    _held[str(path)] = [fd, 1]
    return path


def _read_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"process {holder['pid']} on {holder['host']} ({holder['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (starting now)"


def studies_locked_in(db: Path) -> list[str]:
    """The studies whose lock files lie beside the SQLite database ``db``: every study that
    ran in it (a lock file outlives its holder), as its holder recorded the name. A record
    whose name does not hash to its file's key (edited, or torn by a kill) is not trusted."""
    names = []
    for path in sorted(Path(db).parent.glob(f"{Path(db).name}.*.lock")):
        try:
            name = json.loads(path.read_bytes() or b"{}").get("study")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(name, str) and lock_path(Path(db), name) == path:
            names.append(name)
    return names

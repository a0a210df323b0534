"""A journal file that survives a cut, and a lock that a killed worker never leaves behind.

Optuna's ``JournalFileBackend`` appends one JSON record per line. Two things lost studies
with it:

* A cut (a full disk, ``kill -9`` in the middle of a write, a truncated copy) leaves a
  partial last line; the next append glued its record to it, and from then on every read
  failed on that line (``Expecting ',' delimiter``, no file named). Here, every append
  first checks, under the lock, that the file ends with a newline; a partial last record is
  kept aside (``PATH.partial-<offset>``: its bytes and the byte offset where it started)
  and cut off before anything is written. A write that fails (``ENOSPC``) is cut back to
  where it began. A damaged record before the last one is named (file, line) with the
  command that repairs it: :func:`repair`.
* Optuna's symlink lock is a file that a killed holder leaves behind: the others waited
  its 30 s grace period, then broke it by force, as they would a live but slow holder's.
  Here the lock is ``flock`` on ``PATH.flock``: the kernel releases it the moment its
  holder dies, and never while it lives. Every flashtune process on the journal uses it
  (journal studies are for one host, see docs/reference.md).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optuna.storages.journal import BaseJournalBackend

_log = logging.getLogger(__name__)

#: Suffix of the lock file beside the journal.
LOCK_SUFFIX = ".flock"
#: Side file of a cut-off partial record: ``PATH.partial-<byte offset>``.
PARTIAL_SUFFIX = ".partial-"
#: Side file of the damaged lines :func:`repair` took out: ``PATH.damaged-<byte offset>``.
DAMAGED_SUFFIX = ".damaged-"
#: Where a record starts (Optuna writes every record with ``op_code`` first, no spaces).
_RECORD_START = b'{"op_code":'


class DamagedJournal(ValueError):
    """A complete line of the journal is not a record; the message names it and the repair."""


def repair_command(path: str | os.PathLike[str]) -> str:
    """The command a user runs to repair the journal at ``path``."""
    return f"flashtune repair journal:{path}"


#: Journal locks this process holds: lock file -> [fd, depth]. Re-entrant: the restore from
#: MLflow (``journal_restore``) appends while it holds the lock, and a second ``flock`` on
#: another descriptor of the same file would wait for this process forever.
_held: dict[str, list[int]] = {}
#: One thread of this process in a journal's lock at a time (the kernel's lock is the process's).
_threads = threading.RLock()


@contextmanager
def journal_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the journal's lock (``flock`` on ``PATH.flock``); released by the kernel if we die.

    Re-entrant within the process (nested holds share one descriptor)."""
    key = os.path.abspath(f"{path}{LOCK_SUFFIX}")
    with _threads:
        entry = _held.get(key)
        if entry is None:
            fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            entry = _held[key] = [fd, 0]
        entry[1] += 1
        try:
            yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del _held[key]
                os.close(entry[0])  # closing releases the flock


def cut_partial_tail(path: str | os.PathLike[str]) -> int | None:
    """Keep aside and cut off a last record without its newline; the caller holds the lock.

    Returns:
        The byte offset where the partial record started (the file's new size), or None.
    """
    with open(path, "rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return None
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return None
        # Walk back to the last newline (records are a few KiB: read in blocks).
        start, block = size, 1 << 16
        while start > 0:
            begin = max(0, start - block)
            fh.seek(begin)
            chunk = fh.read(start - begin)
            at = chunk.rfind(b"\n")
            if at >= 0:
                start = begin + at + 1
                break
            start = begin
        fh.seek(start)
        tail = fh.read()
        side = Path(f"{path}{PARTIAL_SUFFIX}{start}")
        side.write_bytes(tail)
        fh.truncate(start)
        fh.flush()
        os.fsync(fh.fileno())
    _log.warning("journal %s ended in a partial record (%d bytes from byte %d, cut by a full disk or a kill): "
                 "kept aside in %s and cut off; every complete record is kept", path, len(tail), start, side.name)
    return start


class SafeJournalBackend(BaseJournalBackend):
    """Optuna's journal file format, with the cut checks and the ``flock`` lock above.

    Args:
        path: the journal file (created if missing).
    """

    def __init__(self, path: str) -> None:
        self._path = path
        if not os.path.exists(path):
            open(path, "ab").close()
        with journal_lock(path):
            cut_partial_tail(path)
        self._offsets: dict[int, int] = {0: 0}  # record number -> byte offset where it starts

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        # Optuna's reader, with errors that name the line: a partial last line is another
        # process's append in flight (or a cut the next append sets aside): not read yet.
        known = max(n for n in self._offsets if n <= log_number_from)
        with open(self._path, "rb") as fh:
            fh.seek(self._offsets[known])
            for number, line in enumerate(fh, start=known):
                if not line.endswith(b"\n"):
                    return
                self._offsets.setdefault(number + 1, self._offsets[number] + len(line))
                if number < log_number_from:
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if not isinstance(record, dict):
                    raise DamagedJournal(
                        f"journal {self._path}: line {number + 1} (byte {self._offsets[number]}) is not a whole "
                        f"record; repair it with `{repair_command(self._path)}` (keeps every whole record, sets the "
                        "damaged bytes aside)")
                yield record

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        data = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode("utf-8")
        with journal_lock(self._path):
            cut_partial_tail(self._path)
            # Unbuffered: a buffered file flushes again when closed, after the take-back below.
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND)
            try:
                start = os.lseek(fd, 0, os.SEEK_END)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                except OSError as exc:
                    # A full disk mid-write: take back the part written, so the journal ends
                    # with the last whole record (a truncate needs no free space).
                    os.ftruncate(fd, start)
                    raise OSError(exc.errno, f"{exc.strerror} (writing journal {self._path}; what it holds is "
                                  "whole: free space and run again)") from None
                except BaseException:  # a signal mid-write: the same take-back
                    os.ftruncate(fd, start)
                    raise
            finally:
                os.close(fd)


@dataclass(frozen=True)
class Repair:
    """What :func:`repair` did to a journal."""

    records: int  # whole records kept
    recovered: int  # records recovered from the end of a damaged line (a record glued to a cut)
    damaged_lines: tuple[int, ...]  # 1-based line numbers set aside
    side_file: Path | None

    def summary(self, path: str) -> str:
        if not self.damaged_lines and self.side_file is None:
            return f"journal {path}: {self.records} records, nothing to repair"
        lines = ", ".join(str(n) for n in self.damaged_lines) or "none"
        return (f"journal {path}: kept {self.records} whole records ({self.recovered} recovered from damaged lines); "
                f"damaged lines {lines} set aside in {self.side_file.name if self.side_file else '-'}")


def repair(path: str) -> Repair:
    """Rewrite the journal at ``path`` with every whole record, setting damaged bytes aside.

    A damaged line is most often a partial record (a cut) with a whole record glued after
    it by an older version's next append: that record is recovered. The original file is
    kept as ``PATH.damaged-<offset of the first damaged line>`` (with the damaged lines'
    bytes) and the new journal replaces it atomically. Run it with the study stopped.

    Raises:
        ValueError: ``path`` is not a file.
    """
    if not os.path.isfile(path):
        raise ValueError(f"journal {path}: no such file")
    with journal_lock(path):
        cut = cut_partial_tail(path)
        kept: list[bytes] = []
        damaged: list[int] = []
        damaged_bytes: list[bytes] = []
        recovered = 0
        first_offset: int | None = None
        offset = 0
        with open(path, "rb") as fh:
            for number, line in enumerate(fh, start=1):
                if _is_record(line):
                    kept.append(line)
                else:
                    damaged.append(number)
                    first_offset = offset if first_offset is None else first_offset
                    at = line.rfind(_RECORD_START)
                    while at > 0 and not _is_record(line[at:]):
                        at = line.rfind(_RECORD_START, 0, at)
                    if at > 0:
                        kept.append(line[at:])
                        recovered += 1
                        damaged_bytes.append(line[:at] + b"\n")
                    else:
                        damaged_bytes.append(line)
                offset += len(line)
        side: Path | None = Path(f"{path}{PARTIAL_SUFFIX}{cut}") if cut is not None else None
        if damaged:
            side = Path(f"{path}{DAMAGED_SUFFIX}{first_offset}")
            side.write_bytes(b"".join(damaged_bytes))
            fresh = Path(f"{path}.repairing")
            with open(fresh, "wb") as out:
                out.write(b"".join(kept))
                out.flush()
                os.fsync(out.fileno())
            os.replace(fresh, path)
    return Repair(len(kept), recovered, tuple(damaged), side)


def _is_record(line: bytes) -> bool:
    try:
        return line.endswith(b"\n") and isinstance(json.loads(line), dict)
    except ValueError:
        return False

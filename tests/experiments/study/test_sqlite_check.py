"""``check_sqlite_file`` only reads the user's file: it never folds a ``-wal`` into it (issue 23)."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from flashtune.experiments.study.storage import DamagedDatabase, check_sqlite_file


def _with_wal(tmp_path: Path, name: str = "copy.db") -> Path:
    """A database whose last 200 rows are only in its ``-wal`` (copied while a writer held it)."""
    made = tmp_path / "made"
    made.mkdir()
    with contextlib.closing(sqlite3.connect(made / "a.db")) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE t (x)")
        db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(200)])
        db.commit()
        copy = tmp_path / name
        shutil.copyfile(made / "a.db", copy)
        shutil.copyfile(made / "a.db-wal", f"{copy}-wal")
    return copy


def test_the_check_reads_the_wal_and_writes_nothing(tmp_path) -> None:
    path = _with_wal(tmp_path)
    file_bytes, wal_bytes = path.read_bytes(), Path(f"{path}-wal").read_bytes()
    check_sqlite_file(f"sqlite:///{path}")  # whole: no error
    assert path.read_bytes() == file_bytes  # a read-write open folded the log in here
    assert Path(f"{path}-wal").read_bytes() == wal_bytes


def test_a_damaged_file_is_still_refused_and_left_as_it_is(tmp_path) -> None:
    path = _with_wal(tmp_path, "a copy #1.db")  # a URI's fragment mark in the name: still this file
    with contextlib.closing(sqlite3.connect(tmp_path / "big.db")) as db:
        db.execute("CREATE TABLE t (x)")
        db.executemany("INSERT INTO t VALUES (?)", [("x" * 500,) for _ in range(200)])
        db.commit()
    cut = (tmp_path / "big.db").read_bytes()
    cut = cut[:len(cut) // 2]
    path.write_bytes(cut)
    Path(f"{path}-wal").unlink()
    with pytest.raises(DamagedDatabase, match="is damaged"):
        check_sqlite_file(f"sqlite:///{path}")
    assert path.read_bytes() == cut
    # Nothing made beside it (an empty -wal and -shm would be kept aside as the damaged file's).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a copy #1.db", "big.db", "made"]

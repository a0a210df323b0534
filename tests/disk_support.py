"""A full disk for real: a small tmpfs mounted for a test (imported by the test modules)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's syntax: ``64k``, ``5m``) at ``folder``, unmounted after;
    the test is skipped where mounting is not allowed (it needs root: CI runs as root)."""
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=False,
                      capture_output=True).returncode:
        pytest.skip("mount -t tmpfs is not allowed here (needs root; CI runs as root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def grow(folder: Path, size: str = "64m") -> None:
    """Make room on a mounted ``small_disk`` (the user frees space), keeping its files."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], check=True)

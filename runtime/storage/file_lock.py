"""An exclusive ``flock`` on a lock file, held for a block: what processes of one host
serialize on (the config store's writers, a shared study's MLflow parent).

The kernel drops the lock when its holder exits or is killed, so a crash never wedges
the others, and a live holder's lock is never broken.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created if missing), waiting for it."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        # Unlocked before the close: a child forked meanwhile shares the descriptor's lock,
        # which a close alone would leave held.
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

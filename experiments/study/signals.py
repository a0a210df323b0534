"""SIGTERM and SIGINT held while a study writes something that must be whole.

A study ends KILLED on SIGTERM (its handler raises ``StudyInterrupted`` wherever the main
thread is) or Ctrl-C. Raised in the middle of a write, that exception leaves half a
record: a trial whose measurement is stored but whose state is still RUNNING
(3 of 15 signals landing as a measurement was stored), or an MLflow session unusable for
closing the parent run. Such writes run inside :func:`signals_deferred`, and the signal
is taken right after them.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class StudyInterrupted(BaseException):
    """Raised in the study's process on SIGTERM: the study ends KILLED, not FAILED.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way
    swallows it.
    """


def raise_interrupted(signum: int, frame: FrameType | None) -> None:
    """A SIGTERM handler: :class:`StudyInterrupted` wherever the main thread is."""
    raise StudyInterrupted(f"signal {signum}")


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGTERM and SIGINT inside the block; re-deliver the first one after it.

    The handlers in force before the block handle the re-delivered signal (the study's
    ``StudyInterrupted``, Python's KeyboardInterrupt). Nested blocks hold it until the
    outermost one ends. Outside the main thread (where Python runs handlers) a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in saved:
        signal.signal(sig, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        for signum in pending[:1]:
            signal.raise_signal(signum)

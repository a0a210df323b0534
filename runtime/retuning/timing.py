"""Timing sources for the online monitor: how long did one launch take.

Injectable so that the re-tuning and rollback logic runs on a CPU with invented
latencies (tests), and on a GPU with CUDA events that never synchronise the stream: a
sample is read back on a later call, once its end event has completed.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable

from flashtune.kernels.config import Config

#: Returns the sample's milliseconds once available, None while the GPU is still busy.
Reader = Callable[[], "float | None"]


class TimingSource(abc.ABC):
    """Times one launch: ``start`` before it, ``stop`` after it, read the result later."""

    @abc.abstractmethod
    def start(self, config: Config) -> object:
        """Mark the start of a launch of ``config``; returns a token for :meth:`stop`."""

    @abc.abstractmethod
    def stop(self, token: object) -> Reader:
        """Mark the end of the launch started with ``token``."""


class HostTiming(TimingSource):
    """Wall time on the host: right for synchronous devices (CPU, the interpreter)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock

    def start(self, config: Config) -> object:
        return self._clock()

    def stop(self, token: object) -> Reader:
        elapsed_ms = (self._clock() - float(token)) * 1e3  # type: ignore[arg-type]
        return lambda: elapsed_ms


class CudaEventTiming(TimingSource):
    """CUDA events on the current stream; read without synchronising."""

    def start(self, config: Config) -> object:
        import torch

        begin = torch.cuda.Event(enable_timing=True)
        begin.record()
        return begin

    def stop(self, token: object) -> Reader:
        import torch

        end = torch.cuda.Event(enable_timing=True)
        end.record()
        begin = token

        def read() -> float | None:
            return float(begin.elapsed_time(end)) if end.query() else None  # type: ignore[attr-defined]

        return read


class InjectedTiming(TimingSource):
    """Latency invented per config: for tests and simulations of a drifting GPU.

    Args:
        latency_ms: config -> milliseconds; may change over time (a callable of state).
    """

    def __init__(self, latency_ms: Callable[[Config], float]) -> None:
        self._latency_ms = latency_ms

    def start(self, config: Config) -> object:
        return config

    def stop(self, token: object) -> Reader:
        value = float(self._latency_ms(token))  # type: ignore[arg-type]
        return lambda: value

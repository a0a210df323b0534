"""The online re-tune's benchmark: the objectives' isolated worker process, as a callable.

A candidate is compiled, checked against the reference and timed in a separate process
(``flashtune.objectives.worker.BenchmarkWorker``): an illegal address poisons the CUDA
context of the process it happens in, and a ptxas hang must be killable (docs/reference.md),
so neither may happen in the process that serves the model. A timeout or a crash comes
back as a status and costs one candidate.
"""

from __future__ import annotations

import itertools
import threading

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement, Workload
from flashtune.objectives.worker import BenchmarkWorker


class WorkerBenchmark:
    """``(config, workload) -> Measurement`` through one long-lived worker process.

    Args:
        device: CUDA device index the worker times on (the served model's GPU); None
            leaves ``CUDA_VISIBLE_DEVICES`` as it is.
        timeout_s: per-candidate budget, compile included.
        env: extra environment for the worker (``TRITON_INTERPRET=1`` on a CPU).
    """

    def __init__(self, device: int | None = None, *, timeout_s: float = 60.0, env: dict[str, str] | None = None) -> None:
        self.worker = BenchmarkWorker(device=device, timeout_s=timeout_s, env=env)
        self._seeds = itertools.count(1)  # fresh inputs for every candidate
        self._lock = threading.Lock()

    def __call__(self, config: Config, workload: Workload) -> Measurement:
        with self._lock:
            return self.worker.evaluate(config, workload, seed=next(self._seeds))

    def close(self) -> None:
        with self._lock:
            self.worker.close()

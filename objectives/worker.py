"""BenchmarkWorker: one process per GPU that measures configs, restarted when it dies.

The parent never touches CUDA. A config that hangs past the timeout, or kills the CUDA
context (an illegal address poisons it for the whole process), costs one trial: the
worker is killed or found dead, restarted, and the next config is measured normally.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from typing import Any

from flashtune.kernels.config import Config
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.types import Measurement, Status, Workload

#: Start-up budget: importing torch and triton and reading the device.
_START_TIMEOUT_S = 180.0


_EOF = "\x00eof"  # sentinel: the worker closed its end of the pipe (it died)


class WorkerError(RuntimeError):
    """The worker could not be started at all (not a per-config failure)."""


class BenchmarkWorker:
    """A subprocess that measures one config at a time.

    Args:
        device: CUDA device index for ``CUDA_VISIBLE_DEVICES``; None leaves it unset.
        timeout_s: per-config budget (compile + check + time); past it the worker is killed.
        launcher: ``module:function`` that launches the kernel (tests inject faulty ones).
        env: extra environment variables for the worker (e.g. ``TRITON_INTERPRET=1``).
    """

    def __init__(
        self,
        *,
        device: int | None = None,
        timeout_s: float = 120.0,
        launcher: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.device = device
        self.timeout_s = timeout_s
        self.launcher = launcher
        self._env = dict(env or {})
        self._proc: subprocess.Popen[str] | None = None
        self.hardware: HardwareSpec | None = None
        self.restarts = 0

    # -- process management -------------------------------------------------------------

    def start(self) -> None:
        env = {**os.environ, **self._env}
        if self.device is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.device)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "flashtune.objectives._worker_main"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, text=True, env=env,
        )
        hello = self._read_line(_START_TIMEOUT_S)
        if hello is None or hello is _EOF:
            self._kill()
            raise WorkerError("benchmark worker did not start (see its stderr above)")
        spec = json.loads(hello)["hello"]
        self.hardware = HardwareSpec.from_dict(spec) if spec else None

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.stdin.close()  # type: ignore[union-attr]
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._kill()
        self._proc = None

    def __enter__(self) -> BenchmarkWorker:
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def _restart(self) -> None:
        self._kill()
        self.restarts += 1
        self.start()

    def _read_line(self, timeout_s: float) -> str | None:
        """One protocol line; ``_EOF`` when the process closed its end; None on timeout."""
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self._proc.stdout], [], [], remaining)
            if ready:
                return self._proc.stdout.readline() or _EOF

    # -- measuring ------------------------------------------------------------------------

    def evaluate(
        self,
        config: Config,
        workload: Workload,
        *,
        seed: int = 0,
        tolerance: float | None = None,
        fp8_tolerance: float | None = None,
        launcher: str | None = None,
    ) -> Measurement:
        """Measure one config (with ``launcher``, else the worker's own); never raises for
        anything the config does."""
        if self._proc is None:
            self.start()
        elif self._proc.poll() is not None:
            self._restart()
        request = {
            "config": config.to_dict(), "workload": workload.to_dict(), "seed": seed,
            "launcher": launcher or self.launcher, "tolerance": tolerance, "fp8_tolerance": fp8_tolerance,
        }
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
            self._proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            self._restart()
            return Measurement.failure(config, workload, Status.CRASHED, "worker died before the request")
        line = self._read_line(self.timeout_s)
        if line is _EOF:
            code = self._proc.wait()  # type: ignore[union-attr]
            self._restart()
            return Measurement.failure(config, workload, Status.CRASHED, f"worker process died (exit code {code})")
        if line is None:
            self._restart()
            return Measurement.failure(config, workload, Status.TIMEOUT, f"no answer within {self.timeout_s:.0f} s")
        answer = json.loads(line)
        if answer.pop("_exiting", False):
            # The worker lost its CUDA context: it answered and is exiting. Wait for it, so
            # the next request goes to a fresh worker rather than into a dying one's pipe.
            self._proc.wait(timeout=60)  # type: ignore[union-attr]
        return Measurement.from_dict(answer)

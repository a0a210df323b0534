"""The live objective: Objective.evaluate(config, workload) -> Measurement on a real GPU.

Order of checks, cheapest first: the config is valid for the kernel's space, the static
model says it fits the GPU, then the worker compiles, verifies and times it. Each stage's
failure is a status; nothing a config does raises into the study.

A config that names a packed kernel (``kernel="varlen"`` / ``"paged"``, objectives/packed.py)
is checked against that kernel's space and measured through its launcher adapter; the
static model is not asked about it (see ``_static_verdict``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from flashtune.kernels.config import Config, Value
from flashtune.objectives.feasibility import Verdict, check
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.packed import launcher_for, packed_kernel, validate_row
from flashtune.objectives.precompile import CompilePool
from flashtune.objectives.types import Measurement, Status, Workload
from flashtune.objectives.worker import BenchmarkWorker


class Objective:
    """Measure configs on one GPU through an isolated worker process.

    Args:
        hardware: the target's spec; None reads it from the worker's device.
        device: CUDA device index for the worker (``CUDA_VISIBLE_DEVICES``).
        timeout_s: per-config budget before the worker is killed (``timeout``).
        precompile: pool processes compiling ahead (0: the worker compiles inline).
        tolerance: relative-error budget; None uses the dtype's default.
        fp8_tolerance: the budget for ``use_fp8`` configs (the user's accuracy budget).
        seed: inputs of trial ``i`` are drawn with ``seed + i`` (fresh for every config).
        static_check: skip configs the feasibility model rejects; False compiles them
            anyway, so a sweep records Triton's own verdict and can grade the model.
        launcher, env: passed to the worker (tests inject faults; CPU runs set the interpreter).
            Without a launcher, a packed kernel's config runs through its own
            (objectives/packed.py ``PACKED_LAUNCHERS``), any other through the dense op's.
    """

    def __init__(
        self,
        *,
        hardware: HardwareSpec | None = None,
        device: int | None = None,
        timeout_s: float = 120.0,
        precompile: int = 0,
        tolerance: float | None = None,
        fp8_tolerance: float | None = None,
        seed: int = 0,
        static_check: bool = True,
        launcher: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.worker = BenchmarkWorker(device=device, timeout_s=timeout_s, launcher=launcher, env=env)
        self._launcher = launcher
        self.pool = CompilePool(precompile)
        self.tolerance = tolerance
        self.fp8_tolerance = fp8_tolerance
        self._hardware = hardware
        self._seed = seed
        self.static_check = static_check
        self._trials = 0

    @property
    def hardware(self) -> HardwareSpec:
        if self._hardware is None:
            if self.worker.hardware is None:
                self.worker.start()
            if self.worker.hardware is None:
                raise RuntimeError("no GPU in the worker: pass a HardwareSpec to simulate one")
            self._hardware = self.worker.hardware
        return self._hardware

    def prefetch(self, configs: Iterable[Config], workload: Workload) -> None:
        """Start compiling configs that will be measured soon (feasible ones only)."""
        if self.pool.processes <= 0:
            return
        for config in configs:
            # The pool compiles the dense kernels only (precompile.compile_config): a packed
            # kernel's config compiles at its first launch in the worker.
            if packed_kernel(config) is not None:
                continue
            if not self.static_check or check(config, workload, self.hardware).feasible:
                self.pool.submit(config, workload)

    def evaluate(self, config: Mapping[str, Value], workload: Workload) -> Measurement:
        self._trials += 1
        hw = self.hardware
        stamp = {"fingerprint": hw.fingerprint, "hardware": hw.name,
                 "versions": {"torch": hw.torch, "triton": hw.triton, "cuda": hw.cuda, "driver": hw.driver}}
        try:
            cfg = validate_row(config)
        except ValueError as exc:
            return Measurement.failure(_as_config(config), workload, Status.INFEASIBLE, str(exc), **stamp)
        verdict = _static_verdict(cfg, workload, hw)
        if self.static_check and verdict is not None and not verdict.feasible:
            return Measurement.failure(cfg, workload, Status.INFEASIBLE, verdict.reason,
                                       shared_bytes=verdict.shared_bytes, **stamp)
        compiled = self.pool.wait(cfg, workload, timeout_s=self.worker.timeout_s)
        measured = self.worker.evaluate(cfg, workload, seed=self._seed + self._trials,
                                        tolerance=self.tolerance, fp8_tolerance=self.fp8_tolerance,
                                        launcher=self._launcher or launcher_for(cfg))
        if compiled is not None and measured.compile_s == measured.compile_s:  # not NaN
            # The worker's first call only loaded the pool's binary: count the real compile.
            stamp["compile_s"] = compiled[1] + measured.compile_s
        return dataclasses.replace(measured, **stamp)

    def close(self) -> None:
        self.pool.close()
        self.worker.close()

    def __enter__(self) -> Objective:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _static_verdict(config: Config, workload: Workload, hardware: HardwareSpec) -> Verdict | None:
    """The static feasibility model's verdict on ``config``; None for a packed kernel's.

    The model (objectives/feasibility.py) is the dense kernels': its shared-memory and
    register estimates, and the rules of its known failures, were fitted on and graded
    against them, and it reads their knobs (``loads``, ``use_fp8``, the decode tile). The
    packed kernels are other kernels with other knobs; what the model would say of them is
    not known to be right, and a false ``infeasible`` would keep a config out of the store
    unmeasured, where Triton itself reports one that does not fit (``out_of_resources``)
    in the worker at the cost of one compile.
    """
    if packed_kernel(config) is not None:
        return None
    return check(config, workload, hardware)


def _as_config(config: Mapping[str, object]) -> Config:
    """Keep a rejected config recordable even when its values are of the wrong type."""
    try:
        return Config(dict(config))
    except TypeError:
        return Config({str(k): v if isinstance(v, (int, bool, str)) else repr(v) for k, v in config.items()})

"""Static feasibility: will a config fit a GPU, before anything is compiled.

A constraint separate from the objective (Optuna's rule): the search space asks it, the
objective records its verdict as ``infeasible`` without compiling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from flashtune.kernels.config import Value
from flashtune.kernels.resources import registers_per_thread, shared_memory_bytes
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.types import Workload

_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


@dataclass(frozen=True)
class Verdict:
    feasible: bool
    shared_bytes: int
    registers_per_thread: int
    reason: str = ""

    @property
    def predicts_spills(self) -> bool:
        """Legal but slow: the compiler will spill registers to local memory."""
        return self.registers_per_thread > 255


def check(config: Mapping[str, Value], workload: Workload, hardware: HardwareSpec) -> Verdict:
    """Predict whether ``config`` fits ``hardware`` for ``workload``."""
    dtype_bytes = _DTYPE_BYTES[workload.dtype]
    shared = shared_memory_bytes(config, head_dim=workload.head_dim, dtype_bytes=dtype_bytes)
    regs = registers_per_thread(config, head_dim=workload.head_dim, dtype_bytes=dtype_bytes)
    if shared > hardware.shared_memory_per_block_bytes:
        return Verdict(
            False, shared, regs,
            f"needs {shared} B of shared memory, {hardware.name} allows {hardware.shared_memory_per_block_bytes} B per block",
        )
    return Verdict(True, shared, regs)

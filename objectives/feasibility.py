"""Static feasibility: will a config fit a GPU, before anything is compiled.

A constraint separate from the objective (Optuna's rule): the search space asks it, the
objective records its verdict as ``infeasible`` without compiling. ``for_workload`` builds
that search space: the kernel's knobs for a workload, constrained by the model on a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from flashtune.kernels.config import Value
from flashtune.kernels.dtypes import DTYPE_BYTES, HALF_DTYPES
from flashtune.kernels.launch_plan import launch_plan
from flashtune.kernels.resources import known_failure, registers_per_thread, shared_memory_bytes
from flashtune.kernels.space import decode_block_h, tunables_for
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.types import Status, Workload
from flashtune.search.space import SearchSpace


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
    """Predict whether ``config`` fits ``hardware`` for ``workload`` (either kernel: a decode
    config's query tile is the workload's packed rows, ``decode_block_h``)."""
    dtype_bytes = DTYPE_BYTES[workload.dtype]
    block_h = decode_block_h(workload.q_heads // workload.kv_heads, workload.q_len)
    shared = shared_memory_bytes(config, head_dim=workload.head_dim, dtype_bytes=dtype_bytes,
                                 compute_capability=hardware.compute_capability, block_h=block_h)
    regs = registers_per_thread(config, head_dim=workload.head_dim, dtype_bytes=dtype_bytes, block_h=block_h)
    plan = launch_plan(config)
    if plan.reads_descriptors and hardware.compute_capability < (9, 0):
        # Tensor descriptors and automatic warp specialization are Hopper-and-newer paths.
        return Verdict(False, shared, regs, f"loads={config['loads']!r} needs compute capability >= 9.0, "
                                            f"{hardware.name} is {hardware.arch}")
    if plan.constexprs.get("FP8") and hardware.compute_capability < (8, 9):
        return Verdict(False, shared, regs, f"use_fp8 needs compute capability >= 8.9, {hardware.name} is {hardware.arch}")
    if plan.variant == "gluon":
        unsupported = gluon_unsupported(workload)
        if unsupported:
            return Verdict(False, shared, regs, unsupported)
    failure = known_failure(config, hardware.compute_capability)
    if failure:
        return Verdict(False, shared, regs, failure)
    if shared > hardware.shared_memory_per_block_bytes:
        return Verdict(
            False, shared, regs,
            f"needs {shared} B of shared memory, {hardware.name} allows {hardware.shared_memory_per_block_bytes} B per block",
        )
    return Verdict(True, shared, regs)


def for_workload(workload: Workload, hardware: HardwareSpec) -> SearchSpace:
    """The space of the kernel that serves ``workload`` (``kernels.space.tunables_for``:
    decode for short queries, else prefill), constrained by the static feasibility model on
    ``hardware``. Built here, not in search/: the search space knows no kernel or GPU, only
    knobs and a predicate."""
    return SearchSpace(tunables_for(workload), lambda config: check(config, workload, hardware).feasible)


def gluon_unsupported(workload: Workload) -> str:
    """Why the Gluon kernel cannot run ``workload`` ("" when it can): its register tiles are
    (rows, head_dim) tensors, which Gluon builds only with power-of-2 sizes (sm90 compile,
    2026-12-03: head_dim 80 and 96 fail "Shape element 1 must be a power of 2"), and its
    launcher takes fp16 and bf16 only."""
    if workload.dtype not in HALF_DTYPES:
        return f"the Gluon kernel reads {' or '.join(HALF_DTYPES)} inputs, not {workload.dtype}"
    if workload.head_dim & (workload.head_dim - 1):
        return f"the Gluon kernel needs a power-of-2 head_dim, got {workload.head_dim}"
    return ""


@dataclass(frozen=True)
class Agreement:
    """How often the static model's verdict matched Triton's outcome on recorded trials."""

    total: int
    agreed: int
    false_feasible: list  # predicted to run, Triton said OutOfResources or its compiler failed
    false_infeasible: list  # predicted not to fit, Triton ran it

    @property
    def fraction(self) -> float:
        return self.agreed / self.total if self.total else float("nan")


def grade(measurements, hardware: HardwareSpec) -> Agreement:
    """Compare predictions with a sweep recorded without the static check.

    Only trials Triton judged count: compiled (ok, wrong_result, unsafe, out_of_resources) or
    refused by its compiler (compile_error, which the model's known failures predict); a
    static ``infeasible`` or a timeout says nothing about the model.
    """

    # ``unsafe`` ran (the sanitizer watched it run): the model was right that it fits.
    judged = {Status.OK, Status.WRONG_RESULT, Status.UNSAFE, Status.OUT_OF_RESOURCES, Status.COMPILE_ERROR}
    cannot_run = {Status.OUT_OF_RESOURCES, Status.COMPILE_ERROR}
    total = agreed = 0
    false_feasible, false_infeasible = [], []
    for m in measurements:
        if m.status not in judged:
            continue
        total += 1
        predicted = check(m.config, m.workload, hardware).feasible
        actual = m.status not in cannot_run
        if predicted == actual:
            agreed += 1
        elif predicted:
            false_feasible.append(m)
        else:
            false_infeasible.append(m)
    return Agreement(total, agreed, false_feasible, false_infeasible)

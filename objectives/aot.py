"""Compile a config for a GPU model on a machine without that GPU, or without any GPU.

Triton compiles for a target it is told (its wheel carries ``ptxas``); what it cannot do
without a GPU is ask the driver which target, device and stream are current. Under
:func:`compiling_for`, a stand-in driver answers for the named GPU model, so
``JITFunction.warmup`` binds and specializes the arguments exactly as a launch on that GPU
would (pointer alignment, integers divisible by 16 or equal to 1) and compiles, launching
nothing. The cubin's resource usage (``cuobjdump -res-usage``, also in the wheel) then gives
the registers a thread, the spills (local memory a thread / 4, as Triton reports
``n_spills``) and, from Triton's metadata, the shared memory a program.

On the H200's recorded sweeps these are the GPU's own figures, config for config
(``tests/objectives/test_aot.py``). What only a GPU knows stays unknown here: the time, a
wrong result, a launch that needs more shared memory than the SM has (that check is the
feasibility model's, from the same shared-memory figure).

The kernels must be real JIT functions: with ``TRITON_INTERPRET=1`` set when they were
imported they are the interpreter's, and nothing compiles (run in a separate process).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from flashtune.kernels.config import Value
from flashtune.kernels.dtypes import interpreting
from flashtune.kernels.space import validate_config
from flashtune.objectives.compiler_output import captured_output, describe_failure
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.precompile import compile_config
from flashtune.objectives.types import Workload

#: Warp size of every NVIDIA GPU Triton targets.
_WARP_SIZE = 32


class CompileFailed(RuntimeError):
    """The config does not compile for the target; the message is the compiler's first
    meaningful line (its whole output in ``output``)."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


@dataclass(frozen=True)
class CompiledResources:
    """What a compiled kernel uses on its target: registers a thread, spills (4-byte words
    of local memory a thread), shared memory bytes a program."""

    registers: int
    spills: int
    shared_bytes: int


class _TargetDriver:
    """Answers Triton's three questions about the current GPU for a GPU that is not here."""

    def __init__(self, target: object, name: str) -> None:
        self.target, self.name = target, name

    def get_current_target(self) -> object:
        return self.target

    def get_current_device(self) -> str:
        # A key of its own in Triton's per-device kernel caches: never a real GPU's entry.
        return f"compile-only:{self.name}"

    def get_current_stream(self, device: object = None) -> int:
        return 0


@contextlib.contextmanager
def compiling_for(hardware: HardwareSpec) -> Iterator[None]:
    """Within this block Triton compiles for ``hardware``'s architecture (launches would fail)."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    if interpreting():
        raise RuntimeError("TRITON_INTERPRET=1: the kernels are the interpreter's, nothing compiles; "
                           "run the compile in a process without it")
    major, minor = hardware.compute_capability
    previous = driver._active  # None until a driver was asked for: keep it so (no GPU to find)
    driver.set_active(_TargetDriver(GPUTarget("cuda", major * 10 + minor, _WARP_SIZE), hardware.arch))
    try:
        yield
    finally:
        driver._active = previous


def compiled_resources(config: Mapping[str, Value], workload: Workload, hardware: HardwareSpec) -> CompiledResources:
    """Compile ``config`` for ``workload`` on ``hardware``'s architecture and read its
    resource usage.

    Args:
        config: a :class:`Config` or a plain dict, as ``flash_attention`` takes it; knobs it
            leaves out take their implied values (``kernel="prefill"``, ...).

    Raises:
        ValueError: the config is not one of the kernel's space (naming the knob).
        CompileFailed: the compiler refused the config (what it printed is kept, not shown).
    """
    config = validate_config(config)
    failure: Exception | None = None
    with compiling_for(hardware), captured_output() as compiler:
        try:
            kernel = compile_config(config, workload, device="cpu")
        except Exception as exc:  # every compiler error becomes CompileFailed
            failure = exc
    if failure is not None:
        raise CompileFailed(describe_failure(failure, compiler), compiler.text) from failure
    usage = resource_usage(kernel.asm["cubin"])
    return CompiledResources(registers=usage["REG"], spills=(usage["STACK"] + usage["LOCAL"]) // 4,
                             shared_bytes=int(kernel.metadata.shared))


def resource_usage(cubin: bytes) -> dict[str, int]:
    """``cuobjdump -res-usage`` of a cubin as numbers: REG, STACK, SHARED, LOCAL, ..."""
    tool = _triton_tool("cuobjdump")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        text = subprocess.run([str(tool), "-res-usage", str(path)], capture_output=True, text=True, check=True).stdout
    found = dict(re.findall(r"\b([A-Z]+(?:\[\d+\])?):(\d+)", text))
    if "REG" not in found:
        raise RuntimeError(f"cuobjdump printed no resource usage: {text.strip()[:200]!r}")
    return {key: int(value) for key, value in found.items()}


def _triton_tool(name: str) -> Path:
    import triton

    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path}: Triton's wheel carries no {name} here (needed to read a cubin's resources)")
    return path

"""Measure one config in the current process: compile, check, time. Runs inside the worker.

Every outcome is a :class:`Measurement`; the only exception that escapes is one that
means this process is no longer usable (the worker then restarts).
"""

from __future__ import annotations

import importlib
import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from flashtune.kernels.attention import TORCH_DTYPES
from flashtune.kernels.config import Config
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.kernels.resources import COMPILER_ERROR_MARKERS
from flashtune.objectives.compiler_output import captured_output, describe_failure
from flashtune.objectives.types import Measurement, Status, Workload

DEFAULT_LAUNCHER = "flashtune.kernels.attention:launch"

#: Relative-error budget per dtype (‖out − ref‖ / ‖ref‖ against float32). bf16 lands
#: between 1e-3 and 1e-2 on random inputs (docs/reference.md); fp32 is TF32 on the GPU.
TOLERANCE = {"float16": 5e-3, "bfloat16": 2e-2, "float32": 2e-3}
#: Default budget for use_fp8 configs: e4m3 keeps 3 mantissa bits, and Q, K, V and P are
#: each rounded once, which puts random-input errors near 4-8e-2. Users set their own.
FP8_TOLERANCE = 0.1



class ContextLost(RuntimeError):
    """The CUDA context is unusable (e.g. an illegal address); the process must go."""


def load_launcher(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def make_inputs(workload: Workload, seed: int, dev: torch.device) -> tuple[torch.Tensor, ...]:
    """Fresh standard-normal q, k, v (never zeros: they hide unwritten outputs)."""
    gen = torch.Generator(device=dev).manual_seed(seed)
    dtype = TORCH_DTYPES[workload.dtype]
    q_shape = (workload.batch, workload.q_heads, workload.q_len, workload.head_dim)
    kv_shape = (workload.batch, workload.kv_heads, workload.kv_len, workload.head_dim)
    return tuple(torch.randn(s, generator=gen, device=dev, dtype=torch.float32).to(dtype) for s in (q_shape, kv_shape, kv_shape))




def classify_error(exc: BaseException) -> Status:
    """Map a Triton/CUDA exception to a status (Triton's autotuner does the same)."""
    name = type(exc).__name__
    if name == "OutOfResources":
        return Status.OUT_OF_RESOURCES
    if name in ("CompilationError", "CompileTimeAssertionFailure", "PTXASError", "TritonError", "MLIRError"):
        return Status.COMPILE_ERROR
    if any(marker in str(exc) for marker in COMPILER_ERROR_MARKERS):
        return Status.COMPILE_ERROR
    return Status.CRASHED


def _context_usable(dev: torch.device) -> bool:
    """After an unknown error: can this process still run CUDA work?"""
    try:
        torch.ones(1, device=dev).add_(1)
        _sync(dev)
        return True
    except Exception:  # any failure here means the context is gone
        return False


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def measure(
    config: Config,
    workload: Workload,
    *,
    seed: int = 0,
    launcher: str = DEFAULT_LAUNCHER,
    tolerance: float | None = None,
    fp8_tolerance: float | None = None,
    rep_ms: int = 100,
) -> Measurement:
    """Compile, verify and time ``config`` on ``workload`` on this process's device."""
    dev = device()
    launch = load_launcher(launcher)
    if config.get("use_fp8"):
        tol = FP8_TOLERANCE if fp8_tolerance is None else fp8_tolerance
    else:
        tol = TOLERANCE[workload.dtype] if tolerance is None else tolerance
    scale = 1.0 / math.sqrt(workload.head_dim)
    causal = workload.causal
    q, k, v = make_inputs(workload, seed, dev)
    out = torch.full_like(q, float("nan"))  # poisoned: every element must be written

    started = time.perf_counter()
    failure: Exception | None = None
    # The first launch compiles: what the compiler prints goes into the record, not onto
    # the user's terminal (compiler_output).
    with captured_output() as compiler:
        try:
            handle = launch(q, k, v, out, causal=causal, scale=scale, config=config)
            _sync(dev)
        except Exception as exc:  # every failure becomes a status
            failure = exc
    if failure is not None:
        status = classify_error(failure)
        message = describe_failure(failure, compiler)
        if status is Status.CRASHED and dev.type == "cuda" and not _context_usable(dev):
            raise ContextLost(message) from failure
        return Measurement.failure(config, workload, status, message, compiler_output=compiler.text)
    compile_s = time.perf_counter() - started
    resources = kernel_resources(handle)

    ref = reference_attention(q, k, v, causal=causal, scale=scale)
    err = relative_error(out, ref)
    del ref
    if not err <= tol:
        return Measurement.failure(
            config, workload, Status.WRONG_RESULT,
            f"relative error {err:.3g} over the {'fp8' if config.get('use_fp8') else workload.dtype} budget {tol:.3g}",
            rel_error=err, compile_s=compile_s, **resources,
        )

    def run() -> None:
        launch(q, k, v, out, causal=causal, scale=scale, config=config)

    median_ms, p20_ms, p80_ms = time_call(run, dev, rep_ms)
    clock, temp = gpu_state()
    return Measurement(
        config=config, workload=workload, status=Status.OK,
        median_ms=median_ms, p20_ms=p20_ms, p80_ms=p80_ms,
        tflops=workload.flops / (median_ms * 1e-3) / 1e12,
        compile_s=compile_s, rel_error=err, sm_clock_mhz=clock, temperature_c=temp,
        **resources,
    )


def time_call(fn: Callable[[], None], dev: torch.device, rep_ms: int) -> tuple[float, float, float]:
    """Median, 20 % and 80 % milliseconds of ``fn`` (the objective's timing, peers' too)."""
    if dev.type == "cuda":
        from triton.testing import do_bench

        # CUDA events, warm-up, L2 flushed between runs, median and 20/80 % quantiles.
        median, p20, p80 = do_bench(fn, warmup=25, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
        return float(median), float(p20), float(p80)
    # The interpreter on a CPU: times mean nothing for the GPU, but keep the shape.
    samples = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    samples.sort()
    return statistics.median(samples), samples[0], samples[-1]


def kernel_resources(handle: Any) -> dict[str, Any]:
    """Registers, spills and shared memory from Triton's compiled kernel, when there is one."""
    if handle is None:
        return {}
    try:
        return {
            "registers": int(handle.n_regs),
            "spills": int(handle.n_spills),
            "shared_bytes": int(handle.metadata.shared),
        }
    except AttributeError:
        return {}


_NVML_HANDLE: Any = None


def gpu_state() -> tuple[float | None, float | None]:
    """SM clock (MHz) and temperature (C) from NVML, or (None, None) without it."""
    global _NVML_HANDLE
    if not torch.cuda.is_available():
        return None, None
    try:
        import pynvml

        if _NVML_HANDLE is None:
            pynvml.nvmlInit()
            index = int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0)
            _NVML_HANDLE = pynvml.nvmlDeviceGetHandleByIndex(index)
        clock = pynvml.nvmlDeviceGetClockInfo(_NVML_HANDLE, pynvml.NVML_CLOCK_SM)
        temp = pynvml.nvmlDeviceGetTemperature(_NVML_HANDLE, pynvml.NVML_TEMPERATURE_GPU)
        return float(clock), float(temp)
    except Exception:  # monitoring is optional
        return None, None

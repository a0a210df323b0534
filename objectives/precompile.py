"""Compile upcoming configs in a pool of processes while the GPU times the current one.

Compilation is nearly all of a trial's cost (about 1 s against 0.1 s of timing,
docs/reference.md). Pool processes call ``JITFunction.warmup``, which compiles into Triton's
disk cache without launching; the benchmark worker then finds the binary there. The
warm-up uses the workload's real integer arguments, because Triton specializes integers
equal to 1 and divisibility by 16: a warm-up with other values would compile a
different binary. OutOfResources appears only at launch, so the worker still reports it.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from flashtune.kernels.config import Config
from flashtune.kernels.launch_plan import launch_plan
from flashtune.kernels.space import validate_config
from flashtune.objectives.compiler_output import captured_output, describe_failure
from flashtune.objectives.types import Workload


def _compile(config: dict, workload: dict) -> tuple[str, float]:
    """Runs in a pool process: compile one config for one workload; (error or '', seconds)."""
    import time

    started = time.perf_counter()
    failure: Exception | None = None
    # What the compiler prints stays out of the terminal: the benchmark worker compiles a
    # failing config again and records its output with the trial; here its first line will do.
    with captured_output() as compiler:
        try:
            compile_config(validate_config(config), Workload.from_dict(workload))
        except Exception as exc:  # reported to the parent; the worker will classify it
            failure = exc
    if failure is not None:
        return describe_failure(failure, compiler), time.perf_counter() - started
    return "", time.perf_counter() - started


def compile_form(config: dict, workload: dict, fp8_p: str) -> str:
    """Pool process: compile one fp8 Gluon config in P form ``fp8_p`` (kernels/gluon.py
    ``FP8_P_FORMS``, beside the op's form the pool compiles); its error, or ''."""
    failure: Exception | None = None
    with captured_output() as compiler:
        try:
            compile_config(validate_config(config), Workload.from_dict(workload), fp8_p=fp8_p)
        except Exception as exc:  # whoever launches it compiles it again and names the failure
            failure = exc
    return "" if failure is None else describe_failure(failure, compiler)


def compile_config(cfg: Config, w: Workload, device: str = "cuda", fp8_p: str | None = None) -> Any:
    """Compile ``cfg`` (complete: implied knobs filled in) for ``w`` into Triton's cache; raises what Triton raises.

    Returns Triton's compiled kernel (the decode kernel's split kernel). ``device``: where
    the stand-in buffers live; only their dtype, alignment and strides are read, so
    ``"cpu"`` serves a compile for a named target without a GPU (objectives/aot.py).
    ``fp8_p``: an fp8 Gluon config's P form (kernels/gluon.py ``FP8_P_FORMS``) other than
    the one the op runs (None), as a benchmark times it beside the default.
    """
    import math

    import torch

    # In the pool process only: the parent keeps torch and Triton unloaded (see module doc).
    from flashtune.kernels.attention import (
        TORCH_DTYPES,
        compile_options,
        forward_kernel_for,
        fp8_v_row,
        kernel_arguments,
        launch,
        launch_quantized,
        quantize_fp8,
    )
    from flashtune.kernels.decode import warm_up  # the pool process only, as above
    from flashtune.kernels.gluon import fp8_p_v_order  # the pool process only, as above

    plan = launch_plan(cfg)
    if plan.variant == "decode":
        return warm_up(cfg, batch=w.batch, q_heads=w.q_heads, kv_heads=w.kv_heads, q_len=w.q_len, kv_len=w.kv_len,
                       head_dim=w.head_dim, dtype=TORCH_DTYPES[w.dtype], causal=w.causal, device=device)
    if plan.variant != "forward":
        # The lean launcher's variants: host descriptors carry the tensors' shapes and
        # strides, so warm up through the launcher on uninitialised buffers of the
        # workload's own shapes.
        dtype = TORCH_DTYPES[w.dtype]
        q, out = (torch.empty(w.batch, w.q_heads, w.q_len, w.head_dim, device=device, dtype=dtype)
                  for _ in range(2))
        k, v = (torch.empty(w.batch, w.kv_heads, w.kv_len, w.head_dim, device=device, dtype=dtype)
                for _ in range(2))
        if fp8_p is not None:
            if plan.variant != "gluon" or not plan.constexprs["FP8"]:
                raise ValueError(f"fp8_p={fp8_p!r} is a form of the Gluon kernel's fp8, not of {cfg.to_dict()}")
            q8, k8, v8_t, scales = quantize_fp8(q, k, v, v_order=fp8_p_v_order(fp8_p))
            return launch_quantized(q8, k8, v8_t, scales, out, causal=w.causal, scale=1 / math.sqrt(w.head_dim),
                                    config=cfg, warmup=True, fp8_p=fp8_p)
        return launch(q, k, v, out, causal=w.causal, scale=1 / math.sqrt(w.head_dim), config=cfg, warmup=True)
    # Tiny buffers: warm-up reads pointers' dtype and alignment and the integer values
    # (Triton specializes strides equal to 1 or divisible by 16), not data; the strides
    # are those of the contiguous inputs the launcher sees (fp8: quantize_fp8's layout).
    out = torch.empty(64, device=device, dtype=TORCH_DTYPES[w.dtype])
    stride_q = (w.q_heads * w.q_len * w.head_dim, w.q_len * w.head_dim, w.head_dim)
    stride_k = (w.kv_heads * w.kv_len * w.head_dim, w.kv_len * w.head_dim, w.head_dim)
    if plan.constexprs["FP8"]:
        qkv = torch.empty(64, device=device, dtype=torch.float8_e4m3fn)
        scales = torch.empty(3, device=device, dtype=torch.float32)
        row = fp8_v_row(w.kv_len)  # V^T: (batch, head, head_dim, row), read as (.., n, d)
        stride_v = (w.kv_heads * w.head_dim * row, w.head_dim * row, 1, row)
    else:
        qkv = scales = out  # the launcher passes q as the (unread) scales pointer
        stride_v = (*stride_k, 1)
    args = kernel_arguments(qkv, qkv, qkv, out, scales, stride_q=stride_q, stride_k=stride_k,
                            stride_v=stride_v, stride_o=stride_q, batch=w.batch, q_heads=w.q_heads,
                            kv_heads=w.kv_heads, q_len=w.q_len, kv_len=w.kv_len,
                            scale=1 / math.sqrt(w.head_dim))
    return forward_kernel_for(w.q_len, w.kv_len).warmup(
        *args, **compile_options(cfg, head_dim=w.head_dim, causal=w.causal), grid=(1,))


class CompilePool:
    """A spawn pool that fills Triton's disk cache ahead of the benchmark worker.

    Args:
        processes: pool size (0 disables precompilation); defaults to the CPU count.
    """

    def __init__(self, processes: int | None = None) -> None:
        self.processes = (os.cpu_count() or 1) if processes is None else processes
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[tuple[Config, Workload], Future[tuple[str, float]]] = {}

    def submit(self, config: Config, workload: Workload) -> None:
        """Queue a compile; repeated submissions of the same pair are ignored."""
        if self.processes <= 0 or (config, workload) in self._futures:
            return
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"))
        self._futures[(config, workload)] = self._pool.submit(_compile, config.to_dict(), workload.to_dict())

    def wait(self, config: Config, workload: Workload, timeout_s: float | None = None) -> tuple[str, float] | None:
        """Block until a queued compile finished: (error text or '', compile seconds); None if not queued."""
        future = self._futures.get((config, workload))
        if future is None:
            return None
        try:
            return future.result(timeout=timeout_s)
        except Exception as exc:  # a broken pool or a hang: the worker compiles itself
            return f"{type(exc).__name__}: {exc}", 0.0

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

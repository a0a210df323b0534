"""Why D64 full's Gluon rows read 25 % low in a full-suite bench_peers process (2026-12-04), and
418 TFLOP/s alone: is the timed call host-bound? Its kernel runs about 167 us; Triton's do_bench
flushes L2 (a 256 MB memset) before each call, and the call's host path (descriptors made on the
host a call) must be enqueued before the memset ends, or the GPU waits inside the timed span.

For one config on b16 h16 n1024 d64 full, fresh and again after the suite's D128 workloads ran
their Gluon configs and SDPA in the same process: host us a launch() call (the GPU kept busy),
GPU us a call back to back (events around 200 calls, no flush), do_bench (flush, the bench's
timing) and do_bench_cudagraph (no host in the span); each through the generic launcher
(``launch``, what bench_peers times) and through the runtime's dispatcher (a prepared call:
``PreparedGluon``, the compiled kernel bound, and with ``FLASHTUNE_BIND_LAUNCH=0`` through the
jit dispatcher).
    python3 docs/lab/gpu/d64_probe.py
"""

import json
import os
import tempfile
import time

import torch
from triton.testing import do_bench, do_bench_cudagraph

from flashtune.kernels.attention import launch
from flashtune.kernels.launch_support import ENV_BIND
from flashtune.kernels.space import validate_config
from flashtune.objectives.bench import make_inputs
from flashtune.objectives.peers import tflops
from flashtune.objectives.types import SUITE
from flashtune.runtime.dispatching.dispatch import Dispatcher, cache_key

CONFIG = validate_config({"loads": "gluon_pingpong", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2,
                          "grid": "persistent", "tile_order": "head_major"})
BY_NAME = {w.name: w for w in SUITE}
D64 = BY_NAME["b16_h16_n1024_d64_full_bfloat16"]
BEFORE = ["b4_h32_n4096_d128_full_bfloat16", "b4_h32_n4096_d128_causal_bfloat16"]


def call_of(workload):
    q, k, v = make_inputs(workload, seed=1234, dev=torch.device("cuda"))
    out = torch.empty_like(q)
    scale = workload.head_dim ** -0.5
    return lambda: launch(q, k, v, out, causal=workload.causal, scale=scale, config=CONFIG), (q, k, v)


def dispatcher_call(q, k, v, bind: bool):
    """The runtime's path: a dispatcher serving CONFIG for this key, its prepared call made
    (the first call) with bound launches on or off."""
    os.environ[ENV_BIND] = "1" if bind else "0"
    dispatcher = Dispatcher(os.path.join(tempfile.mkdtemp(), "none.json"))
    dispatcher.config_for(q, k, False)
    dispatcher.swap(cache_key(q, k, False), CONFIG)
    dispatcher(q, k, v, causal=False)
    os.environ.pop(ENV_BIND, None)
    return lambda: dispatcher(q, k, v, causal=False)


def measure(call):
    call()
    torch.cuda.synchronize()
    # Host: calls issued behind a long GPU job, so the queue never waits on the GPU.
    blocker = torch.empty(1 << 28, device="cuda")
    for _ in range(20):
        blocker.mul_(1.0)
    t0 = time.perf_counter()
    for _ in range(100):
        call()
    host_us = (time.perf_counter() - t0) / 100 * 1e6
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(200):
        call()
    end.record()
    torch.cuda.synchronize()
    return {"host_us_per_call": host_us, "back_to_back_us": start.elapsed_time(end) / 200 * 1e3,
            "do_bench_flush_tflops": tflops(D64, do_bench(call, warmup=25, rep=100, quantiles=[0.5])),
            "do_bench_cudagraph_tflops": tflops(D64, do_bench_cudagraph(call, rep=100))}


def probe(label):
    call, (q, k, v) = call_of(D64)
    rows = []
    for path, fn in (("launch()", call), ("prepared, jit dispatcher", dispatcher_call(q, k, v, bind=False)),
                     ("prepared, bound", dispatcher_call(q, k, v, bind=True))):
        row = {"when": label, "path": path, **measure(fn)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)  # noqa: E731
    rows.append({"when": label, "path": "sdpa (default backend)", **measure(sdpa)})
    print(json.dumps(rows[-1]), flush=True)
    return rows


def main():
    rows = probe("fresh")
    for name in BEFORE:
        call, (q, k, v) = call_of(BY_NAME[name])
        for _ in range(3):
            do_bench(call, warmup=25, rep=100)
            do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), warmup=25, rep=100)
    rows += probe("after D128 full and causal")
    print("\nD64 full, gluon persistent 128x128 2 stages (TFLOP/s; us a call):")
    for r in rows:
        print(f"  {r['when']:27s} {r['path']:25s} host {r['host_us_per_call']:6.1f}, back to back "
              f"{r['back_to_back_us']:6.1f}, do_bench {r['do_bench_flush_tflops']:4.0f}, cudagraph "
              f"{r['do_bench_cudagraph_tflops']:4.0f}")


if __name__ == "__main__":
    main()

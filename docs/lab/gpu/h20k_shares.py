"""Issue 20, D64 causal (branch h20k): the Gluon ping-pong with a share of P's exp2 on the FMA
pipe (``EXP2_POLY`` of every 16, kernels/_flash_fwd_gluon.py ``_exp2_split``), each share timed
beside SDPA cuDNN and flash in the same interleaved rounds (objectives.peers.time_peers, the
protocol bench_peers uses), through the launcher: the share is the kernel's constexpr, not a
knob of the space (call 1, commit e26aaab, declared 3 of 16 as ``loads="gluon_pingpong_poly"``;
slower at every share on D64 causal, so no longer declared).

    python docs/lab/gpu/h20k_shares.py --json shares.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

#: (workload, the configs: (grid, tile order)) timed at each share.
WORKLOADS = {
    "b8_h16_n2048_d64_causal_bfloat16": ((8, 16, 2048, 64, True), [("persistent", "head_major"), ("tiles", "longest_first")]),
    "b16_h16_n1024_d64_full_bfloat16": ((16, 16, 1024, 64, False), [("persistent", "head_major")]),
    "b4_h32_n4096_d128_causal_bfloat16": ((4, 32, 4096, 128, True), [("tiles", "longest_first")]),
}
SHARES = (0, 2, 3, 4, 6, 8)


def _variant(grid: str, order: str, share: int):
    from flashtune.kernels.gluon import gluon_variant_for
    from flashtune.kernels.space import validate_config

    config = validate_config(dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2, loads="gluon_pingpong",
                                  grid=grid, tile_order=order))
    variant = gluon_variant_for(config)
    return dataclasses.replace(variant, extra=(*variant.extra, ("EXP2_POLY", share)))


def _inputs(shape):
    from flashtune.objectives.bench import make_inputs
    from flashtune.objectives.types import Workload

    b, h, n, d, causal = shape
    w = Workload(b, h, h, n, n, d, "bfloat16", causal)
    return w, make_inputs(w, seed=1234, dev=torch.device("cuda"))


def _compile(job) -> str:
    """Compile one (workload, grid, order, share) in a pool process (Triton's cache is shared)."""
    from flashtune.kernels.gluon import launch_gluon

    shape, grid, order, share = job
    w, (q, k, v) = _inputs(shape)
    launch_gluon(q, k, v, torch.empty_like(q), causal=w.causal, scale=w.head_dim ** -0.5,
                 variant=_variant(grid, order, share), programs=torch.cuda.get_device_properties(0).multi_processor_count,
                 warmup=True)
    return f"{shape} {grid} {order} {share}"


def main() -> int:
    from flashtune.kernels.gluon import launch_gluon
    from flashtune.objectives.peers import tflops, time_peers

    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    jobs = [(shape, g, o, s) for shape, cfgs in WORKLOADS.values() for g, o in cfgs for s in SHARES]
    with ProcessPoolExecutor(16, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_compile, jobs))
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    results = []
    for name, (shape, cfgs) in WORKLOADS.items():
        w, _ = _inputs(shape)
        beside = {}
        for grid, order in cfgs:
            for share in SHARES:
                variant = _variant(grid, order, share)

                def make(q, k, v, variant=variant):
                    out = torch.empty_like(q)
                    return lambda: launch_gluon(q, k, v, out, causal=w.causal, scale=w.head_dim ** -0.5,
                                                variant=variant, programs=programs)

                beside[f"{grid} {order} poly {share}/16"] = make
        peers, timed = time_peers(w, torch.device("cuda"), rounds=args.rounds, beside=beside)
        row = {label: tflops(w, timed.median_ms[label]) for label in beside}
        row.update({p.name: tflops(w, p.median_ms) for p in peers})
        results.append({"workload": name, "tflops": row, "errors": timed.errors, "sm_clock_mhz": timed.sm_clock_mhz})
        cudnn = row["SDPA cuDNN"] or float("nan")
        print(f"\n{name} (SM clock {timed.sm_clock_mhz}): SDPA cuDNN {row['SDPA cuDNN']:.0f}, flash {row['SDPA flash']:.0f}")
        for label in beside:
            print(f"  {label:40s} {row[label]:6.1f} TFLOP/s  {row[label] / cudnn:.3f}x cuDNN")
        args.json.write_text(json.dumps(results, indent=2) + "\n")  # each workload as it is done
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

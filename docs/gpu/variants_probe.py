"""Issue 20 (2026-12-05): Gluon kernel variants outside the declared space, timed beside SDPA
cuDNN and flash in the same rounds, each checked against SDPA's output first.

What is asked (the kernel as of this commit):
- three consumer warpgroups (``groups=3``, 192 query rows a program, 64 each; workers at 160
  registers): is D128 full bound by the L2 -> SM traffic of K/V? A program of 192 rows reads
  each K/V block for 1.5x the rows of one of 128 (FA3 gets the same from cluster multicast,
  which Triton 3.6's Gluon does not expose);
- 256-key blocks at head_dim 64 (FA3 takes 192 there; 12-24 spilled words on sm90);
- a share of P's exp2 on the FMA pipe (``EXP2_POLY``) at D64 full (2 of 16 read 424 against
  415 in one run of 2026-12-03);
- the ordered ping-pong on the persistent grid at D128 full.

    python3 docs/gpu/variants_probe.py [--rounds 2] [--json FILE]
TFLOP/s by CUDA graph (``do_bench_cudagraph``: the kernels back to back, no host in the span)
and by ``do_bench`` (an L2 flush before each call, as bench_peers times), a short table last.
"""

import argparse
import json
import math

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench, do_bench_cudagraph

from flashtune.kernels.attention import persistent_programs
from flashtune.kernels.gluon import GluonVariant, launch_gluon
from flashtune.objectives.bench import make_inputs
from flashtune.objectives.peers import tflops
from flashtune.objectives.types import SUITE

BY_NAME = {w.name: w for w in SUITE}


def variant(bm, bn, groups=2, *, stages=2, persistent=False, zigzag=False, longest=False, ordered=False, poly=0):
    extra = {"FP8": False}
    if zigzag:
        extra["ZIGZAG"] = True
    if poly:
        extra["EXP2_POLY"] = poly
    return GluonVariant(BLOCK_M=bm, BLOCK_N=bn, num_warps=4, num_stages=stages, groups=groups, ordered=ordered,
                        longest_first=longest, persistent=persistent, extra=tuple(extra.items()))


PLAN = {
    "b4_h32_n4096_d128_full_bfloat16": [
        variant(128, 128, persistent=True),
        variant(128, 128),
        variant(128, 128, persistent=True, ordered=True),
        variant(128, 64, persistent=True),
        variant(192, 64, 3, persistent=True),
        variant(192, 64, 3),
    ],
    "b4_h32_n4096_d128_causal_bfloat16": [
        variant(128, 128, persistent=True, zigzag=True, longest=True),
        variant(128, 128, longest=True),
        variant(192, 64, 3, persistent=True, zigzag=True, longest=True),
        variant(192, 64, 3, longest=True),
    ],
    "b16_h16_n1024_d64_full_bfloat16": [
        variant(128, 128, persistent=True),
        variant(128, 128, persistent=True, poly=1),
        variant(128, 128, persistent=True, poly=2),
        variant(128, 256, persistent=True),
        variant(128, 256, persistent=True, poly=2),
        variant(192, 64, 3, persistent=True),
    ],
    "b8_h16_n2048_d64_causal_bfloat16": [
        variant(128, 128, persistent=True, zigzag=True),
        variant(128, 256, persistent=True, zigzag=True),
        variant(192, 64, 3, persistent=True, zigzag=True),
    ],
    "b4_hq32kv8_n4096_d128_causal_bfloat16": [
        variant(128, 128, persistent=True, zigzag=True),
        variant(192, 64, 3, persistent=True, zigzag=True),
    ],
}


def sdpa_call(q, k, v, causal, backend):
    """SDPA on ``backend``; grouped-query K/V expanded to the query heads once, outside the call
    (both backends take that form; bench_peers also times ``enable_gqa`` and keeps the faster)."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))

    def call():
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return call


def timed(workload, call):
    try:
        graph = tflops(workload, do_bench_cudagraph(call, rep=100))
    except Exception as exc:  # a peer that cannot be captured still gets its flushed reading
        print(f"   (cudagraph failed: {type(exc).__name__}: {str(exc)[:120]})")
        graph = 0.0
    flushed = tflops(workload, do_bench(call, warmup=25, rep=100, quantiles=[0.5]))
    return graph, flushed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    dev = torch.device("cuda")
    programs = persistent_programs(dev)
    rows = []
    for name, variants in PLAN.items():
        w = BY_NAME[name]
        q, k, v = make_inputs(w, seed=1234, dev=dev)
        scale = w.head_dim ** -0.5
        reference = sdpa_call(q, k, v, w.causal, SDPBackend.CUDNN_ATTENTION)().float()
        calls = {"SDPA cuDNN": sdpa_call(q, k, v, w.causal, SDPBackend.CUDNN_ATTENTION),
                 "SDPA flash": sdpa_call(q, k, v, w.causal, SDPBackend.FLASH_ATTENTION)}
        checks = {}
        for var in variants:
            out = torch.empty_like(q)
            label = var.label() + (" 3 groups" if var.groups == 3 else "")
            try:
                launch_gluon(q, k, v, out, causal=w.causal, scale=scale, variant=var, programs=programs)
                torch.cuda.synchronize()
                err = (out.float() - reference).abs().max().item()
            except Exception as exc:
                print(f"{name} {label}: FAILED {type(exc).__name__}: {str(exc)[:200]}")
                continue
            checks[label] = err
            if not math.isfinite(err) or err > 0.03:
                print(f"{name} {label}: WRONG, max |out - cuDNN| {err:.4f}; not timed")
                continue
            calls[label] = (lambda q=q, k=k, v=v, out=out, var=var: launch_gluon(
                q, k, v, out, causal=w.causal, scale=scale, variant=var, programs=programs))
        readings = {label: [] for label in calls}
        for r in range(args.rounds):
            for label, call in calls.items():
                readings[label].append(timed(w, call))
                print(f"{name} round {r} {label:55s} graph {readings[label][-1][0]:6.1f} "
                      f"flush {readings[label][-1][1]:6.1f}", flush=True)
        for label, rs in readings.items():
            rows.append({"workload": name, "label": label, "graph": [x[0] for x in rs], "flush": [x[1] for x in rs],
                         "max_err_vs_cudnn": checks.get(label)})
        del q, k, v
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("\nTFLOP/s, median of rounds: CUDA graph / flushed (x SDPA cuDNN's, by graph); max |out - cuDNN|")
    for name in PLAN:
        mine = [r for r in rows if r["workload"] == name]
        peer = {r["label"]: r for r in mine}.get("SDPA cuDNN")
        base = sorted(peer["graph"])[len(peer["graph"]) // 2] if peer else float("nan")
        print(name)
        for r in mine:
            g, f = (sorted(r[key])[len(r[key]) // 2] for key in ("graph", "flush"))
            err = "" if r["max_err_vs_cudnn"] is None else f"  err {r['max_err_vs_cudnn']:.4f}"
            print(f"   {r['label']:55s} {g:6.1f} / {f:6.1f} ({g / base:.3f}x){err}")


if __name__ == "__main__":
    main()

"""Issue 20 (2026-12-04b): Gluon kernel variants outside the declared space, timed beside SDPA
cuDNN and flash in the same rounds, each checked against SDPA's output first.

What is asked (the kernel as of this commit):
- (at 03a9e1e) three consumer warpgroups (``groups=3``, 192 query rows a program, 64 each; workers at 160
  registers): is D128 full bound by the L2 -> SM traffic of K/V? A program of 192 rows reads
  each K/V block for 1.5x the rows of one of 128 (FA3 gets the same from cluster multicast,
  which Triton 3.6's Gluon does not expose);
- 256-key blocks at head_dim 64 (FA3 takes 192 there; 12-24 spilled words on sm90);
- a share of P's exp2 on the FMA pipe (``EXP2_POLY``) at D64 full (2 of 16 read 424 against
  415 in one run of 2026-12-03);
- the ordered ping-pong on the persistent grid at D128 full;
- (second call) the same FMA-pipe share of fp8's exp2 (fp8's P is formed after its exp2s as
  16-bit P is; at D128 a block's exp2s on MUFU take as long as its two fp8 GEMMs), at D128 and
  D256, kernel-only (inputs quantized once, outside the timed calls);
- (2026-12-04c, ``--plan lazy``) FA4's conditional rescaling (``LAZY_RESCALE``) at each suite
  workload's best Gluon tiles and for fp8.

    python3 docs/gpu/variants_probe.py --plan PLAN [--plan PLAN ...] [--rounds 2] [--json FILE]
TFLOP/s by CUDA graph (``do_bench_cudagraph``: the kernels back to back, no host in the span)
and by ``do_bench`` (an L2 flush before each call, as bench_peers times), a short table last.
"""

import argparse
import dataclasses
import json
import math

import torch
from torch.nn.attention import SDPBackend
from triton.testing import do_bench, do_bench_cudagraph

from flashtune.kernels.attention import persistent_programs, quantize_fp8
from flashtune.kernels.gluon import GluonVariant, launch_gluon
from flashtune.objectives.bench import make_inputs
from flashtune.objectives.peers import sdpa_call, tflops
from flashtune.objectives.types import SUITE, Workload

BY_NAME = {w.name: w for w in SUITE}


def variant(bm, bn, groups=2, *, stages=2, persistent=False, zigzag=False, longest=False, ordered=False, poly=0,
            fp8=False):
    extra = {"FP8": fp8}
    if zigzag:
        extra["ZIGZAG"] = True
    if poly:
        extra["EXP2_POLY"] = poly
    return GluonVariant(BLOCK_M=bm, BLOCK_N=bn, num_warps=4, num_stages=stages, groups=groups, ordered=ordered,
                        longest_first=longest, persistent=persistent, extra=tuple(extra.items()))


#: The first call's (2026-12-04b; raw docs/results/variants-2026-12-04b/call1). It ran at 03a9e1e, whose
#: kernel had three consumer groups (``groups=3``, 192x64 below); they were slower everywhere and
#: left the kernel (docs/results/variants-2026-12-04b/three-groups.patch puts them back), so
#: their rows are commented out here.
FIRST_CALL = {
    "b4_h32_n4096_d128_full_bfloat16": [
        variant(128, 128, persistent=True),
        variant(128, 128),
        variant(128, 128, persistent=True, ordered=True),
        variant(128, 64, persistent=True),
        # variant(192, 64, 3, persistent=True),
        # variant(192, 64, 3),
    ],
    "b4_h32_n4096_d128_causal_bfloat16": [
        variant(128, 128, persistent=True, zigzag=True, longest=True),
        variant(128, 128, longest=True),
        # variant(192, 64, 3, persistent=True, zigzag=True, longest=True),
        # variant(192, 64, 3, longest=True),
    ],
    "b16_h16_n1024_d64_full_bfloat16": [
        variant(128, 128, persistent=True),
        variant(128, 128, persistent=True, poly=1),
        variant(128, 128, persistent=True, poly=2),
        variant(128, 256, persistent=True),
        variant(128, 256, persistent=True, poly=2),
        # variant(192, 64, 3, persistent=True),
    ],
    "b8_h16_n2048_d64_causal_bfloat16": [
        variant(128, 128, persistent=True, zigzag=True),
        variant(128, 256, persistent=True, zigzag=True),
        # variant(192, 64, 3, persistent=True, zigzag=True),
    ],
    "b4_hq32kv8_n4096_d128_causal_bfloat16": [
        variant(128, 128, persistent=True, zigzag=True),
        # variant(192, 64, 3, persistent=True, zigzag=True),
    ],
}


#: fp8 kernel-only at bench_fp8's shapes (BENCHMARKS.md part F), V^T in FA3's key order (the op's P form).
FP8_CALL = {
    "2,32,8192,128": [variant(128, 128, fp8=True, ordered=o, poly=p) for o in (False, True) for p in (0, 2, 3, 4, 6)],
    "2,16,8192,256": [variant(128, 128, fp8=True, ordered=True, poly=p) for p in (0, 2, 3, 4)],
}

def _with(v, **constexprs):
    """``v`` with the kernel constexprs ``constexprs`` added to its variant."""
    return dataclasses.replace(v, extra=v.extra + tuple(constexprs.items()))


def _with_and_without_lazy(*variants):
    """Each variant without and with FA4's conditional rescaling (``LAZY_RESCALE``, given either way:
    the launcher's default turns it on at head_dim 256). The call of 2026-12-04c also timed a
    second form, one branch for the group by a reduction over its rows (1-5 % slower than the
    warp vote the kernel kept; raw docs/results/lazy-2026-12-04c)."""
    return [_with(v, LAZY_RESCALE=lazy) for v in variants for lazy in (False, True)]


#: (2026-12-04c) The accumulator rescaled only in blocks where a row's maximum moved (16-bit P: by
#: more than 2^8), at each suite workload's best Gluon tiles, and fp8 (lazy with no lag: the same
#: results) at 128 and 256 keys a block (256: 14 spilled words).
LAZY_CALL = {
    "b4_h32_n4096_d128_full_bfloat16": _with_and_without_lazy(
        variant(128, 128, persistent=True), variant(128, 128), variant(128, 128, persistent=True, poly=2)),
    "b4_h32_n4096_d128_causal_bfloat16": _with_and_without_lazy(
        variant(128, 128, persistent=True, zigzag=True, longest=True), variant(128, 128, longest=True)),
    "b16_h16_n1024_d64_full_bfloat16": _with_and_without_lazy(
        variant(128, 128, persistent=True), variant(128, 128, persistent=True, poly=2)),
    "b1_h32_n16384_d128_causal_bfloat16": _with_and_without_lazy(variant(128, 128, longest=True)),
    "b8_h16_n2048_d64_causal_bfloat16": _with_and_without_lazy(variant(128, 128, persistent=True, zigzag=True)),
    "b2_h16_n8192_d256_full_bfloat16": _with_and_without_lazy(variant(128, 64), variant(128, 64, ordered=True)),
    "b4_hq32kv8_n4096_d128_causal_bfloat16": _with_and_without_lazy(
        variant(128, 128, persistent=True, zigzag=True)),
    "2,32,8192,128": _with_and_without_lazy(
        variant(128, 128, fp8=True, poly=2), variant(128, 128, fp8=True, ordered=True),
        variant(128, 256, fp8=True)),
    "2,16,8192,256": _with_and_without_lazy(variant(128, 128, fp8=True, ordered=True)),
}


def _flagged(v, *flags):
    """``v`` with the kernel constexprs ``flags`` on."""
    return _with(v, **dict.fromkeys(flags, True))


#: The suite's (re-timed) best Gluon tile for each workload, and fp8's at D128 and D256: what each
#: probe of 2026-12-05 timed a kernel change on.
SUITE_BEST_GLUON = {
    "2,32,8192,128": variant(128, 128, fp8=True, poly=2),
    "2,16,8192,256": variant(128, 128, fp8=True, ordered=True),
    "b4_h32_n4096_d128_full_bfloat16": variant(128, 128, persistent=True, zigzag=True, longest=True),
    "b16_h16_n1024_d64_full_bfloat16": variant(128, 128, persistent=True, zigzag=True, longest=True, poly=2),
    "b2_h16_n8192_d256_full_bfloat16": variant(128, 64),
    "b4_h32_n4096_d128_causal_bfloat16": variant(128, 128, persistent=True, zigzag=True, ordered=True),
}


def _with_and_without(flag):
    """For each of the suite's best Gluon tiles: the kernel as it is, and with ``flag`` on."""
    return {w: [v, _flagged(v, flag)] for w, v in SUITE_BEST_GLUON.items()}


#: (2026-12-05; the flag left the kernel: ``git apply docs/results/overlap-2026-12-05/overlap-pv.patch`` first)
#: ``OVERLAP_PV``, a kernel constexpr: the sm90 SASS of every variant had the wait
#: for the previous block's PV product ahead of the block's exponentials (ptxas moves arithmetic
#: across the wait), so a group's softmax never ran under its own PV product. A store of P's row
#: sums to a scratch row of shared memory holds the wait below them (its first form, a K-stage
#: release after a reduction of the sums over the group, ran 4-11 % slower on an H100:
#: docs/results/overlap-2026-12-05/h100-release/). fp8 D128's ordered ping-pong too.
OVERLAP_CALL = _with_and_without("OVERLAP_PV")
OVERLAP_CALL["2,32,8192,128"] += [variant(128, 128, fp8=True, ordered=True),
                                  _flagged(variant(128, 128, fp8=True, ordered=True), "OVERLAP_PV")]


def _with_arrivals(v, counts=(0, 1, 2)):
    """``v`` with ``n`` extra mbarrier arrivals a block, for each ``n`` of ``counts``."""
    return [_with(v, EXTRA_ARRIVES=n) if n else v for n in counts]


#: (2026-12-05; ``git apply docs/results/barrier-2026-12-05/extra-arrivals.patch`` first) What one
#: warpgroup barrier a block costs: Triton 3.6 puts a ``bar.sync`` of the consumer warpgroup before
#: each mbarrier arrival (one thread arrives for the group), three a block (the K release, the V
#: release, the loop's top), and Nsight Compute has the barrier as the consumers' first stall
#: reason. ``EXTRA_ARRIVES`` adds arrivals (each with its barrier) on a barrier nobody waits for.
BARRIER_CALL = {
    "2,32,8192,128": _with_arrivals(SUITE_BEST_GLUON["2,32,8192,128"]),
    "b4_h32_n4096_d128_full_bfloat16": _with_arrivals(SUITE_BEST_GLUON["b4_h32_n4096_d128_full_bfloat16"], (0, 1)),
    "b2_h16_n8192_d256_full_bfloat16": _with_arrivals(SUITE_BEST_GLUON["b2_h16_n8192_d256_full_bfloat16"], (0, 1)),
}

#: (2026-12-05; ``git apply`` docs/results/treemax-2026-12-05/tree-max.patch, then chain-max.patch,
#: first) The row maxima as a tree over a thread's registers (the patched kernel) against Triton's
#: chain of dependent max instructions (``CHAIN_MAX``): Nsight Compute's sampling of fp8 D128 had
#: 21 % of the consumer loop's samples on FMNMX, most waiting on the previous one
#: (docs/results/ncu-source-2026-12-05/).
TREEMAX_CALL = _with_and_without("CHAIN_MAX")


#: (2026-12-05, 0.97x; ``git apply docs/results/three-groups-fp8/three-groups.patch`` first) fp8 D128 with three consumer warpgroups: Nsight Compute has the consumers' block loop
#: issuing its softmax from one warp a scheduler while the other group's warp waits on its GEMMs
#: (docs/results/ncu-source-2026-12-05/); three groups of 64 rows at 64-key blocks (the widest
#: that compiles without spills at FA3's 160 registers) put three warps a scheduler on half the
#: softmax each. Beside the current best and the two-group 64-key tile.
def three_fp8_call():
    """A function, not a table: the kernel takes three groups only with the patch applied."""
    return {"2,32,8192,128": [SUITE_BEST_GLUON["2,32,8192,128"], variant(128, 64, fp8=True, poly=2),
                              variant(192, 64, groups=3, fp8=True), variant(192, 64, groups=3, fp8=True, poly=2)]}


def _lagging(v, lag):
    """fp8 ``v`` rescaling lazily, a row's maximum allowed to lag by ``lag`` log2 units (``FP8_LAG``)."""
    return _with(v, LAZY_RESCALE=True, FP8_LAG=lag)


#: (2026-12-05, the day's fifth session; the flag left the kernel: ``git apply
#: docs/results/fp8-lag-2026-12-05/fp8-lag.patch`` first) fp8 with FA4's conditional rescaling given a lag: a block's
#: accumulator rescale is as many multiplies a thread as its scores at D128 (64 and 64), and with no
#: lag allowed (fp8's P stretched to 448) a warp still rescales in most blocks (0.97x, 2026-12-04c).
#: ``FP8_LAG`` stretches P by 448 / 2^lag instead, so a row's maximum may lag by ``lag``.
FP8_LAG_CALL = {
    "2,32,8192,128": [SUITE_BEST_GLUON["2,32,8192,128"]]
    + [_lagging(SUITE_BEST_GLUON["2,32,8192,128"], lag) for lag in (0, 1, 2, 3)]
    + [_lagging(variant(128, 128, fp8=True), 2), _lagging(variant(128, 128, fp8=True, ordered=True, poly=2), 2)],
    "2,16,8192,256": [SUITE_BEST_GLUON["2,16,8192,256"]]
    + [_lagging(SUITE_BEST_GLUON["2,16,8192,256"], lag) for lag in (0, 2)],
}


#: (2026-12-05, fifth session) fp8's tiles and ring depths the Gluon sweep never timed (its tables are
#: bf16): deeper K/V rings at fp8's best tiles, and 256-row programs (two groups of 128 rows, 64
#: keys a block; 2 spilled words on sm90) at D128.
FP8_TILES_CALL = {
    "2,32,8192,128": [SUITE_BEST_GLUON["2,32,8192,128"], variant(128, 128, fp8=True, poly=2, stages=3),
                      variant(128, 128, fp8=True, stages=3), variant(128, 64, fp8=True, poly=2, stages=4),
                      variant(256, 64, fp8=True, poly=2), variant(256, 64, fp8=True, poly=2, stages=3),
                      variant(256, 64, fp8=True)],
    "2,16,8192,256": [SUITE_BEST_GLUON["2,16,8192,256"], variant(128, 64, fp8=True, ordered=True, stages=3),
                      variant(128, 64, fp8=True, ordered=True, stages=4), variant(128, 64, fp8=True, stages=3)],
}


#: What a call times (``--plan``).
PLANS = {"first": FIRST_CALL, "fp8": FP8_CALL, "lazy": LAZY_CALL, "overlap": OVERLAP_CALL, "barrier": BARRIER_CALL,
         "treemax": TREEMAX_CALL, "three_fp8": three_fp8_call, "fp8_lag": FP8_LAG_CALL, "fp8_tiles": FP8_TILES_CALL}


def timed(workload, call):
    try:
        graph = tflops(workload, do_bench_cudagraph(call, rep=100))
    except Exception as exc:  # a peer that cannot be captured still gets its flushed reading
        print(f"   (cudagraph failed: {type(exc).__name__}: {str(exc)[:120]})")
        graph = 0.0
    flushed = tflops(workload, do_bench(call, warmup=25, rep=100, quantiles=[0.5]))
    return graph, flushed


def gluon_call(var, q, k, v, causal, scale, programs):
    """The variant's launch on this workload's inputs (fp8: quantized here, once) and its output."""
    out = torch.empty_like(q)
    if dict(var.extra).get("FP8"):
        q8, k8, vt, scales = quantize_fp8(q, k, v, v_order="fa3")
        return (lambda: launch_gluon(q8, k8, vt, out, causal=causal, scale=scale, variant=var, programs=programs,
                                     scales=scales)), out
    return (lambda: launch_gluon(q, k, v, out, causal=causal, scale=scale, variant=var, programs=programs)), out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--plan", action="append", choices=sorted(PLANS), required=True,
                        help="what to time (repeatable; some plans need their patch applied first: see each)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    calls = {key: PLANS[key]() if callable(PLANS[key]) else PLANS[key] for key in args.plan}
    plan = {name: variants for call in calls.values() for name, variants in call.items()}
    dev = torch.device("cuda")
    programs = persistent_programs(dev)
    rows = []
    for name, variants in plan.items():
        w = BY_NAME.get(name) or Workload.parse(name)
        q, k, v = make_inputs(w, seed=1234, dev=dev)
        scale = w.head_dim ** -0.5
        # The peers as bench_peers calls them, grouped-query K/V expanded once outside the call.
        calls = {"SDPA cuDNN": sdpa_call(SDPBackend.CUDNN_ATTENTION, q, k, v, w.causal),
                 "SDPA flash": sdpa_call(SDPBackend.FLASH_ATTENTION, q, k, v, w.causal)}
        reference = calls["SDPA cuDNN"]().float()
        checks = {}
        for var in variants:
            fp8 = bool(dict(var.extra).get("FP8"))
            label = var.label() + (" fp8" if fp8 else "")
            try:
                call, out = gluon_call(var, q, k, v, w.causal, scale, programs)
                call()
                torch.cuda.synchronize()
                err = (out.float() - reference).abs().max().item()
            except Exception as exc:
                print(f"{name} {label}: FAILED {type(exc).__name__}: {str(exc)[:200]}")
                continue
            checks[label] = err
            # bf16 against cuDNN: a few bf16 steps; fp8: its gate against float32 is 0.054-0.06.
            if not math.isfinite(err) or err > (0.15 if fp8 else 0.03):
                print(f"{name} {label}: WRONG, max |out - cuDNN| {err:.4f}; not timed")
                continue
            calls[label] = call
        readings = {label: [] for label in calls}
        for r in range(args.rounds):
            for label, call in calls.items():
                readings[label].append(timed(w, call))
                print(f"{name} round {r} {label:55s} graph {readings[label][-1][0]:6.1f} "
                      f"flush {readings[label][-1][1]:6.1f}", flush=True)
        for label, rs in readings.items():
            rows.append({"workload": name, "label": label, "graph": [x[0] for x in rs], "flush": [x[1] for x in rs],
                         "max_err_vs_cudnn": checks.get(label)})
        del q, k, v, calls
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("\nTFLOP/s, median of rounds: CUDA graph / flushed (x SDPA cuDNN's, by graph); max |out - cuDNN|")
    for name in plan:
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

"""Benchmark the best recorded configs against torch SDPA's cuDNN and flash backends.

Runs on a GPU (this script, not the tuner, touches CUDA directly). For each workload it
takes the top configs of a recorded sweep table, then times them and the peers
interleaved (A B C A B C ...), so that all figures of a row come from the same minutes
of the same card; ratios are what to compare (docs/reference.md). Prints a Markdown table.

    python -m flashtune.experiments.benchmarks.bench_peers --tables sweeps --rounds 5 --json peers.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import torch
from triton.testing import do_bench

from flashtune.kernels.attention import launch
from flashtune.kernels.space import validate_config
from flashtune.objectives.bench import make_inputs
from flashtune.objectives.peers import PEERS, sdpa_call
from flashtune.objectives.replay import load_table
from flashtune.objectives.types import SUITE, Workload

#: The peers (objectives.peers.PEERS) under the keys this script's JSON has always used.
_PEERS = {"sdpa_cudnn": PEERS["SDPA cuDNN"], "sdpa_flash": PEERS["SDPA flash"]}


def bench_workload(workload: Workload, configs: dict[str, list], rounds: int) -> dict[str, float]:
    """Median TFLOP/s of each named config list's members and of the peers, interleaved."""
    q, k, v = make_inputs(workload, seed=1234, dev=torch.device("cuda"))
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(workload.head_dim)
    fns = {}
    for label, group in configs.items():
        for i, config in enumerate(group):
            fns[f"{label}#{i}"] = (lambda c=config: launch(q, k, v, out, causal=workload.causal, scale=scale, config=c))
    for name, backend in _PEERS.items():
        fns[name] = sdpa_call(backend, q, k, v, workload.causal)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            try:
                samples[name].append(float(do_bench(fn, warmup=25, rep=100, return_mode="median")))
            except RuntimeError as exc:  # a backend that does not take this shape
                print(f"  {workload.name}: {name} unavailable: {str(exc).splitlines()[0]}")
                samples[name].append(math.inf)
    tflops = {}
    for name, ms in samples.items():
        med = statistics.median(ms)
        tflops[name] = workload.flops / (med * 1e-3) / 1e12 if math.isfinite(med) else 0.0
    return tflops


def _best(result: dict[str, float], label: str, group: list) -> tuple[float, dict | None]:
    names = [n for n in result if n.startswith(label + "#")]
    if not names:
        return 0.0, None
    best = max(names, key=result.get)
    return result[best], group[int(best.split("#")[1])].to_dict()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=Path, action="append", required=True,
                        help="folder of recorded sweep tables (repeatable: rows of one workload are merged)")
    parser.add_argument("--top", type=int, default=3, help="configs per workload to re-time")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only", action="append", default=[], help="workload names to run (default: the suite)")
    args = parser.parse_args(argv)
    results = []
    for workload in SUITE:
        if args.only and workload.name not in args.only:
            continue
        tables = [d / f"{workload.name}.jsonl" for d in args.tables if (d / f"{workload.name}.jsonl").exists()]
        if not tables:
            print(f"skip {workload.name}: no table")
            continue
        rows = [m for t in tables for m in load_table(t)]
        ok = sorted((m for m in rows if m.ok), key=lambda m: m.median_ms)
        configs = [validate_config(m.config) for m in ok]  # older tables omit knobs added since
        groups = {
            "bf16": [c for c in configs if not c["use_fp8"]][: args.top],
            "fp8": [c for c in configs if c["use_fp8"]][: args.top],
        }
        result = bench_workload(workload, groups, args.rounds)
        ours, config = _best(result, "bf16", groups["bf16"])
        fp8, fp8_config = _best(result, "fp8", groups["fp8"])
        results.append({"workload": workload.name, "flashtune": ours, "config": config, "fp8": fp8,
                        "fp8_config": fp8_config, **{n: result[n] for n in _PEERS}})
    print(f"\n{torch.cuda.get_device_name()} | torch {torch.__version__}")
    print("| workload | flashtune TFLOP/s | SDPA cuDNN | SDPA flash | vs cuDNN | vs flash | best config | fp8 | fp8 / bf16 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        vs = {n: (r["flashtune"] / r[n] if r[n] else math.nan) for n in _PEERS}
        fp8 = f"{r['fp8']:.0f} | {r['fp8'] / r['flashtune']:.2f}x" if r["fp8"] else "- | -"
        print(f"| {r['workload']} | {r['flashtune']:.0f} | {r['sdpa_cudnn']:.0f} | {r['sdpa_flash']:.0f} | "
              f"{vs['sdpa_cudnn']:.2f}x | {vs['sdpa_flash']:.2f}x | {r['config']} | {fp8} |")
        if r["fp8_config"]:
            print(f"|   fp8 config: {r['fp8_config']} |")
    ratios = [r["flashtune"] / r["sdpa_cudnn"] for r in results if r["sdpa_cudnn"]]
    if ratios:
        print(f"geometric mean vs cuDNN: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

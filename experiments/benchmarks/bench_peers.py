"""Benchmark the best recorded configs against torch SDPA's cuDNN and flash backends.

Runs on a GPU (this script, not the tuner, touches CUDA directly). For each workload it
takes the top configs of a recorded sweep table, then times them and the peers
interleaved (A B C A B C ...), so that all figures of a row come from the same minutes
of the same card; ratios are what to compare (docs/reference.md). Prints a Markdown table.

With ``--process-per-workload`` each workload is timed in a fresh process of its own (this
script with ``--only`` it), as the main job times one: in one process timing all seven suite
workloads, SDPA cuDNN read D128 full at 561-604 TFLOP/s where processes timing that workload
alone read 597-616, the Gluon kernel beside it unmoved (BENCHMARKS.md, 2026-12-04b).

    flashtune bench peers --tables sweeps --rounds 5 --json peers.json
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from flashtune.kernels.attention import launch, persistent_programs
from flashtune.kernels.gluon import BoundGluon
from flashtune.kernels.launch_plan import launch_plan
from flashtune.kernels.space import validate_config
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.peers import tflops, time_peers
from flashtune.objectives.precompile import CompilePool
from flashtune.objectives.replay import load_table
from flashtune.objectives.types import SUITE, Workload

#: This script, as ``python -m`` runs it (``--process-per-workload`` runs it again per workload).
_MODULE = "flashtune.experiments.benchmarks.bench_peers"
#: The peers (objectives.peers.PEERS) under the keys this script's JSON has always used.
_PEER_KEYS = {"sdpa_cudnn": "SDPA cuDNN", "sdpa_flash": "SDPA flash"}


def bench_workload(workload: Workload, configs: dict[str, list], rounds: int) -> tuple[dict[str, float], dict[str, str]]:
    """Median TFLOP/s of each named config list's members and of the peers (their fastest
    call form), interleaved (``objectives.peers.time_side_by_side``, as the main job times
    them); and the form each peer ran fastest in."""
    scale = 1.0 / math.sqrt(workload.head_dim)
    beside = {}
    for label, group in configs.items():
        for i, config in enumerate(group):
            beside[f"{label}#{i}"] = _config_call(workload, config, scale)
    peers, timed = time_peers(workload, torch.device("cuda"), rounds=rounds, beside=beside)
    for name, error in timed.errors.items():
        print(f"  {workload.name}: {name} unavailable: {error}")
    if timed.sm_clock_mhz:
        print(f"  {workload.name}: SM clock {timed.sm_clock_mhz[0]:.0f}-{timed.sm_clock_mhz[1]:.0f} MHz")
    result = {name: tflops(workload, timed.median_ms[name]) for name in beside}
    by_name = {p.name: p for p in peers}
    for key, name in _PEER_KEYS.items():
        result[key] = tflops(workload, by_name[name].median_ms)
    return result, {key: by_name[name].form for key, name in _PEER_KEYS.items()}


def _config_call(workload: Workload, config, scale: float):
    """The call a config is timed by: the launch the runtime's prepared call makes. A 16-bit
    Gluon config launches its compiled kernel bound (``BoundGluon``, as ``PreparedGluon``
    serves it); through the generic launcher its host path (154 us a call on the H200) nearly
    matched D64 full's 167 us kernel and that row read up to 25 % low in some processes
    (BENCHMARKS.md, 2026-12-04). The others launch through ``launch``, as their prepared calls do."""
    plan = launch_plan(config)

    def make(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        out = torch.empty_like(q)
        if plan.variant == "gluon" and not plan.constexprs["FP8"]:
            bound = BoundGluon(q, k, causal=workload.causal, scale=scale, config=config,
                               programs=persistent_programs(q.device))
            return lambda: bound(q, k, v, out)
        return lambda: launch(q, k, v, out, causal=workload.causal, scale=scale, config=config)

    return make


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def _precompile(groups: dict[Workload, dict[str, list]]) -> None:
    """Compile every workload's configs ahead in a pool of processes (Triton compiles one
    kernel at a time in this one); a config that does not compile is dropped, said so."""
    pool = CompilePool()
    for w, by_label in groups.items():
        for group in by_label.values():
            for c in group:
                pool.submit(c, w)
    for w, by_label in groups.items():
        for label, group in by_label.items():
            kept = []
            for c in group:
                error, _ = pool.wait(c, w) or ("", 0.0)
                if error:
                    print(f"  {w.name}: {c.to_dict()} does not compile, dropped: {error}")
                else:
                    kept.append(c)
            by_label[label] = kept
    pool.close()


def _each(result: dict[str, float], groups: dict[str, list], labels: tuple[str, ...]) -> dict[str, float]:
    """TFLOP/s of every config of the ``labels`` groups, by its config's JSON."""
    return {json.dumps(c.to_dict()): result[f"{label}#{i}"] for label in labels for i, c in enumerate(groups[label])}


def _best(result: dict[str, float], label: str, group: list) -> tuple[float, dict | None]:
    names = [n for n in result if n.startswith(label + "#")]
    if not names:
        return 0.0, None
    best = max(names, key=result.get)
    return result[best], group[int(best.split("#")[1])].to_dict()


def parser() -> argparse.ArgumentParser:
    """The command line (one place: a child of ``--process-per-workload`` parses what the parent wrote)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=Path, action="append", required=True,
                        help="folder of recorded sweep tables (repeatable: rows of one workload are merged)")
    parser.add_argument("--top", type=int, default=3, help="configs per workload to re-time")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only", action="append", default=[], help="workload names to run (default: the suite)")
    parser.add_argument("--also", type=json.loads, action="append", default=[], metavar="CONFIG_JSON",
                        help="a config (JSON, implied knobs filled in) to time on every workload it fits beside "
                             "the recorded bests (repeatable: new variants not in the tables)")
    parser.add_argument("--process-per-workload", action="store_true",
                        help="time each workload in a fresh process of its own (this script with --only it)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    also = [validate_config(c) for c in args.also]
    tables = {w: [d / f"{w.name}.jsonl" for d in args.tables if (d / f"{w.name}.jsonl").exists()]
              for w in SUITE if not args.only or w.name in args.only}
    for workload in [w for w, found in tables.items() if not found]:
        print(f"skip {workload.name}: no table")
        del tables[workload]
    if args.process_per_workload:
        # Nothing of CUDA in this process: each child has the GPU to itself.
        results = []
        for workload in tables:
            results.append(_time_in_own_process(args, workload))
            if args.json:  # the rows timed so far survive a run cut off by the device's time limit
                args.json.write_text(json.dumps(results, indent=2) + "\n")
    else:
        results = _time_here(_plan(tables, args.top, also), args.rounds)
    _report(results, also, args.json)
    return 0


def _plan(tables: dict[Workload, list[Path]], top: int, also: list) -> dict[Workload, dict[str, list]]:
    """Each workload's configs to time: its ``top`` recorded bests in 16 bits and in fp8, and the
    ``also`` configs that fit it."""
    hardware = HardwareSpec.from_device()
    plan: dict[Workload, dict[str, list]] = {}
    for workload, paths in tables.items():
        rows = [m for t in paths for m in load_table(t)]
        ok = sorted((m for m in rows if m.ok), key=lambda m: m.median_ms)
        configs = [validate_config(m.config) for m in ok]  # older tables omit knobs added since
        new = [c for c in also if check(c, workload, hardware).feasible]
        plan[workload] = {
            "bf16": [c for c in configs if not c["use_fp8"]][:top],
            "fp8": [c for c in configs if c["use_fp8"]][:top],
            "new": [c for c in new if not c["use_fp8"]],
            "new_fp8": [c for c in new if c["use_fp8"]],
        }
    return plan


def child_argv(args: argparse.Namespace, workload: Workload, json_path: Path) -> list[str]:
    """This script's arguments that time ``workload`` alone into ``json_path`` (``args`` parsed here)."""
    argv = [arg for table in args.tables for arg in ("--tables", str(table))]
    argv += ["--top", str(args.top), "--rounds", str(args.rounds), "--only", workload.name, "--json", str(json_path)]
    return argv + [arg for config in args.also for arg in ("--also", json.dumps(config))]


def _time_in_own_process(args: argparse.Namespace, workload: Workload) -> dict:
    """``workload``'s row, timed by a fresh process of this script (its output passed through)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "row.json"
        subprocess.run([sys.executable, "-m", _MODULE, *child_argv(args, workload, path)], check=True)
        (row,) = json.loads(path.read_text())
    return row


def _time_here(plan: dict[Workload, dict[str, list]], rounds: int) -> list[dict]:
    """Every workload's row, timed in this process."""
    _precompile(plan)
    results = []
    for workload, groups in plan.items():
        result, forms = bench_workload(workload, groups, rounds)
        recorded, recorded_config = _best(result, "bf16", groups["bf16"])
        newest, new_config = _best(result, "new", groups["new"])
        ours, config = max((recorded, recorded_config), (newest, new_config), key=lambda t: t[0])
        fp8, fp8_config = max(_best(result, "fp8", groups["fp8"]), _best(result, "new_fp8", groups["new_fp8"]),
                              key=lambda t: t[0])
        results.append({"workload": workload.name, "flashtune": ours, "config": config, "fp8": fp8,
                        "fp8_config": fp8_config, **{n: result[n] for n in _PEER_KEYS},
                        "peer_forms": forms, "recorded_best": recorded, "recorded_config": recorded_config,
                        "new_best": newest, "new_config": new_config,
                        "new_each": _each(result, groups, ("new", "new_fp8")),
                        # Every recorded top config re-timed in these rounds: what a table's single
                        # sweep reading becomes beside its rivals (the power cap moves single readings).
                        "recorded_each": _each(result, groups, ("bf16", "fp8"))})
    return results


def _report(results: list[dict], also: list, json_path: Path | None) -> None:
    """The Markdown tables of the rows, and the JSON file."""
    print(f"\n{torch.cuda.get_device_name()} | torch {torch.__version__}")
    print("| workload | flashtune TFLOP/s | SDPA cuDNN | SDPA flash | vs cuDNN | vs flash | best config | fp8 | fp8 / bf16 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        vs = {n: (r["flashtune"] / r[n] if r[n] else math.nan) for n in _PEER_KEYS}
        fp8 = f"{r['fp8']:.0f} | {r['fp8'] / r['flashtune']:.2f}x" if r["fp8"] else "- | -"
        print(f"| {r['workload']} | {r['flashtune']:.0f} | {r['sdpa_cudnn']:.0f} | {r['sdpa_flash']:.0f} | "
              f"{vs['sdpa_cudnn']:.2f}x | {vs['sdpa_flash']:.2f}x | {r['config']} | {fp8} |")
        if r["fp8_config"]:
            print(f"|   fp8 config: {r['fp8_config']} |")
        if "enable_gqa" in r["peer_forms"].values():
            print(f"|   peers' fastest GQA form: {r['peer_forms']} |")
    ratios = [r["flashtune"] / r["sdpa_cudnn"] for r in results if r["sdpa_cudnn"]]
    if ratios:
        print(f"geometric mean vs cuDNN: {_geomean(ratios):.3f}x")
    if also:
        print("\n| workload | recorded best | vs cuDNN | new variants' best | vs cuDNN | new config |")
        print("|---|---|---|---|---|---|")
        for r in results:
            cudnn = r["sdpa_cudnn"] or math.nan
            print(f"| {r['workload']} | {r['recorded_best']:.0f} | {r['recorded_best'] / cudnn:.2f}x | "
                  f"{r['new_best']:.0f} | {r['new_best'] / cudnn:.2f}x | {r['new_config']} |")
        for key in ("recorded_best", "new_best"):
            vs = [r[key] / r["sdpa_cudnn"] for r in results if r["sdpa_cudnn"] and r[key]]
            if vs:
                print(f"geometric mean vs cuDNN, {key.replace('_', ' ')}: {_geomean(vs):.3f}x")
    if json_path:
        json_path.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())

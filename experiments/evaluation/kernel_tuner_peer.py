"""Kernel Tuner's own strategies on the same recorded spaces: the same-run peer of ``compare``.

Each strategy runs in Kernel Tuner's simulation mode (``tune_kernel(..., simulation_mode=True,
cache=FILE)``: answers from the cache file, no GPU), restricted to the cache's own configs
(failures included: a failed config is an evaluation, as in ours), with Python's and
numpy's global generators seeded (Kernel Tuner's strategies draw from them). Evaluations
are counted the same way as ours: Kernel Tuner's ``max_fevals`` counts unique configs, and a
repeated config is answered from its results without counting (ours: from the loop's history).

    python -m flashtune.experiments.evaluation.kernel_tuner_peer --tables FILE... \\
        --seeds 5 --budget 50 --json docs/results/kernel-tuner-peer.json

Needs ``pip install kernel_tuner`` (1.5); reads only Kernel Tuner cache files.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flashtune.objectives.kernel_tuner_files import load_kernel_tuner, read_json, space_name

STRATEGIES = ("random_sample", "genetic_algorithm", "dual_annealing", "bayes_opt", "adaptive_tabu_greywolf",
              "simulated_annealing", "pso", "greedy_ils")
TOLERANCE = 0.02


def evals_to_within(path: Path, strategy: str, seed: int, budget: int) -> int | None:
    """Kernel Tuner's evaluations until a config within 2 % of the file's optimum (None: not in budget)."""
    from kernel_tuner import tune_kernel

    data = read_json(path)
    # The cache last: Kernel Tuner reads a cache file as text and closes it itself unless it
    # ends with the cache's closing braces (an "objective" key added after it broke that).
    data = {**{k: v for k, v in data.items() if k != "cache"}, "objective": data.get("objective", "time"),
            "cache": data["cache"]}
    recorded = load_kernel_tuner(path)  # checks the file, one line naming any problem
    optimum = min(m.median_ms for m in recorded.measurements if m.ok)
    keys = data["tune_params_keys"]
    members = set(data["cache"])

    def recorded_only(params: dict) -> bool:
        # A def, not a lambda: Kernel Tuner rewrites a lambda restriction from its source text.
        return ",".join(str(params[k]) for k in keys) in members

    with tempfile.TemporaryDirectory(prefix="flashtune-kt-") as tmp:
        cache = Path(tmp) / "cache.json"  # Kernel Tuner reads plain JSON caches
        cache.write_text(json.dumps(data))
        random.seed(seed)
        np.random.seed(seed)
        with contextlib.redirect_stdout(io.StringIO()):
            results, _ = tune_kernel(
                data.get("kernel_name", "kernel"), "__global__ void kernel() {}", data.get("problem_size", 1), [],
                data["tune_params"], restrictions=recorded_only,
                cache=str(cache), simulation_mode=True, strategy=strategy,
                strategy_options={"max_fevals": budget}, quiet=True, verbose=False)
    for number, result in enumerate(results[:budget], 1):
        value = result.get("time")
        if isinstance(value, (int, float)) and math.isfinite(value) and value <= optimum * (1 + TOLERANCE):
            return number
    return None


def run(paths: Sequence[Path], strategies: Sequence[str], seeds: int, budget: int) -> dict[str, Any]:
    report: dict[str, Any] = {"budget": budget, "seeds": seeds, "tolerance": TOLERANCE, "strategies": {}}
    for strategy in strategies:
        per_file: dict[str, Any] = {}
        started = time.perf_counter()
        for path in paths:
            hits = [evals_to_within(path, strategy, seed, budget) for seed in range(seeds)]
            per_file[space_name(path)] = {"evals_to_2pct": hits,
                                          "hit_rate": float(np.mean([h is not None for h in hits]))}
        report["strategies"][strategy] = {
            "hit_rate_2pct": float(np.mean([f["hit_rate"] for f in per_file.values()])),
            "seconds": time.perf_counter() - started, "spaces": per_file}
        # As each strategy ends: a long run (bayes_opt takes minutes a space) shows what it has.
        print(f"{strategy:>24s} hit rate {report['strategies'][strategy]['hit_rate_2pct']:.2f} "
              f"({report['strategies'][strategy]['seconds']:.0f} s)", file=sys.stderr, flush=True)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", type=Path, required=True, help="Kernel Tuner cache files")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    report = run(args.tables, [s.strip() for s in args.strategies.split(",") if s.strip()], args.seeds, args.budget)
    report["command"] = "python -m flashtune.experiments.evaluation.kernel_tuner_peer " + " ".join(
        ["--tables", *map(str, args.tables), "--strategies", args.strategies, "--seeds", str(args.seeds),
         "--budget", str(args.budget)])
    for name, entry in sorted(report["strategies"].items(), key=lambda kv: -kv[1]["hit_rate_2pct"]):
        print(f"{name:>24s} hit rate {entry['hit_rate_2pct']:.2f} ({entry['seconds']:.0f} s)")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

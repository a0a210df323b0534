"""Candidate search settings on the development set, judged leave one kernel out (issue 45).

    nice -n 10 python docs/lab/tools/loko_candidates.py --seeds 3 \\
        --json docs/results/loko-2026-12-06/candidates-3seeds.json
    # three more seeds, judged together with the first three:
    nice -n 10 python docs/lab/tools/loko_candidates.py --seeds 3 --first-seed 3 \\
        --add docs/results/loko-2026-12-06/candidates-3seeds.json --json .../candidates-6seeds.json

Each setting (a strategy and its options: the default, GP alone, TPE, scikit-optimize, and
the off-by-default options of GP and the portfolio, or the default's GP options switched off)
runs cold, budget 50, on every development space (``../shared/search-spaces/*.json.gz``);
its hit rate per space (runs within 2 % of the optimum in budget) goes into a table that
``flashtune.experiments.evaluation.loko`` judges: each kernel held out in turn, the setting
that wins on the others scored on it. Runs are ``flashtune compare``'s (``run_one``: the
strategy, the run loop and the replayed table).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from flashtune.experiments.cli.tune import DEFAULT_STRATEGY
from flashtune.experiments.evaluation.compare import RunResult, RunSpec, evals_to, init_worker, run_one
from flashtune.experiments.evaluation.landscape import build_landscape, group_by_workload, table_files
from flashtune.experiments.evaluation.loko import format_loko, kernel_of, loko
from flashtune.experiments.evaluation.replay_batch import job_count, run_all, write_report
from flashtune.objectives.hardware import load_spec

SPACES = Path(__file__).resolve().parents[3].parent / "shared" / "search-spaces"
#: label -> (strategy, options). The default first; then single strategies; then one option
#: changed at a time (off-by-default ones turned on, or a default's later additions turned off).
CANDIDATES: dict[str, tuple[str, dict[str, Any]]] = {
    DEFAULT_STRATEGY: (DEFAULT_STRATEGY, {}),
    "gp": ("gp", {}),
    "tpe": ("tpe", {}),
    "skopt": ("skopt", {}),
    "portfolio policy=lead": ("portfolio", {"policy": "lead"}),
    "portfolio policy=bandit": ("portfolio", {"policy": "bandit"}),
    # Optuna's own acquisition optimizer: 52 s a run on convolution (GP's candidates: about 4 s),
    # too slow for this set's budget; run it with --candidates to judge it.
    "gp acquisition=optuna": ("gp", {"acquisition": "optuna"}),
    "gp restart_steps=0": ("gp", {"restart_steps": 0}),
    "gp trust_repaired=false": ("gp", {"trust_repaired": False}),
    "gp trust_widen_after=0": ("gp", {"trust_widen_after": 0}),
    # The learned failure model (search/failure_model.py), off by default, and a looser rule.
    "portfolio failure_model=true": ("portfolio", {"failure_model": True}),
    "gp failure_model=true failure_confidence=0.75 failure_evidence=1":
        ("gp", {"failure_model": True, "failure_confidence": 0.75, "failure_evidence": 1}),
    # The cones alone: no record of the rule required, one live cone enough.
    "gp failure_model=true failure_confidence=0.01 failure_evidence=1":
        ("gp", {"failure_model": True, "failure_confidence": 0.01, "failure_evidence": 1}),
    # TPE does not keep to the best's neighbours as GP does, and measures more failures.
    "tpe failure_model=true": ("tpe", {"failure_model": True}),
}

#: Left out unless named in --candidates.
SLOW = ("gp acquisition=optuna",)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", type=Path, default=None,
                        help=f"Kernel Tuner spaces (default: {SPACES}/*.json.gz)")
    parser.add_argument("--candidates", default="", help=f"comma-separated labels from {list(CANDIDATES)} (default: all but {list(SLOW)})")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds run: first-seed .. first-seed + seeds - 1")
    parser.add_argument("--add", type=Path, default=None,
                        help="an earlier --json of other seeds (same budget): its runs join these in the table")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="write the table and the judgement here")
    args = parser.parse_args()
    labels = [s.strip() for s in args.candidates.split(",") if s.strip()] or [s for s in CANDIDATES if s not in SLOW]
    unknown = [s for s in labels if s not in CANDIDATES]
    if unknown:
        parser.error(f"unknown candidates {unknown}; known: {list(CANDIDATES)}")
    tables = args.tables or sorted(SPACES.glob("*.json.gz"))
    spec = load_spec("h200")
    groups = group_by_workload(table_files(tables))
    landscapes = [build_landscape(group, spec) for group in groups]
    by_key = {(CANDIDATES[s][0], tuple(sorted(CANDIDATES[s][1].items()))): s for s in labels}
    runs = [RunSpec(strategy, options, ls.name, seed, args.budget)
            for (strategy, options) in by_key for ls in landscapes
            for seed in range(args.first_seed, args.first_seed + args.seeds)]
    results: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    started = time.perf_counter()

    def record(result: RunResult) -> None:
        key = (by_key[(result.spec.strategy, result.spec.options)], result.spec.workload)
        results[key].append(result)
        if len(results[key]) == args.seeds:
            print(f"  {key[0]} on {key[1]}: {np.mean([r.seconds for r in results[key]]):.2f} s/run, "
                  f"{time.perf_counter() - started:.0f} s elapsed", file=sys.stderr, flush=True)

    run_all(runs, run_one, jobs=job_count(args.jobs), initializer=init_worker,
            initargs=([[str(p) for p in ls.paths] for ls in landscapes], "h200", False), record=record)
    evals = {s: {ls.name: sorted(evals_to(ls, results[(s, ls.name)], 0.02)) for ls in landscapes} for s in labels}
    # Evaluations spent on configs that failed (compile, run time): what a failure model saves.
    failed = {s: {ls.name: sorted(sum(not np.isfinite(c) for c in r.costs) for r in results[(s, ls.name)])
                  for ls in landscapes} for s in labels}
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    if args.add is not None:
        earlier = json.loads(args.add.read_text())
        earlier.setdefault("seed_list", list(range(earlier["seeds"])))  # a file written before --first-seed
        if earlier["budget"] != args.budget or set(earlier["seed_list"]) & set(seeds):
            parser.error(f"--add {args.add}: budget {earlier['budget']} / seeds {earlier['seed_list']} "
                         f"do not go with budget {args.budget} / seeds {seeds}")
        evals = {s: {w: sorted(c + earlier["evals_to_2pct"][s][w]) for w, c in per.items()} for s, per in evals.items()}
        if "failed_evaluations" in earlier:
            failed = {s: {w: sorted(c + earlier["failed_evaluations"][s][w]) for w, c in per.items()}
                      for s, per in failed.items()}
        seeds = sorted(seeds + earlier["seed_list"])
    table = {s: {w: float(np.mean([c <= args.budget for c in counts])) for w, counts in per.items()}
             for s, per in evals.items()}
    report = loko(table, DEFAULT_STRATEGY if DEFAULT_STRATEGY in table else None)
    command = "nice -n 10 python docs/lab/tools/loko_candidates.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    print(format_loko(report, title=f"LEAVE ONE KERNEL OUT (cold, budget {args.budget}, {len(seeds)} seeds)"))
    print("failed evaluations a run (mean over seeds): " + "; ".join(
        f"{s}: " + ", ".join(f"{w} {np.mean(c):.1f}" for w, c in per.items() if any(c)) for s, per in failed.items()))
    if args.json is not None:
        write_report(args.json, {
            "date": datetime.date.today().isoformat(), "command": command, "seeds": len(seeds), "seed_list": seeds,
            "budget": args.budget, "tolerance": 0.02, "default": DEFAULT_STRATEGY,
            "candidates": {s: {"strategy": CANDIDATES[s][0], "options": CANDIDATES[s][1]} for s in labels},
            "spaces": {ls.name: {"kernel": kernel_of(ls.name), "feasible": len(ls.feasible),
                                 "within_2pct": ls.within(0.02)} for ls in landscapes},
            "hit_rates": table, "evals_to_2pct": evals, "failed_evaluations": failed,
            "seconds": time.perf_counter() - started, "loko": report})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

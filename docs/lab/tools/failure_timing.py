"""When a search measures failing configs, and whether the failure model ever set one aside.

    nice -n 10 python docs/lab/tools/failure_timing.py --seeds 10 \\
        --json docs/results/failure-model-2026-12-06/failure-timing.json

Cold runs of ``portfolio failure_model=true`` (budget 50) on the development spaces that
record failures: for each run, the trials (0-based) whose config failed, how many of them
fell in the start design (the first ``n_startup`` trials, before a model proposes), the
failure model's trust at the end (``FailureModel.trust``) and the asks it set configs aside
for. Runs are ``flashtune compare``'s (``run_one``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from flashtune.experiments.evaluation.landscape import build_landscape
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.replay import ReplayObjective
from flashtune.search import make_strategy, run

SPACES = Path(__file__).resolve().parents[3].parent / "shared" / "search-spaces"
WITH_FAILURES = ("convolution_RTX_3090", "convolution_milo_A4000", "pnpoly_RTX_3090", "pnpoly_RTX_3090_T4")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report: dict[str, list[dict]] = {}
    for name in WITH_FAILURES:
        landscape = build_landscape(SPACES / f"{name}.json.gz", load_spec("h200"))
        for seed in range(args.seeds):
            strategy = make_strategy("portfolio", landscape.space, seed=seed, failure_model=True)
            objective = ReplayObjective(landscape.table.values(), noise=False, seed=seed)
            history = run(strategy, lambda config: objective.evaluate(config, landscape.workload),
                          max_trials=args.budget)
            lead = strategy.members[0]
            failed = [i for i, t in enumerate(history.trials) if not math.isfinite(t.cost_ms)]
            report.setdefault(name, []).append({
                "seed": seed, "failed_trials": failed, "in_start_design": sum(i < lead.n_startup for i in failed),
                "trust": lead.failure_model.trust(), "asks_with_aside": lead.asks_with_aside})
        runs = report[name]
        print(f"{name:24s} failed a run {np.mean([len(r['failed_trials']) for r in runs]):.1f}, in the start design "
              f"{np.mean([r['in_start_design'] for r in runs]):.1f}; trust at the end {np.mean([r['trust'] for r in runs]):.2f}; "
              f"runs where the model set configs aside {sum(r['asks_with_aside'] > 0 for r in runs)} of {len(runs)}")
    if args.json is not None:
        args.json.write_text(json.dumps({"budget": args.budget, "seeds": args.seeds, "spaces": report}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Time a warm start: each strategy told N priors of one source, until its first ask.

    python docs/lab/tools/warm_start_timing.py --priors 20000

A synthetic space of 100 x 200 configs, every config a prior with a seeded random time;
the time of ``warm_start`` plus the first ``ask`` (where strategies rank the priors).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from flashtune.objectives.types import Measurement, Status
from flashtune.search import SearchSpace, make_strategy, strategy_names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--priors", type=int, default=20000)
    args = parser.parse_args()
    b = max(args.priors // 100, 1)
    space = SearchSpace({"a": list(range(100)), "b": list(range(b))})
    rng = np.random.default_rng(0)
    priors = [Measurement(c, None, Status.OK, fingerprint="source", median_ms=float(rng.uniform(1, 2)))
              for c in space.feasible_configs()]
    for name in strategy_names():
        strategy = make_strategy(name, space, seed=0)
        started = time.perf_counter()
        strategy.warm_start(priors)
        strategy.ask()
        print(f"{name:>10s} {len(priors)} priors: {time.perf_counter() - started:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

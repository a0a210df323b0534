"""What `flashtune compare` and `flashtune transfer` share: many seeded replay runs in
worker processes, the --strategies and --jobs arguments, and the JSON report.

Each command keeps its own run spec, worker state and progress lines; this module only
runs them: in-process for one job, else in spawned processes (a clean interpreter each:
no forked thread pools or torch state), slow strategies first so the pool does not end
on a long tail of them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, TypeVar

from flashtune.search import strategy_names

Spec = TypeVar("Spec")
Result = TypeVar("Result")

#: Strategies whose runs cost seconds (a model refit per ask): scheduled first.
SLOW_STRATEGIES = ("gp", "skopt")


def select_strategies(text: str) -> list[str]:
    """``--strategies a,b``: registered names, in order, once each; empty means all.

    Raises:
        ValueError: an unknown name, listing the registered ones.
    """
    known = strategy_names()
    names = [n.strip() for n in text.split(",") if n.strip()] or known
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"--strategies: unknown {unknown}; registered: {known}")
    return list(dict.fromkeys(names))


def job_count(jobs: int | None) -> int:
    """``--jobs``: the CPU count when not given.

    Raises:
        ValueError: fewer than one.
    """
    count = jobs if jobs is not None else (os.cpu_count() or 1)
    if count < 1:
        raise ValueError(f"--jobs must be >= 1, got {count}")
    return count


def quiet_worker() -> Any:
    """Settings for a process that runs many short searches in parallel with others.

    Returns the thread-pool limit handle (keep it referenced while the process runs).
    """
    limits = None
    try:
        from threadpoolctl import threadpool_limits

        # Several runs in parallel: BLAS threads would only fight over the cores.
        limits = threadpool_limits(1)
    except ImportError:  # threadpoolctl comes with scikit-learn; without it, run as is
        pass
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return limits


def run_all(
    specs: Sequence[Spec],
    run_one: Callable[[Spec], Result],
    *,
    jobs: int,
    initializer: Callable[..., None],
    initargs: Iterable[Any],
    record: Callable[[Result], None],
) -> None:
    """Run every spec (each has a ``strategy`` name; ``run_one`` and ``initializer`` must be
    module-level: they are pickled for the workers), handing each result to ``record`` as
    it comes."""
    initargs = tuple(initargs)
    if jobs == 1:
        initializer(*initargs)
        for spec in specs:
            record(run_one(spec))
        return
    import multiprocessing

    order = sorted(specs, key=lambda spec: spec.strategy not in SLOW_STRATEGIES)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=initializer, initargs=initargs) as pool:
        for future in as_completed([pool.submit(run_one, spec) for spec in order]):
            record(future.result())


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Write ``report`` as JSON atomically (a killed run leaves the old file or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True, allow_nan=False) + "\n")
    tmp.replace(path)
    print(f"wrote {path}", file=sys.stderr)

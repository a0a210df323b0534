"""Trials per minute of one study run by 1 and by N workers (replay; PostgreSQL storage).

    python docs/lab/tools/bench_scale_out.py --trials 100 --workers 1 4 \\
        --postgres postgresql://flashtune:flashtune@127.0.0.1:5432/flashtune_test

Each run gets fresh Optuna and MLflow databases on the server (dropped afterwards) and
replays the recorded H200 table of the default workload. The rate is measured from the
first trial's start to the last trial's end as Optuna stored them, so the seconds a
worker spends importing MLflow before its first trial do not count; the wall time of the
whole command is printed beside it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence

DEFAULT_POSTGRES = "postgresql://flashtune:flashtune@127.0.0.1:5432/flashtune_test"


def measure(postgres: str, workers: int, trials: int, strategy: str) -> dict[str, float]:
    """One study of ``trials`` trials by ``workers`` workers: trials/min and wall seconds."""
    import optuna
    import psycopg2

    admin = psycopg2.connect(postgres)
    admin.autocommit = True
    base = postgres.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg2://", 1)
    names = [f"flashtune_bench_{kind}_{uuid.uuid4().hex[:8]}" for kind in ("optuna", "mlflow")]
    with admin.cursor() as cursor:
        for name in names:
            cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        storage, tracking = (f"{base}/{name}" for name in names)
        command = [sys.executable, "-m", "flashtune.experiments.cli.main", "tune", "--objective", "replay",
                   "--strategy", strategy, "--trials", str(trials), "--study-name", f"bench-{workers}",
                   "--storage", storage, "--tracking-uri", tracking, "--no-progress", "--workers", str(workers)]
        started = time.monotonic()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        wall = time.monotonic() - started
        study = optuna.load_study(study_name=f"NVIDIA H200/bench-{workers}", storage=storage)
        done = [t for t in study.get_trials(deepcopy=False) if "flashtune.measurement" in t.user_attrs]
        first = min(t.datetime_start for t in done)
        last = max(t.datetime_complete for t in done)
        span = (last - first).total_seconds()
        return {"workers": workers, "trials": len(done), "span_s": span, "wall_s": wall,
                "trials_per_min": len(done) / span * 60.0}
    finally:
        with admin.cursor() as cursor:
            for name in names:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server to make throw-away databases on")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--strategy", default="random")
    args = parser.parse_args(argv)
    print(f"{'workers':>7s} {'trials':>6s} {'span s':>8s} {'wall s':>8s} {'trials/min':>10s}")
    for workers in args.workers:
        r = measure(args.postgres, workers, args.trials, args.strategy)
        print(f"{r['workers']:7d} {r['trials']:6d} {r['span_s']:8.1f} {r['wall_s']:8.1f} {r['trials_per_min']:10.1f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

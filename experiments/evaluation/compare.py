"""``flashtune compare``: search strategies x seeds x workloads on recorded spaces.

Every run is the real thing, replayed: ``make_strategy`` + the run loop +
``ReplayObjective``, exactly as a study would run on the GPU, only the measurements come
from the table (Kernel Tuner's simulation mode). With no arguments it compares every
registered strategy on every table in ``experiments/data/h200``.

Reported per strategy and workload, over seeds:

- score: Kernel Tuner's methodology (``flashtune.experiments.evaluation.scoring``), the mean over
  seeds (the score of the mean curve, as Kernel Tuner averages repeats; random search's
  is then exactly 0 in expectation, where its median over seeds is not: one unlucky
  run costs more than a lucky one gains). The median and quartiles are reported too.
  A strategy's ``score`` is the mean of its per-workload scores.
- evals_to_2pct / evals_to_5pct: evaluations until the best so far is within 2 % / 5 %
  of the exhaustive optimum. A run that never gets there counts as budget + 1 (so
  medians stay finite); ``reached`` says which fraction of the runs got there.

Priors (``--priors loo``): each workload's search is told the other recorded workloads'
tables as ``source="prior"`` measurements before its first ask (leave one out).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flashtune.experiments import DATA_DIR
from flashtune.experiments.evaluation import scoring
from flashtune.experiments.evaluation.landscape import Landscape, build_landscape
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.replay import ReplayObjective
from flashtune.objectives.types import Measurement
from flashtune.experiments.evaluation.replay_batch import job_count, quiet_worker, run_all, select_strategies, write_report
from flashtune.search import make_strategy, run
from flashtune.search._base import check_options, option_defaults, option_value

DEFAULT_TABLES = DATA_DIR / "h200"
TOLERANCES = {"evals_to_2pct": 0.02, "evals_to_5pct": 0.05}
PRIOR_MODES = ("none", "loo")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run: a strategy with its options, on one workload, with one seed."""

    strategy: str
    options: tuple[tuple[str, Any], ...]
    workload: str
    seed: int
    budget: int


@dataclasses.dataclass(frozen=True)
class RunResult:
    spec: RunSpec
    costs: tuple[float, ...]  # ms per trial in order, inf for failures
    seconds: float


# -- the runs, in worker processes ----------------------------------------------------

_WORKER: dict[str, Any] = {}


def _init_worker(paths: Sequence[str], hardware: str, noise: bool, priors: str) -> None:
    """Load the tables once per process; keep numeric libraries to one thread each."""
    _WORKER["limits"] = quiet_worker()
    spec = load_spec(hardware)
    landscapes = {ls.name: ls for ls in (build_landscape(p, spec) for p in paths)}
    _WORKER.update(landscapes=landscapes, noise=noise, priors=priors)


def _run_one(spec: RunSpec) -> RunResult:
    landscapes: dict[str, Landscape] = _WORKER["landscapes"]
    landscape = landscapes[spec.workload]
    objective = ReplayObjective(landscape.table.values(), noise=_WORKER["noise"], seed=spec.seed)
    priors: list[Measurement] = []
    if _WORKER["priors"] == "loo":
        priors = [dataclasses.replace(m, source="prior")
                  for other in landscapes.values() if other.name != landscape.name for m in other.table.values()]
    strategy = make_strategy(spec.strategy, landscape.space, seed=spec.seed, **dict(spec.options))
    started = time.perf_counter()
    history = run(strategy, lambda config: objective.evaluate(config, landscape.workload),
                  max_trials=spec.budget, priors=priors)
    seconds = time.perf_counter() - started
    return RunResult(spec, tuple(t.cost_ms for t in history.trials), seconds)


# -- aggregation ------------------------------------------------------------------------


def run_curve(landscape: Landscape, result: RunResult) -> np.ndarray:
    """A run's best-so-far curve in ms (a run without trials: the space's worst)."""
    if not result.costs:
        return np.array([landscape.worst_ms])
    return scoring.best_so_far(result.costs, landscape.worst_ms)


def evals_to(landscape: Landscape, results: Sequence[RunResult], tolerance: float) -> list[int]:
    """Evaluations each run needed to come within ``tolerance``; budget + 1 if it never did."""
    counts = []
    for r in results:
        hit = scoring.evals_to_within(run_curve(landscape, r), landscape.optimum_ms, tolerance)
        counts.append(r.spec.budget + 1 if hit is None else hit)
    return counts


def summarize_runs(landscape: Landscape, results: Sequence[RunResult]) -> dict[str, Any]:
    """Scores and evaluations-to-target of one strategy's runs on one workload."""
    scores = [scoring.methodology_score(run_curve(landscape, r), landscape.random_curve, landscape.optimum_ms,
                                        landscape.score_budget) for r in results]
    summary: dict[str, Any] = {"score": scoring.spread(scores)}
    for key, tolerance in TOLERANCES.items():
        counts = evals_to(landscape, results, tolerance)
        reached = sum(c <= r.spec.budget for c, r in zip(counts, results))
        summary[key] = {**scoring.spread(counts), "reached": reached / len(results)}
    summary["seconds_per_run"] = float(np.mean([r.seconds for r in results]))
    summary["runs"] = len(results)
    return summary


def relative_curves(landscape: Landscape, results: Sequence[RunResult], length: int) -> np.ndarray:
    """Best so far / optimum for each run (rows), padded with the last value to ``length``."""
    rows = []
    for r in results:
        curve = run_curve(landscape, r)
        curve = np.concatenate([curve[:length], np.full(max(length - len(curve), 0), curve[-1])])
        rows.append(curve / landscape.optimum_ms)
    return np.array(rows)


def aggregate(landscapes: Sequence[Landscape], results: Sequence[RunResult], strategies: Sequence[str]) -> dict[str, Any]:
    """The JSON report: the schema of issue 3, plus per-workload detail.

    A strategy's ``score`` is the mean of its per-workload scores; its ``evals_to_*``
    spread pools the runs of every workload.
    """
    grouped: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    for r in results:
        grouped[(r.spec.strategy, r.spec.workload)].append(r)
    report: dict[str, Any] = {
        "space_size": max(ls.space.size for ls in landscapes),
        # One number for all workloads: the median of their feasible counts (each is below).
        "feasible": int(np.median([len(ls.feasible) for ls in landscapes])),
        "workloads": {ls.name: _landscape_summary(ls) for ls in landscapes},
        "strategies": {},
    }
    for name in strategies:
        per_workload = {ls.name: summarize_runs(ls, grouped[(name, ls.name)]) for ls in landscapes}
        entry: dict[str, Any] = {"score": float(np.mean([w["score"]["mean"] for w in per_workload.values()]))}
        for key, tolerance in TOLERANCES.items():
            entry[key] = scoring.spread([c for ls in landscapes for c in evals_to(ls, grouped[(name, ls.name)], tolerance)])
        entry["workloads"] = per_workload
        report["strategies"][name] = entry
    return report


def _landscape_summary(ls: Landscape) -> dict[str, Any]:
    return {
        "table": str(ls.path),
        "space_size": ls.space.size,
        "feasible": len(ls.feasible),
        "optimum_ms": ls.optimum_ms,
        "optimum_config": ls.optimum_config.to_dict(),
        "median_ms": ls.median_ms,
        "within_2pct": ls.within(0.02),
        "within_5pct": ls.within(0.05),
        "score_budget": ls.score_budget,
        "random_expected_evals_to_2pct": ls.random_evals_to_within(0.02),
        "random_expected_evals_to_5pct": ls.random_evals_to_within(0.05),
    }


# -- command line -----------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compare", help="compare search strategies on recorded spaces (replay)")
    p.add_argument("--tables", nargs="+", type=Path, default=None,
                   help=f"recorded tables (default: every *.jsonl in {DEFAULT_TABLES})")
    p.add_argument("--workloads", default="", help="comma-separated workload names (default: every table)")
    p.add_argument("--strategies", default="", help="comma-separated strategy names (default: every registered one)")
    p.add_argument("--seeds", type=int, default=20, help="seeds per strategy and workload (default: 20)")
    p.add_argument("--budget", type=int, default=None,
                   help="trials per run (default: the workload's feasible configs, the whole space)")
    p.add_argument("--priors", choices=PRIOR_MODES, default="none",
                   help="loo: tell each search the other workloads' tables as priors")
    p.add_argument("--noise", action="store_true", help="draw replayed times from the recorded 20/80 %% quantiles")
    p.add_argument("--option", action="append", default=[], metavar="STRATEGY.NAME=VALUE",
                   help="a strategy option (VALUE is JSON, else a string); repeatable")
    p.add_argument("--hardware", default="h200", help="spec for the feasibility model (default: h200)")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPU count)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for the curves (PNG), report.json and runs.jsonl (every run's trial costs)")
    p.add_argument("--json", type=Path, default=None, help="write the report as JSON to this file")
    p.set_defaults(func=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    if args.budget is not None and args.budget < 1:
        raise ValueError(f"--budget must be >= 1, got {args.budget}")
    paths = _table_paths(args.tables)
    spec = load_spec(args.hardware)
    landscapes = [build_landscape(p, spec) for p in paths]
    landscapes = _select_workloads(landscapes, args.workloads)
    strategies = select_strategies(args.strategies)
    options = _parse_options(args.option, strategies)
    runs = [RunSpec(name, tuple(sorted(options.get(name, {}).items())), ls.name, seed,
                    args.budget if args.budget is not None else len(ls.feasible))
            for ls in landscapes for name in strategies for seed in range(args.seeds)]
    results = _execute(runs, [str(ls.path) for ls in landscapes], args)
    report = aggregate(landscapes, results, strategies)
    report.update(
        date=datetime.date.today().isoformat(),
        command=_command_line(args, strategies, landscapes),
        seeds=args.seeds, budget=args.budget if args.budget is not None else "feasible",
        priors=args.priors, noise=args.noise, hardware=args.hardware, options=options,
    )
    if args.out is not None:
        from flashtune.experiments.evaluation.compare_plot import plot_curves

        args.out.mkdir(parents=True, exist_ok=True)
        for path in plot_curves(landscapes, results, strategies, args.out):
            print(f"wrote {path}", file=sys.stderr)
        write_report(args.out / "report.json", report)
        _write_runs(args.out / "runs.jsonl", results)
    if args.json is not None:
        write_report(args.json, report)
    print(format_table(report))
    return 0


def _execute(runs: Sequence[RunSpec], paths: Sequence[str], args: argparse.Namespace) -> list[RunResult]:
    """Run everything, in worker processes, printing progress per strategy and workload."""
    jobs = job_count(args.jobs)
    started = time.perf_counter()
    groups: dict[tuple[str, str], int] = defaultdict(int)
    for spec in runs:
        groups[(spec.strategy, spec.workload)] += 1
    done: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    results: list[RunResult] = []
    print(f"compare: {len(runs)} runs ({len(groups)} strategy x workload pairs) on {jobs} process(es)", file=sys.stderr)

    def record(result: RunResult) -> None:
        results.append(result)
        key = (result.spec.strategy, result.spec.workload)
        done[key].append(result)
        if len(done[key]) == groups[key]:
            elapsed = time.perf_counter() - started
            eta = elapsed / len(results) * (len(runs) - len(results))
            print(f"  [{len(results):5d}/{len(runs)}] {key[0]:>8s} on {key[1]}: {groups[key]} runs, "
                  f"{np.mean([r.seconds for r in done[key]]):.2f} s/run; {elapsed:.0f} s elapsed, ~{eta:.0f} s left",
                  file=sys.stderr, flush=True)

    run_all(runs, _run_one, jobs=jobs, initializer=_init_worker,
            initargs=(list(paths), args.hardware, args.noise, args.priors), record=record)
    return results


def _table_paths(tables: Sequence[Path] | None) -> list[Path]:
    paths = sorted(tables) if tables else sorted(DEFAULT_TABLES.glob("*.jsonl"))
    if not paths:
        raise ValueError(f"no recorded tables in {DEFAULT_TABLES}; record some with `flashtune sweep` or give --tables")
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(f"recorded table(s) not found: {missing}")
    return paths


def _select_workloads(landscapes: list[Landscape], text: str) -> list[Landscape]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        return landscapes
    by_name = {ls.name: ls for ls in landscapes} | {ls.path.stem: ls for ls in landscapes}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"--workloads: unknown {unknown}; recorded: {sorted(ls.name for ls in landscapes)}")
    return list(dict.fromkeys(by_name[n] for n in names))


def _parse_options(items: Sequence[str], strategies: Sequence[str]) -> dict[str, dict[str, Any]]:
    options: dict[str, dict[str, Any]] = defaultdict(dict)
    for item in items:
        key, sep, text = item.partition("=")
        strategy, dot, name = key.partition(".")
        if not sep or not dot or not name:
            raise ValueError(f"--option {item!r}: expected STRATEGY.NAME=VALUE")
        if strategy not in strategies:
            raise ValueError(f"--option {item!r}: strategy {strategy!r} is not compared ({list(strategies)})")
        options[strategy][name] = option_value(text)
    for strategy, values in options.items():
        # Fail now, naming the option, rather than in a worker process.
        try:
            check_options(strategy, option_defaults(strategy), values)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"--option: {exc}") from None
    return dict(options)


def _write_runs(path: Path, results: Sequence[RunResult]) -> None:
    """Every run's trial costs (ms, null for a failure), to re-plot or re-score without re-running."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w") as fh:
        for r in sorted(results, key=lambda r: (r.spec.workload, r.spec.strategy, r.spec.seed)):
            record = {**dataclasses.asdict(r.spec), "options": dict(r.spec.options), "seconds": r.seconds,
                      "costs_ms": [c if np.isfinite(c) else None for c in r.costs]}
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    tmp.replace(path)
    print(f"wrote {path}", file=sys.stderr)


def format_table(report: dict[str, Any]) -> str:
    """Score (median over seeds) and median evaluations to 2 % per strategy and workload."""
    workloads = list(report["workloads"])
    short = [_short(w) for w in workloads]
    width = max([12, *(len(s) for s in short)])
    lines = ["score (mean over seeds; 0 = random search, 1 = optimum at once) / evals to 2 % (median over seeds)"]
    header = f"{'strategy':>10s} " + " ".join(f"{s:>{width}s}" for s in short) + f" {'overall':>{width}s}"
    lines.append(header)
    lines.append(f"{'feasible':>10s} " + " ".join(f"{report['workloads'][w]['feasible']:>{width}d}" for w in workloads))
    lines.append(f"{'random E':>10s} " + " ".join(
        f"{'0.00 / ' + format(report['workloads'][w]['random_expected_evals_to_2pct'], '.0f'):>{width}s}" for w in workloads))
    for name, entry in report["strategies"].items():
        cells = []
        for w in workloads:
            detail = entry["workloads"][w]
            cells.append(f"{detail['score']['mean']:+.2f} / {detail['evals_to_2pct']['median']:.0f}")
        overall = f"{entry['score']:+.2f} / {entry['evals_to_2pct']['median']:.0f}"
        lines.append(f"{name:>10s} " + " ".join(f"{c:>{width}s}" for c in cells) + f" {overall:>{width}s}")
    return "\n".join(lines)


def _short(name: str) -> str:
    """``b4_h32_n4096_d128_causal_bfloat16`` -> ``b4_h32_n4096_d128_causal`` (dtype is bf16 throughout)."""
    return name.removesuffix("_bfloat16")


def _command_line(args: argparse.Namespace, strategies: Sequence[str], landscapes: Sequence[Landscape]) -> str:
    """The command that reproduces this report (explicit where a default was used)."""
    parts = ["flashtune", "compare", "--seeds", str(args.seeds)]
    if args.tables:
        parts += ["--tables", *map(str, args.tables)]
    if args.workloads:
        parts += ["--workloads", ",".join(ls.name for ls in landscapes)]
    if args.strategies:
        parts += ["--strategies", ",".join(strategies)]
    if args.budget is not None:
        parts += ["--budget", str(args.budget)]
    if args.priors != "none":
        parts += ["--priors", args.priors]
    if args.noise:
        parts.append("--noise")
    for item in args.option:
        parts += ["--option", item]
    if args.hardware != "h200":
        parts += ["--hardware", args.hardware]
    return " ".join(shlex.quote(p) for p in parts)

"""``flashtune compare``: search strategies x seeds x workloads on recorded spaces (replay); the report and curves."""

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

from flashtune.experiments.evaluation.compare import (
    DEFAULT_TABLES,
    PRIOR_MODES,
    RunResult,
    RunSpec,
    aggregate,
    evaluation_line,
    format_table,
    init_worker,
    run_one,
    same_run_peer,
    unchanged_by_priors,
)
from flashtune.experiments.evaluation.compare_plot import plot_curves
from flashtune.experiments.evaluation.landscape import Landscape, build_landscape, group_by_workload, table_files
from flashtune.experiments.evaluation.loko import hit_table, kernel_of, loko, peer_rows
from flashtune.experiments.evaluation.replay_batch import job_count, run_all, select_strategies, write_report
from flashtune.experiments.study.measurers import default_replay_dirs
from flashtune.objectives.hardware import HardwareSpec, load_spec
from flashtune.objectives.packed import packed_kernel
from flashtune.search import check_options, option_defaults, option_value

#: Trials per run on the default tables: `flashtune tune`'s default --trials.
DEFAULT_BUDGET = 50


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compare", help="compare search strategies on recorded spaces (replay)")
    p.add_argument("--tables", nargs="+", type=Path, default=None,
                   help="recorded tables or folders of them (default: the space `flashtune tune` replays for "
                        "--hardware, measurers.RECORDED_SPACE: the H200's 2,952-3,024 configs a workload); "
                        f"tables of one workload (parts of its space) are merged; {DEFAULT_TABLES} is the "
                        "120-config space BENCHMARKS' older comparisons ran")
    p.add_argument("--workloads", default="", help="comma-separated workload names (default: every table)")
    p.add_argument("--strategies", default="", help="comma-separated strategy names (default: every registered one)")
    p.add_argument("--seeds", type=int, default=20, help="seeds per strategy and workload (default: 20)")
    p.add_argument("--budget", type=int, default=None,
                   help=f"trials per run (default: {DEFAULT_BUDGET} on the default tables, as `flashtune tune`'s "
                        "default --trials; with --tables, the workload's feasible configs, the whole space)")
    p.add_argument("--priors", choices=PRIOR_MODES, default="loo",
                   help="loo (default): the cold comparison, then a held-out one (each search warm-started with "
                        "the other workloads' tables, never its own), in one report; none: the cold one only")
    p.add_argument("--noise", action="store_true", help="draw replayed times from the recorded 20/80 %% quantiles")
    p.add_argument("--option", action="append", default=[], metavar="STRATEGY.NAME=VALUE",
                   help="a strategy option (VALUE is JSON, else a string); repeatable")
    p.add_argument("--hardware", default="h200", help="spec for the feasibility model (default: h200)")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPU count)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for the curves (PNG), report.json and runs.jsonl (every run's trial costs)")
    p.add_argument("--json", type=Path, default=None, help="write the report as JSON to this file")
    p.add_argument("--kernel-tuner", default="", metavar="STRATEGIES",
                   help="comma-separated Kernel Tuner strategies to run in the same report, in its simulation "
                        "mode on the Kernel Tuner cache files among --tables (needs kernel_tuner and --budget; "
                        "default: none)")
    p.add_argument("--kernel-tuner-seeds", type=int, default=5, help="seeds per Kernel Tuner strategy (default: 5)")
    p.set_defaults(func=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    if args.budget is not None and args.budget < 1:
        raise ValueError(f"--budget must be >= 1, got {args.budget}")
    peer_strategies = [n.strip() for n in args.kernel_tuner.split(",") if n.strip()]
    if peer_strategies and args.budget is None:
        raise ValueError("--kernel-tuner needs --budget (Kernel Tuner's max_fevals)")
    if args.kernel_tuner_seeds < 1:
        raise ValueError(f"--kernel-tuner-seeds must be >= 1, got {args.kernel_tuner_seeds}")
    spec = load_spec(args.hardware)
    groups = _table_groups(args.tables, spec)
    if args.budget is None and not args.tables:
        # The recorded space holds 510-1,314 feasible configs a workload: a whole-space budget
        # there would run GP and skopt for hours (a portfolio run of 1,020 trials took over 5
        # minutes), where tune's budget keeps the default comparison about as long as the
        # 120-config one was (about 14.5 s per workload and seed for every strategy, both modes).
        args.budget = DEFAULT_BUDGET
    recorded = [build_landscape(group, spec) for group in groups]
    landscapes = _select_workloads(recorded, args.workloads)
    strategies = select_strategies(args.strategies)
    options = _parse_options(args.option, strategies)
    # Cold first, always: it compares the strategies. A priors mode adds the held-out
    # comparison after it, in the same report (where the priors place the optimum first,
    # the held-out table measures the priors, not the strategies).
    modes = ["none"] if args.priors == "none" else ["none", args.priors]
    runs = [RunSpec(name, tuple(sorted(options.get(name, {}).items())), ls.name, seed,
                    args.budget if args.budget is not None else len(ls.feasible), mode)
            for mode in modes for ls in landscapes for name in strategies for seed in range(args.seeds)]
    # Every recorded workload goes to the workers: the held-out priors of a selected
    # workload are all the others, selected or not.
    results = _execute(runs, [[str(p) for p in ls.paths] for ls in recorded], args)
    by_mode = {mode: [r for r in results if r.spec.priors == mode] for mode in modes}
    report = aggregate(landscapes, by_mode["none"], strategies)
    report.update(
        date=datetime.date.today().isoformat(),
        command=_command_line(args, strategies, landscapes),
        seeds=args.seeds, budget=args.budget if args.budget is not None else "feasible",
        priors=args.priors, evaluation=evaluation_line("none", options), noise=args.noise, hardware=args.hardware, options=options,
    )
    if args.priors != "none":
        report["held_out"] = {**aggregate(landscapes, by_mode[args.priors], strategies),
                              "priors": args.priors, "evaluation": evaluation_line(args.priors, options),
                              "same_as_cold": unchanged_by_priors(by_mode["none"], by_mode[args.priors])}
    if peer_strategies:
        report["kernel_tuner"] = same_run_peer(landscapes, report, peer_strategies, args.kernel_tuner_seeds,
                                               args.budget)
    report["loko"] = loko_report(landscapes, report)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        for mode in modes:
            label = "cold" if mode == "none" else "held out"
            for path in plot_curves(landscapes, by_mode[mode], strategies, args.out, label=label):
                print(f"wrote {path}", file=sys.stderr)
        write_report(args.out / "report.json", report)
        _write_runs(args.out / "runs.jsonl", results)
    if args.json is not None:
        write_report(args.json, report)
    print(format_table(report))
    return 0


def loko_report(landscapes: Sequence[Landscape], report: dict[str, Any]) -> dict[str, Any] | None:
    """Leave one kernel out over the cold comparison (``loko``), with Kernel Tuner's strategies
    of the same run as peers; None where the spaces are of fewer than two kernels (our own
    tables are all one kernel, the attention kernel)."""
    kernels = {ls.name: kernel_of(ls.name) if ls.workload is None else packed_kernel(ls.optimum_config) or "attention"
               for ls in landscapes}
    if len(set(kernels.values())) < 2 or not report["strategies"]:
        return None
    # The default of `flashtune tune`, imported here: the tune command pulls in the study's modules.
    from flashtune.experiments.cli.tune import DEFAULT_STRATEGY

    table = hit_table(report, [ls.name for ls in landscapes])
    result = loko(table, DEFAULT_STRATEGY if DEFAULT_STRATEGY in table else None, kernels=kernels)
    peer = report.get("kernel_tuner") or {}
    result["peers"] = peer_rows({f"KT {name}": {space: entry["hit_rate"] for space, entry in e["spaces"].items()}
                                 for name, e in peer.get("strategies", {}).items()}, result["kernels"])
    return result


def _execute(runs: Sequence[RunSpec], paths: Sequence[Sequence[str]], args: argparse.Namespace) -> list[RunResult]:
    """Run everything, in worker processes, printing progress per strategy and workload."""
    jobs = job_count(args.jobs)
    started = time.perf_counter()
    groups: dict[tuple[str, str, str], int] = defaultdict(int)
    for spec in runs:
        groups[(spec.strategy, spec.workload, spec.priors)] += 1
    done: dict[tuple[str, str, str], list[RunResult]] = defaultdict(list)
    results: list[RunResult] = []
    print(f"compare: {len(runs)} runs ({len(groups)} strategy x workload pairs) on {jobs} process(es)", file=sys.stderr)

    def record(result: RunResult) -> None:
        results.append(result)
        key = (result.spec.strategy, result.spec.workload, result.spec.priors)
        done[key].append(result)
        if len(done[key]) == groups[key]:
            elapsed = time.perf_counter() - started
            eta = elapsed / len(results) * (len(runs) - len(results))
            print(f"  [{len(results):5d}/{len(runs)}] {key[0]:>8s} on {key[1]} (priors {key[2]}): {groups[key]} runs, "
                  f"{np.mean([r.seconds for r in done[key]]):.2f} s/run; {elapsed:.0f} s elapsed, ~{eta:.0f} s left",
                  file=sys.stderr, flush=True)

    run_all(runs, run_one, jobs=jobs, initializer=init_worker,
            initargs=(list(paths), args.hardware, args.noise), record=record)
    return results


def _table_groups(tables: Sequence[Path] | None, spec: HardwareSpec) -> list[list[Path]]:
    """The tables of each workload: files and folders as given, else the GPU's recorded space
    as ``flashtune tune`` replays it (so that compare scores strategies on the space tune searches)."""
    if tables:
        return group_by_workload(table_files(tables))
    folders = [folder for folder in default_replay_dirs(spec) if sorted(folder.glob("*.jsonl"))]
    if not folders:
        raise ValueError(f"no recorded tables in {', '.join(map(str, default_replay_dirs(spec)))}; "
                         "record some with `flashtune sweep` or give --tables")
    return group_by_workload(table_files(folders))


def _select_workloads(landscapes: list[Landscape], text: str) -> list[Landscape]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        return landscapes
    by_name = {ls.name: ls for ls in landscapes} | {ls.path.stem: ls for ls in landscapes}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"--workloads: unknown {unknown}; recorded: {sorted(ls.name for ls in landscapes)}")
    chosen = {by_name[n].name: by_name[n] for n in names}  # by name: a Landscape is not hashable
    return list(chosen.values())


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
    """Every run's trial costs (ms, null for a failure) and recorded evaluation times (s), to
    re-plot or re-score without re-running."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w") as fh:
        for r in sorted(results, key=lambda r: (r.spec.workload, r.spec.strategy, r.spec.seed)):
            record = {**dataclasses.asdict(r.spec), "options": dict(r.spec.options), "seconds": r.seconds,
                      "costs_ms": [c if np.isfinite(c) else None for c in r.costs],
                      "eval_seconds": list(r.eval_seconds)}
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    tmp.replace(path)
    print(f"wrote {path}", file=sys.stderr)


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
    parts += ["--priors", args.priors]
    if args.noise:
        parts.append("--noise")
    for item in args.option:
        parts += ["--option", item]
    if args.hardware != "h200":
        parts += ["--hardware", args.hardware]
    if args.kernel_tuner:
        parts += ["--kernel-tuner", args.kernel_tuner, "--kernel-tuner-seeds", str(args.kernel_tuner_seeds)]
    return " ".join(shlex.quote(p) for p in parts)

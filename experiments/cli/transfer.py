"""``flashtune transfer``: what priors from another workload or GPU buy, measured on recorded spaces (replay)."""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from flashtune.experiments.evaluation.landscape import Landscape, build_landscape, table_files
from flashtune.experiments.evaluation.replay_batch import job_count, run_all, select_strategies, write_report
from flashtune.experiments.evaluation.transfer import (
    DEFAULT_PAIRS,
    DEFAULT_TABLES,
    SMALLER_SHARED_BYTES,
    STABLE_OPTIMUM,
    TARGET_RATIO,
    TOLERANCES,
    WORST_RATIO,
    Pair,
    RunResult,
    RunSpec,
    file_pair,
    format_table,
    gpu_pairs,
    init_worker,
    optimum_moves,
    run_one,
    smaller_spec,
    summarize,
    table_paths,
    target_spec,
)
from flashtune.experiments.evaluation.transfer_plot import plot_transfer
from flashtune.experiments.study.measurers import RECORDED_SPACE, default_replay_dirs
from flashtune.objectives.hardware import load_spec


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("transfer", help="measure what priors from another workload or GPU buy (replay)")
    p.add_argument("--tables", type=Path, default=DEFAULT_TABLES,
                   help=f"folder of recorded tables <workload>.jsonl (default: {DEFAULT_TABLES})")
    p.add_argument("--pairs", default="", help="comma-separated pair numbers (1-based, in the listed order; "
                                               "default: all; --list-pairs shows them)")
    p.add_argument("--list-pairs", action="store_true", help="print the pairs and exit")
    p.add_argument("--pair", nargs=2, action="append", default=[], metavar=("SOURCE", "TARGET"), type=Path,
                   help="a pair of recorded tables of one kernel as files (a *.jsonl table, or a Kernel Tuner "
                        "cache or T4 file: *.json, *.json.gz); repeatable; replaces the default pairs")
    p.add_argument("--gpu-pair", nargs=2, action="append", default=[], metavar=("SOURCE_GPU", "TARGET_GPU"),
                   help="one pair per workload both GPU models recorded (shipped specs with recorded spaces, "
                        "e.g. h200 h100): the source GPU's tables told as priors to the target GPU's search "
                        "(repeatable: h200 h100 --gpu-pair h100 h200 measures both ways; with --pair or "
                        "--stable-pairs, in one report beside those)")
    p.add_argument("--stable-pairs", type=Path, default=None, metavar="FOLDER",
                   help="every ordered pair of the tables in FOLDER (one kernel, one GPU or several) whose "
                        f"optimum moves at most {100 * (STABLE_OPTIMUM - 1):.0f} %% (the source's best within that "
                        "of the target's optimum, on the target); replaces the default pairs")
    p.add_argument("--budget", type=int, default=None,
                   help="most evaluations per run (default: the target's whole space)")
    p.add_argument("--strategies", default="", help="comma-separated strategy names (default: every registered one)")
    p.add_argument("--seeds", type=int, default=20, help="seeds per pair, strategy and arm (default: 20)")
    p.add_argument("--smaller-shared-bytes", type=int, default=SMALLER_SHARED_BYTES,
                   help=f"shared memory per block of the simulated smaller GPU (default: {SMALLER_SHARED_BYTES})")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPU count)")
    p.add_argument("--out", type=Path, default=None, help="folder for transfer.json and transfer.png")
    p.add_argument("--json", type=Path, default=None, help="write the report as JSON to this file")
    p.set_defaults(func=run_transfer)


def run_transfer(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    if args.list_pairs:
        for i, pair in enumerate(DEFAULT_PAIRS, 1):
            print(f"{i:2d}  {pair.kind:<22s} {pair.name}")
        return 0
    if args.budget is not None and args.budget < 1:
        raise ValueError(f"--budget must be >= 1, got {args.budget}")
    if sum(map(bool, (args.pair, args.pairs, args.stable_pairs))) > 1:
        raise ValueError("give one of --pair files, --pairs numbers or --stable-pairs FOLDER (and --gpu-pair with any)")
    if args.stable_pairs is not None:
        args.pair = _stable_pairs(args.stable_pairs)
    # GPU models' pairs beside other kernels' (Kernel Tuner files of two GPUs): one report.
    pairs = [p for source, target in args.gpu_pair for p in _gpu_pairs(source, target)]
    pairs += [file_pair(source, target) for source, target in args.pair]
    if not pairs or args.pairs:
        pairs += _select_pairs(args.pairs)
    strategies = select_strategies(args.strategies)
    tables = Path(args.tables)
    missing = sorted({str(path) for p in pairs for side in ("source", "target")
                      for path in table_paths(tables, p, side) if not path.exists()})
    if missing:
        raise FileNotFoundError(f"--tables {tables}: no recorded table(s) {missing}")
    landscapes = {p.landscape_key: build_landscape(table_paths(tables, p, "target"),
                                                   target_spec(p, args.smaller_shared_bytes)) for p in pairs}
    # Every source as recorded (on the H200, or its own GPU): how far its best moves on the
    # target (``optimum_moves``); built here, so a bad --pair file fails now, named, not in a worker.
    source_paths = {p: tuple(table_paths(tables, p, "source")) for p in pairs}
    sources: dict[tuple[Path, ...], Landscape] = {}
    for pair, paths in source_paths.items():
        if paths not in sources:
            sources[paths] = build_landscape(list(paths), load_spec(pair.source_gpu or "h200"))
    moves = {p: optimum_moves(sources[source_paths[p]], landscapes[p.landscape_key]) for p in pairs}
    runs = [RunSpec(pair, name, seed, priors) for pair in pairs for name in strategies
            for seed in range(args.seeds) for priors in (False, True)]
    results = _execute(runs, args)
    report = summarize(results, pairs, strategies, landscapes, moves)
    report.update(date=datetime.date.today().isoformat(), command=_command_line(args), seeds=args.seeds,
                  strategies=strategies, smaller_gpu=smaller_spec(args.smaller_shared_bytes).to_dict(),
                  tolerances=TOLERANCES,
                  target_ratio=TARGET_RATIO, worst_ratio=WORST_RATIO)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        print(f"wrote {plot_transfer(report, args.out / 'transfer.png')}", file=sys.stderr)
        write_report(args.out / "transfer.json", report)
    if args.json is not None:
        write_report(args.json, report)
    print(format_table(report))
    return 0


def _execute(runs: Sequence[RunSpec], args: argparse.Namespace) -> list[RunResult]:
    jobs = job_count(args.jobs)
    print(f"transfer: {len(runs)} runs on {jobs} process(es)", file=sys.stderr)
    started = time.perf_counter()
    results: list[RunResult] = []

    def record(result: RunResult) -> None:
        results.append(result)
        if len(results) % max(len(runs) // 20, 1) == 0 or len(results) == len(runs):
            elapsed = time.perf_counter() - started
            print(f"  [{len(results):5d}/{len(runs)}] {elapsed:.0f} s elapsed, "
                  f"~{elapsed / len(results) * (len(runs) - len(results)):.0f} s left", file=sys.stderr, flush=True)

    run_all(runs, run_one, jobs=jobs, initializer=init_worker,
            initargs=(str(args.tables), args.smaller_shared_bytes, args.budget), record=record)
    return results


def _gpu_pairs(source: str, target: str) -> list[Pair]:
    """``--gpu-pair SOURCE TARGET``: the pairs of the workloads both GPU models recorded."""
    folders = {gpu: [f for f in default_replay_dirs(load_spec(gpu)) if f.is_dir()] for gpu in (source, target)}
    for gpu, found in folders.items():
        if not found:
            raise ValueError(f"--gpu-pair: no recorded space shipped for {gpu} (RECORDED_SPACE names "
                             f"{', '.join(sorted(RECORDED_SPACE))})")
    pairs = gpu_pairs(source, target, folders)
    if not pairs:
        raise ValueError(f"--gpu-pair {source} {target}: the two GPUs recorded no workload in common")
    return pairs


def _stable_pairs(folder: Path) -> list[tuple[Path, Path]]:
    """The ordered pairs of ``folder``'s tables whose optimum moves at most ``STABLE_OPTIMUM``."""
    if not folder.is_dir():
        raise FileNotFoundError(f"--stable-pairs {folder}: not a folder of recorded tables")
    spec = load_spec("h200")
    files = table_files([folder])
    landscapes = {f: build_landscape(f, spec) for f in files}
    pairs = [(s, t) for s in files for t in files
             if s != t and optimum_moves(landscapes[s], landscapes[t]) <= STABLE_OPTIMUM]
    if not pairs:
        raise ValueError(f"--stable-pairs {folder}: no pair of its {len(files)} tables has an optimum that moves "
                         f"at most {100 * (STABLE_OPTIMUM - 1):.0f} %")
    return pairs


def _select_pairs(text: str) -> list[Pair]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        return list(DEFAULT_PAIRS)
    chosen = []
    for item in items:
        if not item.isdigit() or not 1 <= int(item) <= len(DEFAULT_PAIRS):
            raise ValueError(f"--pairs: {item!r} is not a pair number 1..{len(DEFAULT_PAIRS)} (see --list-pairs)")
        chosen.append(DEFAULT_PAIRS[int(item) - 1])
    return list(dict.fromkeys(chosen))


def _command_line(args: argparse.Namespace) -> str:
    parts = ["flashtune", "transfer", "--seeds", str(args.seeds)]
    if Path(args.tables) != DEFAULT_TABLES:
        parts += ["--tables", str(args.tables)]
    if args.pairs:
        parts += ["--pairs", args.pairs]
    if args.stable_pairs is not None:
        parts += ["--stable-pairs", str(args.stable_pairs)]
    else:
        for source, target in args.pair:
            parts += ["--pair", str(source), str(target)]
    for source, target in args.gpu_pair:
        parts += ["--gpu-pair", source, target]
    if args.budget is not None:
        parts += ["--budget", str(args.budget)]
    if args.strategies:
        parts += ["--strategies", args.strategies]
    if args.smaller_shared_bytes != SMALLER_SHARED_BYTES:
        parts += ["--smaller-shared-bytes", str(args.smaller_shared_bytes)]
    return " ".join(shlex.quote(p) for p in parts)

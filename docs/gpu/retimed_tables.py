"""bench_peers' re-timed configs as replay tables, to be replayed after the sweep's.

A sweep times each config once, in a short burst; on the power-capped H200 a burst after an
idle gap can run at a higher clock than its rivals did (docs/reference.md), so a table's best
single reading may be one the card does not repeat (D128 full's 677 TFLOP/s: its family reads
0.89-0.91 of it). ``bench_peers --json`` keeps every top recorded config it re-timed in
interleaved rounds (``recorded_each``); this writes those readings as one table per workload,
each row the config's sweep row (GPU, fingerprint, versions, resources) with the re-timed
time, so that a folder of them listed after the sweep folders (``--replay-dir``, or
``RECORDED_SPACE``) makes replay, and the tuner target's optimum, read what the H200 repeats::

    python docs/gpu/retimed_tables.py retime.json --out experiments/data/h200_retimed \\
        --tables experiments/data/h200_grown experiments/data/h200_lean experiments/data/h200_lean_order \\
        experiments/data/h200_gluon

A table already in ``--out`` keeps its rows of configs not re-timed this time. Per workload
it prints the re-timed best against the sweep's best, and how many configs that were not
re-timed still read faster than the re-timed best: single readings the re-timing did not
reach (re-time more of them, a larger ``--top``, before trusting the optimum).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from flashtune.experiments.evaluation.landscape import group_by_workload, table_files
from flashtune.kernels.config import Config
from flashtune.kernels.space import validate_config
from flashtune.objectives.replay import load_table, write_table
from flashtune.objectives.types import Measurement, Workload


@dataclass(frozen=True)
class Folded:
    """One workload's re-timed readings, as table rows, and what they change."""

    workload: Workload
    rows: tuple[Measurement, ...]  # the re-timed configs' rows
    skipped: tuple[str, ...]  # configs bench_peers did not time to a number (why, each)
    sweep_best_tflops: float  # the sweep tables' best reading
    retimed_best_tflops: float
    faster_not_retimed: int  # configs not re-timed whose sweep reading beats the re-timed best


def retimed_rows(result: Mapping, sweep: Sequence[Measurement]) -> Folded:
    """``result``: one workload's row of bench_peers' JSON; ``sweep``: its recorded rows (the
    tables bench_peers read, in order: a config recorded twice is its later row).

    Raises:
        ValueError: the result names no workload or a config no sweep row holds.
    """
    try:
        workload = Workload.parse(str(result["workload"]))
        readings = dict(result["recorded_each"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a bench_peers row with recorded_each ({type(exc).__name__}: {exc})") from None
    recorded: dict[Config, Measurement] = {}
    for row in sweep:
        recorded[validate_config(row.config)] = row
    rows, skipped = [], []
    for text, tflops in readings.items():
        config = validate_config(json.loads(text))
        if config not in recorded:
            raise ValueError(f"{workload.name}: re-timed config {text} is in no sweep table given")
        if not (isinstance(tflops, (int, float)) and math.isfinite(tflops) and tflops > 0):
            skipped.append(f"{text}: {tflops!r}")
            continue
        ms = workload.flops / (tflops * 1e12) * 1e3
        rows.append(dataclasses.replace(recorded[config], config=config, median_ms=ms, p20_ms=ms, p80_ms=ms,
                                        tflops=float(tflops), source="measured"))
    retimed = {r.config for r in rows}
    best = max((r.tflops for r in rows), default=0.0)
    ran = {c: m.tflops for c, m in recorded.items() if m.ok and math.isfinite(m.median_ms)}
    return Folded(workload, tuple(rows), tuple(skipped), max(ran.values(), default=0.0), best,
                  sum(1 for c, tflops in ran.items() if c not in retimed and tflops > best))


def write_folded(folded: Folded, out: Path) -> Path:
    """Write (or update) ``out/<workload>.jsonl``: this time's rows over the file's others."""
    path = out / f"{folded.workload.name}.jsonl"
    kept: dict[Config, Measurement] = {}
    if path.exists():
        kept = {validate_config(m.config): m for m in load_table(path)}
    kept.update({m.config: m for m in folded.rows})
    out.mkdir(parents=True, exist_ok=True)
    write_table(path, kept.values())
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("retimed", type=Path, help="bench_peers --json output")
    parser.add_argument("--tables", nargs="+", type=Path, required=True,
                        help="the tables or folders bench_peers read, in its order")
    parser.add_argument("--out", type=Path, required=True, help="folder of the re-timed tables")
    args = parser.parse_args(argv)
    results = json.loads(args.retimed.read_text())
    if not isinstance(results, list):
        raise ValueError(f"{args.retimed}: expected bench_peers' list of workload rows")
    sweeps: dict[Workload, list[Measurement]] = {}
    for group in group_by_workload(table_files(args.tables)):
        rows = [m for path in group for m in load_table(path)]
        sweeps[rows[0].workload] = rows
    print("| workload | sweep best TFLOP/s | re-timed best | configs re-timed | faster, not re-timed | file |")
    print("|---|---|---|---|---|---|")
    for result in results:
        workload = Workload.parse(str(result.get("workload", "")))
        if workload not in sweeps:
            raise ValueError(f"{workload.name}: no table among --tables {[str(t) for t in args.tables]}")
        folded = retimed_rows(result, sweeps[workload])
        path = write_folded(folded, args.out)
        print(f"| {workload.name} | {folded.sweep_best_tflops:.0f} | {folded.retimed_best_tflops:.0f} | "
              f"{len(folded.rows)} | {folded.faster_not_retimed} | {path} |")
        for why in folded.skipped:
            print(f"  not timed, left out: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

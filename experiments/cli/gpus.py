"""``flashtune gpus``: GPU models side by side from their MLflow experiments
(``flashtune.experiments.evaluation.gpu_compare``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flashtune.experiments.evaluation.gpu_compare import compare_gpus, format_cells, write_report
from flashtune.experiments.tracking.tracker import DEFAULT_TRACKING_URI, check_tracking_uri, sqlite_path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("gpus", help="GPU models side by side from their MLflow experiments (table and plot)")
    p.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI,
                   help=f"MLflow tracking URI holding the GPUs' studies (default: {DEFAULT_TRACKING_URI})")
    p.add_argument("--out", type=Path, default=None, help="folder for gpus.json and gpus.png")
    p.set_defaults(func=run_gpus)


def run_gpus(args: argparse.Namespace) -> int:
    db = sqlite_path(args.tracking_uri)
    if db is not None and not db.exists():
        raise ValueError(f"--tracking-uri {args.tracking_uri}: no such database ({db}); run `flashtune study GPU` first")
    check_tracking_uri(args.tracking_uri)
    cells = compare_gpus(args.tracking_uri)
    print(format_cells(cells))
    if args.out is not None:
        for path in write_report(cells, args.out):
            print(f"wrote {path}", file=sys.stderr)
    return 0

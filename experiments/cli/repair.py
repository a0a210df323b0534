"""``flashtune repair STORAGE``: make a damaged study file readable again; run it with the study stopped.

journal:PATH keeps every whole record, recovers a record glued after a cut, and sets the
damaged bytes aside beside the journal (PATH.damaged-<byte offset>).

sqlite:///PATH rebuilds the Optuna database: every trial SQLite still reads in it, and
every trial it lost from the study's MLflow child runs (--tracking-uri: the one the study
used); the damaged file is kept as PATH.damaged-<time>. A study whose name the cut took
is named with --study (the Optuna study name `tune` printed: GPU/study).
"""

from __future__ import annotations

import argparse
import sys

from flashtune.experiments.tracking.tracker import DEFAULT_TRACKING_URI


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("repair", help="repair a damaged study file (journal:PATH or sqlite:///PATH)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", metavar="STORAGE", help="the study's --storage: journal:PATH or sqlite:///PATH")
    parser.add_argument("--study", action="append", default=[], metavar="GPU/NAME",
                        help="sqlite: also rebuild this Optuna study (repeatable); those the file still names "
                             "are rebuilt anyway")
    parser.add_argument("--tracking-uri", default=None,
                        help=f"sqlite: the study's MLflow tracking URI (default: {DEFAULT_TRACKING_URI})")
    parser.set_defaults(func=run_repair)


def run_repair(args: argparse.Namespace) -> int:
    if args.target.startswith("journal:"):
        if args.study or args.tracking_uri:
            raise ValueError("repair journal:PATH: --study and --tracking-uri apply to sqlite:/// studies only")
        from flashtune.experiments.study.journal import repair  # imports optuna (about 1 s): not for --help
        from flashtune.experiments.study.storage import journal_path  # with the repair's own: not for --help

        path = journal_path(args.target)
        print(repair(path).summary(path), file=sys.stderr)
        return 0
    if args.target.startswith("sqlite:///"):
        from flashtune.experiments.study import sqlite_repair  # imports optuna and mlflow: not for --help

        done = sqlite_repair.repair(args.target, args.tracking_uri or DEFAULT_TRACKING_URI, args.study)
        print(done.summary(), file=sys.stderr)
        return 0
    raise ValueError(f"repair {args.target!r}: give the study's --storage as journal:PATH or sqlite:///PATH")

"""``flashtune repair journal:PATH``: make a damaged journal study readable again.

Keeps every whole record, recovers a record glued after a cut, and sets the damaged bytes
aside beside the journal (``PATH.damaged-<byte offset>``); run it with the study stopped.
"""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("repair", help="repair a damaged journal study file (journal:PATH)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", metavar="journal:PATH", help="the study's --storage journal:PATH")
    parser.set_defaults(func=run_repair)


def run_repair(args: argparse.Namespace) -> int:
    if not args.target.startswith("journal:"):
        raise ValueError(f"repair {args.target!r}: give the journal as journal:PATH (the study's --storage)")
    from flashtune.experiments.study.journal import repair  # imports optuna (about 1 s): not for --help

    path = args.target[len("journal:"):]
    path = path[2:] if path.startswith("//") else path
    print(repair(path).summary(path), file=sys.stderr)
    return 0

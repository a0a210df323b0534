"""``flashtune`` command line: one subcommand per module, each adding its own parser."""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import signal
import sys
from typing import Any

from flashtune.experiments.localhost import full_disk
from flashtune.experiments.study.signals import StudyInterrupted, raise_interrupted

# Each module defines ``add_parser(subparsers)`` and sets ``func`` on its parser.
_SUBCOMMAND_MODULES = (
    "flashtune.experiments.cli.sweep",
    "flashtune.experiments.cli.compare",
    "flashtune.experiments.cli.transfer",
    "flashtune.experiments.cli.gpus",
    "flashtune.experiments.cli.tune",
    "flashtune.experiments.cli.study",
    "flashtune.experiments.cli.export",
    "flashtune.experiments.cli.ui",
    "flashtune.experiments.cli.repair",
    "flashtune.experiments.cli.bench",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flashtune", description="Hardware-aware autotuner for Triton FlashAttention")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in _SUBCOMMAND_MODULES:
        try:
            importlib.import_module(module).add_parser(subparsers)
        except ImportError as exc:
            # A GPU box may lack the study's packages (mlflow, optuna): keep the other
            # subcommands working and say what is missing when this one is asked for.
            name = module.rsplit(".", 1)[-1]
            stub = subparsers.add_parser(name, help=f"unavailable: {exc}")
            stub.set_defaults(func=_missing(name, exc))
    _plain_help(parser)
    return parser


#: reST markup the modules' docstrings use (``literal``, :func:`name`, `interpreted`), which
#: ``--help`` would otherwise print raw: each is replaced by the text it marks.
_REST_MARKUP = re.compile(r"(?::[a-z]+:)?``?([^`]+?)``?")


def plain_text(text: str | None) -> str | None:
    """``text`` without reST markup: what ``--help`` shows a user."""
    return None if text is None else _REST_MARKUP.sub(r"\1", text)


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Strip reST markup from the descriptions and option helps of a parser and its subcommands."""
    parser.description = plain_text(parser.description)
    for action in parser._actions:
        action.help = plain_text(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain_text(choice.help)
            for sub in set(action.choices.values()):
                _plain_help(sub)


def _missing(name: str, exc: ImportError):
    def run(args: argparse.Namespace) -> int:
        print(f"flashtune {name}: needs a package that is not installed: {exc}", file=sys.stderr)
        return 2

    return run


#: Exit codes of a command stopped by a signal (the shell's 128 + signal number).
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM
#: Packages whose exceptions are a store's failure (a full disk, a damaged or locked
#: database), not a bug of ours: said in one line. Matched by module, so that none of
#: them is imported for ``flashtune --help``.
_STORE_PACKAGES = ("sqlite3", "sqlalchemy", "optuna", "mlflow", "psycopg", "psycopg2", "alembic")


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; whatever a user can cause or meet ends in one line and an exit code.

    Returns:
        The subcommand's code; 2 for an error it raised, 130 for Ctrl-C, 143 for SIGTERM.
    """
    # From the first instant: a SIGTERM during the imports below ends in a line, not -15.
    previous = signal.signal(signal.SIGTERM, raise_interrupted)
    # MLflow logs each database error with its chained tracebacks before raising it (a full
    # disk printed ten): the error it raises reaches the handler below and is said once. A
    # filter, not a level: MLflow's logging setup at import resets its loggers' levels.
    # SQLAlchemy's pool does the same when the rollback of a connection it takes back fails.
    for name in ("mlflow.store.db.utils", "sqlalchemy.pool"):
        logging.getLogger(name).addFilter(_quiet)
    # A finalizer failing on a full disk (also at exit, after main returns): a line, not a traceback.
    sys.unraisablehook = _unraisable_line
    command = "flashtune"  # until the subcommand is known
    try:
        args = build_parser().parse_args(argv)
        command = f"flashtune {args.command}"
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"{command}: stopped by Ctrl-C; what was written is kept (run it again to resume)",
              file=sys.stderr)
        return EXIT_SIGINT
    except StudyInterrupted:
        print(f"{command}: stopped by SIGTERM; what was written is kept (run it again to resume)",
              file=sys.stderr)
        return EXIT_SIGTERM
    except Exception as exc:
        room = full_disk(exc)
        # Said as what it is, whichever package raised it: Optuna blames "invalid data in
        # the commit", MLflow and SQLAlchemy name no file. Where the file is unknown, the
        # error's own words name it (the journal's, export's ``--to``) or nothing does.
        if room is not None and (room[0] is not None or not isinstance(exc, (ValueError, TypeError, OSError))):
            file, said = room
            where = f"{file}: the disk is full" if file else "the disk is full"
            print(f"{command}: error: {where} ({said}); what was written is kept: free space, then run the "
                  "same command again to resume", file=sys.stderr)
            return 2
        if isinstance(exc, (ValueError, TypeError, OSError)):
            # Bad input from the command line, or a file that cannot be read or written
            # (missing, unreadable, a folder): one clear line, not a traceback.
            print(f"{command}: error: {_without_sql(str(exc))}", file=sys.stderr)
            return 2
        if not _store_error(exc):  # a store's errors are many types; anything else is re-raised
            raise  # a bug: its traceback is what a report needs
        print(f"{command}: error: {_first_line(exc)}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)


def _quiet(record: logging.LogRecord) -> bool:
    return False


def _unraisable_line(unraisable: Any) -> None:
    if unraisable.exc_value is None:
        return
    print(f"flashtune: ignored while cleaning up: {_first_line(unraisable.exc_value)}", file=sys.stderr)


def _store_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is a storage package's exception."""
    for _ in range(20):  # a chain is short; never follow a cycle
        if exc is None:
            return False
        if any(cls.__module__.split(".")[0] in _STORE_PACKAGES for cls in type(exc).__mro__):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _first_line(exc: BaseException) -> str:
    """``Type: message`` in one line (SQLAlchemy appends the SQL and a link on lines after),
    with the root cause when there is one: Optuna's ``StorageInternalError`` says only "an
    exception is raised during the commit" when the disk is full."""
    def said(error: BaseException) -> str:
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"{type(error).__name__}: {text[:300]}"

    root, seen = exc, 0
    while (root.__cause__ or root.__context__) is not None and seen < 20:
        root, seen = root.__cause__ or root.__context__, seen + 1
    return said(exc) if root is exc else f"{said(exc)} (cause: {said(root)})"


#: Lines SQLAlchemy appends to a message (the statement, its parameters, a web link): noise
#: to a user whose disk is full, also when our own error quotes the message.
_SQL_DETAIL = ("[SQL:", "[parameters:", "(Background on this error")


def _without_sql(text: str) -> str:
    """``text`` up to SQLAlchemy's first detail line (the statement may span many lines)."""
    kept = []
    for line in text.splitlines():
        if line.lstrip().startswith(_SQL_DETAIL):
            break
        kept.append(line)
    return "\n".join(kept).strip()


if __name__ == "__main__":
    sys.exit(main())

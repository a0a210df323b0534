"""``flashtune`` command line: one subcommand per module, each adding its own parser."""

from __future__ import annotations

import argparse
import importlib
import re
import sys

# Each module defines ``add_parser(subparsers)`` and sets ``func`` on its parser.
_SUBCOMMAND_MODULES = (
    "flashtune.experiments.cli.sweep",
    "flashtune.experiments.cli.compare",
    "flashtune.experiments.cli.transfer",
    "flashtune.experiments.cli.tune",
    "flashtune.experiments.cli.study",
    "flashtune.experiments.cli.export",
    "flashtune.experiments.cli.ui",
    "flashtune.experiments.cli.repair",
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, OSError) as exc:
        # Bad input from the command line, or a file that cannot be read or written
        # (missing, unreadable, a folder): one clear line, not a traceback.
        print(f"flashtune {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Every subcommand's ``--help``: plain text (no reST markup) and, for tune, the strategies."""

from __future__ import annotations

import re

import pytest

from flashtune.experiments.cli.main import build_parser, main
from flashtune.search import strategy_names

_SUBCOMMANDS = sorted(next(a for a in build_parser()._actions if a.choices).choices)
#: ``literal``, :func:`x`-style roles and `interpreted` text: markup a terminal shows raw.
_MARKUP = re.compile(r"``|:[a-z]+:`|`[^`\s][^`]*`")


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", [None, *_SUBCOMMANDS])
def test_help_has_no_rest_markup(command, capsys) -> None:
    text = _help(([command] if command else []) + ["--help"], capsys)
    assert not _MARKUP.search(text), _MARKUP.findall(text)


def test_tune_help_lists_the_strategies_and_the_default(capsys) -> None:
    text = " ".join(_help(["tune", "--help"], capsys).split())
    for name in strategy_names():
        assert name in text
    assert "(default: portfolio)" in text and "portfolio" in strategy_names()


@pytest.mark.parametrize("command", [None, *_SUBCOMMANDS])
def test_help_speaks_to_users_not_to_the_repository(command, capsys) -> None:
    # Words that mean something only inside the project: issues, module paths.
    text = " ".join(_help(([command] if command else []) + ["--help"], capsys).split())
    assert not re.search(r"\bissue\b|\w+/\w+\.py\b", text), re.findall(r".{30}(?:\bissue\b|\w+/\w+\.py\b).{10}", text)

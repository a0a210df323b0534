"""``flashtune bench``: the names listed one a line, each benchmark's own ``--help``, an unknown
name said in one line with exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from flashtune.experiments.cli.bench import BENCHMARKS
from flashtune.experiments.cli.main import main

NAMES = ("peers", "decode", "generate", "serving", "online-serving", "host-time", "continuous-batching")


def test_bench_alone_lists_the_names_one_a_line(capsys) -> None:
    assert main(["bench"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in NAMES:
        (line,) = [line for line in lines if line.split()[:1] == [name]]
        assert len(line.split()) > 2, line  # the name and what it measures
    assert tuple(BENCHMARKS) == NAMES


def test_bench_peers_help_is_the_modules_own() -> None:
    # Through the installed entry point, as a user types it.
    done = subprocess.run([sys.executable, "-m", "flashtune.experiments.cli.main", "bench", "peers", "--help"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: flashtune bench peers ")
    assert "--tables" in done.stdout and "SDPA's cuDNN and flash" in " ".join(done.stdout.split())


@pytest.mark.parametrize("name", NAMES)
def test_each_benchmark_keeps_its_arguments(name, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", name, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: flashtune bench {name} ")


def test_arguments_after_the_name_reach_the_module(capsys) -> None:
    # bench_peers' own parser rejects a missing --tables: the error is the module's, exit 2.
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "peers", "--rounds", "2"])
    assert exit_.value.code == 2
    assert "flashtune bench peers: error: the following arguments are required: --tables" in capsys.readouterr().err


def test_an_unknown_name_is_named_with_exit_code_2(capsys) -> None:
    assert main(["bench", "nope", "--json", "x.json"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "flashtune bench: error: unknown benchmark 'nope'"
    assert all(name in err for name in NAMES)

"""``flashtune transfer``: its defaults apply the priors; any two tables of one kernel as a pair."""

from __future__ import annotations

import json
from pathlib import Path

from flashtune.experiments.cli.main import main

FOREIGN = Path(__file__).parents[3] / "experiments" / "data" / "foreign"


def test_the_default_pairs_apply_the_priors(tmp_path) -> None:
    # Pair 1 (4k -> 16k tokens, recorded H200 tables): the source's best is the target's, so
    # priors must find it at once. Before the fix every cell printed the same cold and warm.
    report_path = tmp_path / "transfer.json"
    assert main(["transfer", "--pairs", "1", "--strategies", "random", "--seeds", "2", "--jobs", "1",
                 "--json", str(report_path)]) == 0
    cell = json.loads(report_path.read_text())["pairs"][0]["strategies"]["random"]
    assert cell["priors_told"] > 0
    assert cell["prior_median"] < cell["cold_median"] / 3


def test_a_pair_of_kernel_tuner_caches_of_two_gpus(tmp_path, capsys) -> None:
    report_path = tmp_path / "transfer.json"
    source, target = FOREIGN / "gemm_RTX_2080_Ti.json.gz", FOREIGN / "gemm_RTX_3090.json.gz"
    assert main(["transfer", "--pair", str(source), str(target), "--strategies", "random", "--seeds", "2",
                 "--budget", "30", "--jobs", "1", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    pair = report["pairs"][0]
    assert pair["name"] == "gemm_RTX_2080_Ti -> gemm_RTX_3090" and pair["target_feasible"] == 1849
    cell = pair["strategies"]["random"]
    assert cell["priors_told"] == 1849 and cell["priors_dropped"] == 0
    assert 1 <= cell["prior_median"] <= 31 and "--pair" in report["command"]
    assert "gemm_RTX_2080_Ti -> gemm_RTX_3090" in capsys.readouterr().out


def test_a_missing_pair_file_is_named(tmp_path, capsys) -> None:
    assert main(["transfer", "--pair", str(tmp_path / "nowhere.json.gz"), str(FOREIGN / "gemm_RTX_3090.json.gz"),
                 "--seeds", "1", "--jobs", "1"]) != 0
    assert "nowhere.json.gz" in capsys.readouterr().err

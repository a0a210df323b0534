"""``flashtune transfer``: its defaults apply the priors; any two tables of one kernel as a pair."""

from __future__ import annotations

import json
from pathlib import Path

from flashtune.experiments.cli.main import main
from flashtune.experiments.evaluation.landscape import build_landscape
from flashtune.experiments.evaluation.transfer import STABLE_OPTIMUM, optimum_moves
from flashtune.objectives.hardware import load_spec

FOREIGN = Path(__file__).parents[3] / "experiments" / "data" / "foreign"
GROWN = Path(__file__).parents[3] / "experiments" / "data" / "h200_grown"


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
    # The 2080 Ti's best is 1.47x the 3090's optimum there: not a pair whose optimum stays.
    assert pair["source_best_on_target"] > STABLE_OPTIMUM
    assert report["target"]["stable_optimum"] == {"threshold": STABLE_OPTIMUM, "pairs": 0, "cells": 0, "met": 0}
    printed = capsys.readouterr().out
    assert "gemm_RTX_2080_Ti -> gemm_RTX_3090" in printed and "where the optimum moves at most 5 % (0 pair(s))" in printed


def test_how_far_the_optimum_moves_between_two_recorded_workloads() -> None:
    spec = load_spec("h200")
    d64_full = build_landscape(GROWN / "b16_h16_n1024_d64_full_bfloat16.jsonl", spec)
    d64_causal = build_landscape(GROWN / "b8_h16_n2048_d64_causal_bfloat16.jsonl", spec)
    assert optimum_moves(d64_causal, d64_causal) == 1.0
    # D64 full's best (128x64, 8 warps, 3 stages) is 3.3 % slower than D64 causal B8's optimum
    # (64x64, 4 warps) there, measured: a pair whose optimum moves less than 5 %.
    moved = optimum_moves(d64_full, d64_causal)
    assert moved == d64_causal.cost(d64_full.optimum_config) / d64_causal.optimum_ms
    assert 1.02 < moved < STABLE_OPTIMUM


def test_a_missing_pair_file_is_named(tmp_path, capsys) -> None:
    assert main(["transfer", "--pair", str(tmp_path / "nowhere.json.gz"), str(FOREIGN / "gemm_RTX_3090.json.gz"),
                 "--seeds", "1", "--jobs", "1"]) != 0
    assert "nowhere.json.gz" in capsys.readouterr().err


def test_stable_pairs_are_the_pairs_whose_optimum_moves_little(tmp_path, capsys) -> None:
    # Two D64 tables: each one's best is within 5 % of the other's optimum (3.3 % and 1.9 %).
    folder = tmp_path / "tables"
    folder.mkdir()
    for name in ("b16_h16_n1024_d64_full_bfloat16", "b8_h16_n2048_d64_causal_bfloat16"):
        (folder / f"{name}.jsonl").write_bytes((GROWN / f"{name}.jsonl").read_bytes())
    report_path = tmp_path / "transfer.json"
    assert main(["transfer", "--stable-pairs", str(folder), "--strategies", "random", "--seeds", "1",
                 "--budget", "5", "--jobs", "1", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert sorted(p["name"] for p in report["pairs"]) == ["b16_h16_n1024_d64_full -> b8_h16_n2048_d64_causal",
                                                          "b8_h16_n2048_d64_causal -> b16_h16_n1024_d64_full"]
    assert all(p["source_best_on_target"] <= STABLE_OPTIMUM for p in report["pairs"])
    assert report["target"]["stable_optimum"]["pairs"] == len(report["pairs"])
    assert "--stable-pairs" in report["command"]


def test_stable_pairs_needs_a_folder(tmp_path, capsys) -> None:
    assert main(["transfer", "--stable-pairs", str(tmp_path / "nowhere"), "--seeds", "1"]) != 0
    assert "nowhere" in capsys.readouterr().err


def test_priors_that_did_not_fit_part_of_the_target_cost_at_most_five_evaluations_over_cold(tmp_path) -> None:
    # Issue 21, lean D256 full -> D64 full B16: 32 of the 72 configs D64 admits did not fit
    # D256 (the 128x128 tiles with 2-3 stages, D64's optimum among them), and D256's best is
    # 3.7 % off there. With the priors counted as seen by the cover, the cover left out the
    # configs a cold start measures at once: 13.5 evaluations to 2 % with priors, 4.5 cold.
    lean = Path(__file__).parents[3] / "experiments" / "data" / "h200_lean"
    report_path = tmp_path / "transfer.json"
    assert main(["transfer", "--pair", str(lean / "b2_h16_n8192_d256_full_bfloat16.jsonl"),
                 str(lean / "b16_h16_n1024_d64_full_bfloat16.jsonl"), "--strategies", "portfolio",
                 "--seeds", "10", "--budget", "60", "--jobs", "1", "--json", str(report_path)]) == 0
    cell = json.loads(report_path.read_text())["pairs"][0]["strategies"]["portfolio"]
    assert cell["priors_told"] == 72
    assert cell["prior_median"] <= cell["cold_median"] + 5


def test_gpu_pairs_search_one_gpus_recorded_space_with_the_others_priors(tmp_path) -> None:
    # The H200's recorded space (five folders merged: those that recorded the workload) told to a search of the H100's (two
    # folders), searched on the H100's spec; and back. Each direction a pair per workload.
    report_path = tmp_path / "transfer.json"
    gemm = [str(FOREIGN / "gemm_RTX_2080_Ti.json.gz"), str(FOREIGN / "gemm_RTX_3090.json.gz")]
    assert main(["transfer", "--gpu-pair", "h200", "h100", "--gpu-pair", "h100", "h200", "--pair", *gemm,
                 "--strategies", "random", "--seeds", "1", "--budget", "20", "--jobs", "1",
                 "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    names = [p["name"] for p in report["pairs"]]
    # Beside another kernel's pair of GPUs, in one report.
    assert len(names) == 15 and names[-1] == "gemm_RTX_2080_Ti -> gemm_RTX_3090"
    assert "b4_h32_n4096_d128_full: h200 -> h100" in names
    assert "b4_h32_n4096_d128_full: h100 -> h200" in names and "--gpu-pair h100 h200" in report["command"]
    to_h100 = report["pairs"][names.index("b4_h32_n4096_d128_full: h200 -> h100")]
    assert to_h100["target_gpu"] == "h100"
    assert [Path(f).parent.name for f in to_h100["source_files"]] == ["h200_grown", "h200_lean", "h200_gluon",
                                                                      "h200_retimed"]  # no lean_order table
    assert [Path(f).parent.name for f in to_h100["target_files"]] == ["h100_sampled", "h100_retimed"]
    # The H200's best config is in the H100's recorded space: how far it moves is measured.
    assert 1.0 <= to_h100["source_best_on_target"] < 1.1
    assert to_h100["strategies"]["random"]["priors_told"] > 0


def test_a_gpu_pair_without_a_recorded_space_is_named(tmp_path, capsys) -> None:
    assert main(["transfer", "--gpu-pair", "h200", "a100", "--seeds", "1"]) == 2
    err = capsys.readouterr().err
    assert "no recorded space shipped for a100" in err and err.count("\n") == 1

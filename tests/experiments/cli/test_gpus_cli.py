"""``flashtune gpus``: GPU models side by side from their MLflow experiments."""

from __future__ import annotations

import json

import pytest

from flashtune.experiments.cli.main import main

WORKLOAD = "4,32,4096,128"  # D128 full: recorded on both the H200 and the H100


@pytest.mark.slow
def test_two_gpus_studies_side_by_side_with_each_others_best_here(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["--trials", "8", "--workload", WORKLOAD, "--tracking-uri", uri, "--no-progress",
              "--storage", f"sqlite:///{tmp_path / 'optuna.db'}"]
    assert main(["study", "h200", *common]) == 0
    # Warm-started from the H200's experiment: the H200's best is among the H100's first trials.
    assert main(["study", "h100", *common, "--prior-from", "mlflow-experiment:h200"]) == 0
    capsys.readouterr()
    assert main(["gpus", "--tracking-uri", uri, "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("b4_h32_n4096_d128_full ")]
    assert len(rows) == 2 and "NVIDIA H200's" in rows[0] and "NVIDIA H200 " in rows[1]
    cells = {c["gpu"]: c for c in json.loads((tmp_path / "out" / "gpus.json").read_text())}
    h100, h200 = cells["NVIDIA H100 80GB HBM3"], cells["NVIDIA H200"]
    moved = h100["others_best_here"]["NVIDIA H200"]
    assert moved is not None and 0.8 < moved <= 1.0  # the H200's best config, timed on the H100
    assert h100["sdpa_cudnn_tflops"] == pytest.approx(573.2) and h200["sdpa_cudnn_tflops"] == pytest.approx(567.8)
    assert h100["trials"] == h200["trials"] == 8
    assert (tmp_path / "out" / "gpus.png").stat().st_size > 10_000


def test_gpus_on_a_missing_database_is_one_line(tmp_path, capsys) -> None:
    assert main(["gpus", "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such database" in err and "flashtune study" in err

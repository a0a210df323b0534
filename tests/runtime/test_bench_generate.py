"""The generate benchmark end to end on the CPU interpreter (tiny Llama): decode steps go
through the op's decode path, no SDPA fallback, teacher-forced logits agree."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")


@pytest.mark.slow
def test_tiny_generate_runs_both_ways_and_agrees(tmp_path, capsys):
    from flashtune.experiments.benchmarks.bench_generate import main

    out = tmp_path / "generate.json"
    assert main(["--device", "cpu", "--dtype", "float16", "--batches", "2", "--prompts", "8", "--new-tokens", "4",
                 "--layers", "2", "--hidden", "128", "--heads", "4", "--kv-heads", "2", "--vocab", "256",
                 "--rounds", "1", "--json", str(out)]) == 0
    (case,) = json.loads(out.read_text())["cases"]
    assert case["fallback_warnings"] == [] and case["prepared_decode_keys"] >= 1
    assert case["teacher_forced"]["tuned_attention"]["max_abs"] < 1e-2  # fp16, two layers
    assert case["teacher_forced"]["eager"]["max_abs"] < 1e-2
    assert min(case["tokens_per_s"].values()) > 0
    assert "op/SDPA" in capsys.readouterr().out

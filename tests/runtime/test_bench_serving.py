"""bench_serving on the CPU (Triton interpreter, a tiny random Llama): one eager cell with
--profile writes both implementations' tokens/s, the kernel ran (no SDPA fallback), and the
profile of one generate per implementation lists its operators."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter run; the GPU runs docs/lab/gpu/s19.sh")


@pytest.mark.slow
def test_a_profiled_eager_cell_reports_both_implementations(tmp_path, monkeypatch):
    # The store is a fresh tmp one (conftest's isolated_default_store): default configs.
    from flashtune.experiments.benchmarks import bench_serving

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "serving.json"
    assert bench_serving.main(["--modes", "eager", "--batches", "2", "--prompts", "8", "--new-tokens", "2",
                               "--rounds", "1", "--layers", "1", "--hidden", "128", "--heads", "4", "--kv-heads", "2",
                               "--vocab", "97", "--profile", "--json", str(out)]) == 0
    (case,) = json.loads(out.read_text())["cases"]
    assert case["fallback"] == [] and set(case["tokens_per_s"]) == {"sdpa", case["attention"]}
    for impl in ("sdpa", case["attention"]):
        profile = case["profile"][impl]
        assert profile["wall_s"] > 0 and profile["self_cpu_top"]
        assert all(r["count"] >= 1 and r["self_cpu_us"] >= 0 for r in profile["self_cpu_top"])


@pytest.mark.slow
def test_one_implementation_alone_profiles_its_cell(tmp_path, monkeypatch):
    # --only: one implementation in the process (as a server runs one), its warm generate profiled.
    from flashtune.experiments.benchmarks import bench_serving

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "alone.json"
    assert bench_serving.main(["--only", "op", "--modes", "eager", "--batches", "2", "--prompts", "8",
                               "--new-tokens", "2", "--rounds", "1", "--layers", "1", "--hidden", "128", "--heads", "4",
                               "--kv-heads", "2", "--vocab", "97", "--json", str(out)]) == 0
    (case,) = json.loads(out.read_text())["cases"]
    assert case["fallback"] == [] and case["tokens_per_s"] > 0 and len(case["generate_s"]) == 1
    (profile,) = case["profile"].values()
    assert profile["self_cpu_top"] and profile["kernel_launches"] == 0  # no GPU: no device kernels

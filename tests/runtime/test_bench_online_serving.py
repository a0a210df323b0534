"""bench_online_serving on the CPU (Triton interpreter, fp32, a tiny random Llama): one round
of the forced re-tune inside a real generate swaps the candidate in and rolls it back within
the decode call after its probation, and no way of serving changes a token."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter run; the GPU runs docs/gpu/u19a.sh")


@pytest.mark.slow
def test_a_forced_retune_inside_generate_rolls_back_on_the_next_call_and_loses_no_token(monkeypatch):
    from flashtune.experiments.benchmarks import bench_generate, bench_online_serving
    from flashtune.runtime.integrations.hf_attention import register, set_attention

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    model = bench_generate.build_model(layers=1, hidden=128, heads=4, kv_heads=2, vocab=97, max_len=64,
                                       device=torch.device("cpu"), dtype=torch.float32)
    set_attention(model, register())
    # Prompt 33: every decode call (keys 34..63) falls in one kv_len bucket.
    ids = torch.randint(1, 97, (1, 33), generator=torch.Generator().manual_seed(0))
    result = bench_online_serving.one_round(model, ids, 30, drift_after=8, slow_factor=10.0)
    events = result["events"]
    assert events[:3] == ["degraded", "swap", "rollback"], events
    assert result["rollback_lag_calls"] == 0  # the call after the verdict's sample ran the incumbent
    assert torch.equal(result["attached"][0], result["plain"][0])
    assert torch.equal(result["retune"][0], result["plain"][0])  # fp32: the candidate's rounding changes no token

"""bench_online_serving on the CPU (Triton interpreter, fp32, a tiny random Llama): one round
of the forced re-tune inside a real generate swaps the candidate in and rolls it back within
the decode call after its probation, and no way of serving changes a token. The calls' time
is injected (constant before the bench's scaling), so that the verdicts are deterministic."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter run; the GPU runs docs/lab/gpu/u19a.sh")


@pytest.mark.slow
def test_a_forced_retune_inside_generate_rolls_back_on_the_next_call_and_loses_no_token(monkeypatch):
    from flashtune.experiments.benchmarks import bench_generate, bench_online_serving
    from flashtune.runtime.integrations.hf_attention import register, set_attention
    from flashtune.runtime.retuning.timing import InjectedTiming

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    model = bench_generate.build_model(layers=2, hidden=128, heads=4, kv_heads=2, vocab=97, max_len=64,
                                       device=torch.device("cpu"), dtype=torch.float32)
    set_attention(model, register())
    # Prompt 33: every decode call (keys 34..56) falls in one kv_len bucket.
    ids = torch.randint(1, 97, (1, 33), generator=torch.Generator().manual_seed(0))
    # Every call "takes" 1 ms before the bench's scaling: the verdicts do not hang on this box's load.
    constant = InjectedTiming(lambda config: 1.0)
    # 24 tokens, 2 layers: 46 decode calls; the re-tune starts near call 17, the rollback near 26.
    result = bench_online_serving.one_round(model, ids, 24, drift_after=8, slow_factor=4.0, real=constant)
    events = result["events"]
    assert events[:3] == ["degraded", "swap", "rollback"], events
    assert result["rollback_lag_calls"] == 0  # the call after the verdict's sample ran the incumbent
    assert result["decode_calls_timed"] == 46  # every decode call served and timed (23 steps x 2 layers)
    assert torch.equal(result["attached"][0], result["plain"][0])
    assert torch.equal(result["retune"][0], result["plain"][0])  # fp32: the candidate's rounding changes no token

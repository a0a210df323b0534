"""GPU check of the peers the main job prints (``pytest -m gpu``): SDPA's cuDNN and flash
backends time on a suite shape, and a GQA shape runs in both forms (enable_gqa, expanded)."""

import pytest
import torch

from flashtune.objectives import Workload
from flashtune.objectives.peers import PEERS, time_peers

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("shape", ["4,32,4096,128", "4,32/8,4096,128,causal"])
def test_both_peers_time_a_suite_shape(shape: str) -> None:
    workload = Workload.parse(shape)
    times, timed = time_peers(workload, torch.device("cuda"), rep_ms=20, rounds=1)
    assert [t.name for t in times] == list(PEERS)
    assert len(timed.median_ms) == len(PEERS) * (2 if workload.q_heads != workload.kv_heads else 1)
    for peer in times:
        assert peer.median_ms is not None and peer.error == "", peer
        # Above 1000 TFLOP/s would mean the peer did not run (the H200's bf16 peak is 989).
        assert workload.flops / (peer.median_ms * 1e-3) / 1e12 < 1000, peer

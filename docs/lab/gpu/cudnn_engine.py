"""Which cuDNN engine SDPA's cuDNN backend runs at D128 full (4 x 32 heads x 4096, bf16), one
process a run: with cuDNN's frontend log on (``CUDNN_FRONTEND_LOG_INFO=1``,
``CUDNN_FRONTEND_LOG_FILE``), a few calls and nothing timed, so that the plan each fresh
process picks can be compared where bench_peers' readings of it moved (561-616 TFLOP/s on
2026-12-04, BENCHMARKS.md).
    CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE=fe.log python3 docs/lab/gpu/cudnn_engine.py
"""

import torch
from torch.nn.attention import SDPBackend

from flashtune.objectives.bench import make_inputs
from flashtune.objectives.peers import sdpa_call
from flashtune.objectives.types import Workload

W = Workload.parse("b4_h32_n4096_d128_full_bfloat16")

if __name__ == "__main__":
    q, k, v = make_inputs(W, seed=1234, dev=torch.device("cuda"))
    call = sdpa_call(SDPBackend.CUDNN_ATTENTION, q, k, v, W.causal)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    print("cuDNN", torch.backends.cudnn.version(), "ran", W.name)

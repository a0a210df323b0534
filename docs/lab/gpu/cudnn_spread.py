"""Does SDPA cuDNN's reading at D128 full (4 x 32 heads x 4096, bf16) move between processes?
On 2026-12-04 (two sessions) bench_peers read it at 604, 561 and 573 TFLOP/s in three suite processes while
the Gluon kernel beside it read 632, 622 and 635. One fresh process a run: cuDNN and flash as
bench_peers times them (objectives.peers, 3 interleaved rounds of do_bench with the L2
flushed), with ``--after-ours`` the Gluon persistent 128x128 first (what bench_peers' process
has run before the peers).
    for i in 1 2 3; do python3 docs/lab/gpu/cudnn_spread.py; done; python3 docs/lab/gpu/cudnn_spread.py --after-ours
"""

import argparse
import json

import torch

from flashtune.kernels.attention import launch
from flashtune.kernels.space import validate_config
from flashtune.objectives.bench import make_inputs
from flashtune.objectives.peers import peer_calls, tflops, time_side_by_side
from flashtune.objectives.types import Workload

W = Workload.parse("b4_h32_n4096_d128_full_bfloat16")
OURS = validate_config({"loads": "gluon_pingpong", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2,
                        "grid": "persistent", "tile_order": "head_major"})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--after-ours", action="store_true")
    args = parser.parse_args()
    dev = torch.device("cuda")
    q, k, v = make_inputs(W, seed=1234, dev=dev)
    out = torch.empty_like(q)
    fns = dict(peer_calls(W, q, k, v))
    ours = {"ours": lambda: launch(q, k, v, out, causal=False, scale=W.head_dim ** -0.5, config=OURS)}
    if args.after_ours:
        fns = {**ours, **fns}
    first = time_side_by_side(fns, dev, rounds=3)
    again = time_side_by_side({**fns, **ours}, dev, rounds=3)
    row = {"after_ours": args.after_ours,
           "first": {n: round(tflops(W, ms)) for n, ms in first.median_ms.items()},
           "again_with_ours": {n: round(tflops(W, ms)) for n, ms in again.median_ms.items()},
           "clock": again.sm_clock_mhz}
    print(json.dumps(row))


if __name__ == "__main__":
    main()

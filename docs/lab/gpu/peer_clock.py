"""Issue 20's diagnosis, on a GPU: the main job's old SDPA line (each peer alone, one
``do_bench`` of 100 ms, expanded heads) against the same call timed beside other work,
with the SM clock read before and after each. Run it on an idle card and again after
minutes of load: the ratio of the two says whether the line differed by the clock.

    python3 docs/lab/gpu/peer_clock.py LABEL [--load-s 20]
"""

import argparse
import json
import time

import torch
from triton.testing import do_bench

from flashtune.objectives.bench import gpu_state, make_inputs
from flashtune.objectives.peers import PEERS, sdpa_call
from flashtune.objectives.types import Workload

parser = argparse.ArgumentParser()
parser.add_argument("label")
parser.add_argument("--load-s", type=float, default=0.0, help="seconds of back-to-back SDPA calls first")
args = parser.parse_args()
w = Workload.parse("4,32/8,4096,128,causal")
q, k, v = make_inputs(w, seed=1234, dev=torch.device("cuda"))
rows = []
for form in ("expanded", "enable_gqa"):
    fn = sdpa_call(PEERS["SDPA cuDNN"], q, k, v, True, form)
    fn()
    torch.cuda.synchronize()
    if args.load_s:
        end = time.time() + args.load_s
        while time.time() < end:
            for _ in range(50):
                fn()
            torch.cuda.synchronize()
    before = gpu_state()[0]
    ms = do_bench(fn, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
    after = gpu_state()[0]
    rows.append(dict(label=args.label, form=form, load_s=args.load_s, median_ms=ms[0], p20_ms=ms[1], p80_ms=ms[2],
                     sm_clock_before=before, sm_clock_after=after))
    print(json.dumps(rows[-1]), flush=True)

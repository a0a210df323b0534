"""Issue 44 item 3, 2026-12-07: where the one-loop kernel's non-finite outputs come from (lab probe).

The H200 (2026-12-02) read non-finite outputs from ``loads="lean_ws_oneloop"`` at 128x64 with 3
and 4 K/V stages on 8,192 keys, where 2 stages matched; the configs are fenced since
(``kernels.resources.known_failure``), cause unknown. This probe launches them anyway, through
the kernel's own launcher (``kernels.attention.launch`` does not read the fence), and asks:

1. scan: which ring depths, tiles and key lengths (1k-16k, one query tile against 8k keys,
   causal) give non-finite values; where they sit (query rows, heads, 128-row tiles); whether
   a repeat gives the same count (a race varies, a wrong schedule repeats); the finite part's
   error against float32;
2. sanitize: compute-sanitizer's racecheck, synccheck and memcheck on one small failing case
   (one head, one 128-row tile, 8,192 keys), the first findings printed.

    python docs/lab/gpu/oneloop_probe.py [--budget-s S]    -> $OUT/oneloop.jsonl, oneloop.txt
    python docs/lab/gpu/oneloop_probe.py --child JSON      (the process the sanitizer watches)
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

import torch

from flashtune.kernels.attention import launch
from flashtune.kernels.reference import reference_attention
from flashtune.kernels.space import validate_config

OUT = os.environ.get("OUT", "/tmp/out")
SAN = "/usr/local/cuda/bin/compute-sanitizer"
BASE = {"grid": "tiles", "kernel": "prefill", "loads": "lean_ws_oneloop", "num_warps": 4,
        "tile_order": "longest_first", "use_fp8": False}


def config(block_n, stages, fp8=False, block_m=128):
    return validate_config({**BASE, "BLOCK_M": block_m, "BLOCK_N": block_n, "num_stages": stages, "use_fp8": fp8})


def run_case(cfg, heads, q_len, kv_len, causal, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(1, heads, q_len, 128, generator=gen, device="cuda").bfloat16()
    k = torch.randn(1, heads, kv_len, 128, generator=gen, device="cuda").bfloat16()
    v = torch.randn(1, heads, kv_len, 128, generator=gen, device="cuda").bfloat16()
    out = torch.full_like(q, float("nan"))
    launch(q, k, v, out, causal=causal, scale=1 / math.sqrt(128), config=cfg)
    torch.cuda.synchronize()
    return q, k, v, out


def describe(cfg, heads, q_len, kv_len, causal):
    q, k, v, out = run_case(cfg, heads, q_len, kv_len, causal)
    bad = ~torch.isfinite(out.float())
    counts = [int(bad.sum())]
    for _ in range(2):  # repeats on the same inputs: a race varies, a wrong schedule repeats
        again = torch.full_like(out, float("nan"))
        launch(q, k, v, again, causal=causal, scale=1 / math.sqrt(128), config=cfg)
        torch.cuda.synchronize()
        counts.append(int((~torch.isfinite(again.float())).sum()))
    rows = bad.any(-1)[0]  # (heads, q_len)
    bad_rows = rows.nonzero()
    ref = reference_attention(q, k, v, causal=causal)
    good = ~rows.unsqueeze(0).unsqueeze(-1).expand_as(out)
    err = (torch.linalg.vector_norm((out.float() - ref)[good]) / torch.linalg.vector_norm(ref[good])).item()
    record = {"BLOCK_N": cfg["BLOCK_N"], "stages": cfg["num_stages"], "fp8": cfg["use_fp8"], "heads": heads,
              "q_len": q_len, "kv_len": kv_len, "causal": causal, "nonfinite": counts,
              "bad_rows": int(rows.sum()), "bad_heads": sorted({int(h) for h in bad_rows[:, 0].tolist()})[:16],
              "bad_tiles": sorted({int(r) // 128 for r in bad_rows[:, 1].tolist()})[:16],
              "first_bad_row": int(bad_rows[0, 1]) if len(bad_rows) else None,
              "finite_rel_error": err,
              "nan": int(torch.isnan(out.float()).sum()), "inf": int(torch.isinf(out.float()).sum())}
    return record


def scan(say, deadline):
    plan = []
    for bn, st in ((64, 2), (64, 3), (64, 4), (128, 2), (128, 3)):
        for kv in (1024, 2048, 4096, 8192, 16384):
            plan.append((config(bn, st), 8, kv, kv, False))
        plan.append((config(bn, st), 8, 128, 8192, False))  # one query tile, 8k keys
        plan.append((config(bn, st), 8, 8192, 8192, True))
    plan.append((config(128, 3, fp8=True), 8, 8192, 8192, False))
    with open(f"{OUT}/oneloop.jsonl", "a") as f:
        for cfg, heads, nq, nk, causal in plan:
            if time.monotonic() > deadline:
                say("scan: out of time")
                return
            try:
                record = describe(cfg, heads, nq, nk, causal)
            except Exception as exc:  # a launch failure is a finding too
                record = {"BLOCK_N": cfg["BLOCK_N"], "stages": cfg["num_stages"], "q_len": nq, "kv_len": nk,
                          "causal": causal, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            f.write(json.dumps(record) + "\n")
            f.flush()
            say(" ".join(f"{k}={v}" for k, v in record.items()))


def sanitize(say, tools, case):
    for tool in tools:
        child = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(case)]
        started = time.monotonic()
        try:
            out = subprocess.run([SAN, "--tool", tool, "--print-limit", "6", *child], capture_output=True, text=True,
                                 env={**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, timeout=150)
            text = out.stdout + out.stderr
        except subprocess.TimeoutExpired:
            text = "timeout after 150 s"
        summary = re.search(r"ERROR SUMMARY: (\d+) error", text)
        say(f"{tool} {case}: {summary[1] if summary else '?'} errors ({time.monotonic() - started:.0f} s)")
        lines = [t for t in text.splitlines() if t.strip() and "Saved host backtrace" not in t and "=========     " not in t]
        say("\n".join(lines[:40]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", default=None)
    parser.add_argument("--budget-s", type=float, default=200)
    args = parser.parse_args()
    if args.child:
        case = json.loads(args.child)
        _, _, _, out = run_case(config(case["BLOCK_N"], case["stages"]), case["heads"], case["q_len"],
                                case["kv_len"], False)
        print(f"child: {int((~torch.isfinite(out.float())).sum())} non-finite of {out.numel()}")
        return
    deadline = time.monotonic() + args.budget_s
    os.makedirs(OUT, exist_ok=True)
    with open(f"{OUT}/oneloop.txt", "a") as log:
        def say(text):
            print(text, flush=True)
            log.write(text + "\n")
            log.flush()
        say(f"{torch.cuda.get_device_name()} torch {torch.__version__}")
        small = {"BLOCK_N": 64, "stages": 3, "heads": 1, "q_len": 128, "kv_len": 8192}
        say(f"child case first, unsanitized: {small}")
        run = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(small)],
                             capture_output=True, text=True, timeout=120)
        say((run.stdout + run.stderr).strip()[-800:])
        scan(say, deadline)
        sanitize(say, ("racecheck", "synccheck", "memcheck"), small)


if __name__ == "__main__":
    main()

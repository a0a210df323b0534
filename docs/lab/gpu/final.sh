#!/usr/bin/env bash
# Last device call of 2026-11-30: finish the TMA / warp-specialized tables for D128 and
# D256 (resuming the rows the first variant run lost), sweep fp8 configs there, time the
# best bf16 and fp8 configs against SDPA, and measure the runtime's dispatch overhead.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" sweeps sweeps_fp8
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
cp out/resume/*.partial sweeps/ 2>/dev/null
timeout 200 flashtune sweep --where loads=tma,tma_ws --out sweeps --no-static-check --timeout 60 \
  --workload 4,32,4096,128 --workload 2,16,8192,256 2>&1 | grep -v 'cfg/s' | grep -v '^ *%' | tail -8 | tee "$OUT/sweep4.log"
timeout 130 flashtune sweep --where use_fp8=True --where loads=pointer,tma --where num_warps=8 --where BLOCK_M=128,256 \
  --out sweeps_fp8 --no-static-check --timeout 60 --workload 4,32,4096,128 --workload 2,16,8192,256 \
  2>&1 | grep -v 'cfg/s' | grep -v '^ *%' | tail -8 | tee "$OUT/sweep_fp8.log"
tar czf "$OUT/sweeps4.tgz" sweeps sweeps_fp8
timeout 80 python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200 --tables sweeps \
  --tables sweeps_fp8 --only b4_h32_n4096_d128_full_bfloat16 --only b2_h16_n8192_d256_full_bfloat16 \
  --rounds 3 --json "$OUT/peers4.json" 2>&1 | tail -12 | tee "$OUT/peers4.log"
timeout 45 python3 docs/lab/tools/bench_dispatch.py --json "$OUT/dispatch.json" 2>&1 | tail -12 | tee "$OUT/dispatch.log"

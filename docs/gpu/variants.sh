#!/usr/bin/env bash
# One device call for the kernel-performance issue: sweep the TMA and warp-specialized
# variants on the suite (the pointer rows are already in experiments/data/h200), then
# time each workload's best configs of the merged space against SDPA.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" sweeps
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv
timeout ${SWEEP_S:-430} flashtune sweep --where loads=tma,tma_ws --out sweeps --no-static-check --timeout 90 \
  --workload 4,32,4096,128 --workload 2,16,8192,256 --workload 16,16,1024,64 --workload 4,32,4096,128,causal \
  --workload 1,32,16384,128,causal --workload 4,32/8,4096,128,causal --workload 8,16,2048,64,causal \
  2>&1 | grep -v 'cfg/s' | tee "$OUT/sweep3.log"
tar czf "$OUT/sweeps3.tgz" sweeps
timeout 100 python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200 --tables sweeps --rounds 3 \
  --json "$OUT/peers3.json" 2>&1 | tee "$OUT/peers3.log"

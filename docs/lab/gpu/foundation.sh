#!/usr/bin/env bash
# One device call for the foundation issue: finish the suite's sweep, time the best
# configs against SDPA, measure compile-pool throughput, run the GPU test suite.
# Usage (on the lent H200): bash docs/lab/gpu/foundation.sh PRIOR_TABLES_DIR
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" sweeps
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv
[ -n "${1:-}" ] && cp "$1"/*.jsonl sweeps/

echo "== sweep: rest of the suite"
flashtune sweep --workload 1,32,16384,128,causal --workload 2,16,8192,256 --workload 4,32/8,4096,128,causal \
  --out sweeps --no-static-check --timeout 90 2>&1 | grep -v 'cfg/s' | tee "$OUT/sweep2.log"
tar czf "$OUT/sweeps.tgz" sweeps

echo "== peers"
python3 -m flashtune.experiments.benchmarks.bench_peers --tables sweeps --rounds 5 --json "$OUT/peers.json" 2>&1 | tee "$OUT/peers.log"

echo "== throughput: compile pool off vs on (fresh Triton caches, 60 configs)"
for n in 0 15; do
  TRITON_CACHE_DIR=/tmp/tcache$n flashtune sweep --workload 16,16,1024,64 --limit 60 --precompile $n \
    --out /tmp/tp$n 2>&1 | grep -v 'cfg/s' | grep trials | sed "s/^/precompile=$n: /" | tee -a "$OUT/throughput.log"
done

echo "== GPU tests"
python3 -m pytest -m gpu tests/gpu -q -x -p no:cacheprovider 2>&1 | tail -25 | tee "$OUT/gpu_tests.log"

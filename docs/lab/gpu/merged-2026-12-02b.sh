#!/usr/bin/env bash
# Second call of the 2026-12-02 session's merged tree on the H200, about 3 minutes:
#   bash docs/lab/gpu/merged-2026-12-02b.sh      (with the jsonschema wheels carried in .whl)
# 1. the one-loop kernel's deeper K/V rings on 8192 keys, bf16 and fp8 (the first call's
#    bench_fp8 read an infinite error at 128x128, 3 stages, fp8, head_dim 128);
# 2. the serving table's static-cache cells again, each implementation from a fresh compiled
#    state (bench_serving now runs them one after the other: interleaved, the batch-8 cell
#    failed inside torch's CUDA-graph trees in the first call).
# Back in $OUT: merged-b.log, rings.log, serving_static.json, static.log.
source "$(dirname "$0")/../../gpu/setup.sh" merged-b.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
echo "== 1. deeper rings"
timeout -k 5 60 python3 -m pytest -m gpu tests/gpu/test_oneloop_gpu.py -k deeper_rings -q -p no:cacheprovider \
  > "$OUT/rings.log" 2>&1 || echo "step 1 exit $?"
grep -E "^E |passed|failed" "$OUT/rings.log" | cut -c1-400 | tail -12
echo "== 2. serving, static cache compiled, one implementation at a time"
TORCH_LOGS=recompiles timeout -k 5 150 python3 -m flashtune.experiments.benchmarks.bench_serving \
  --modes static --batches 1,8 --rounds 3 --budget-s 120 --json "$OUT/serving_static.json" > "$OUT/static.log" 2>&1 \
  || echo "step 2 exit $?"
grep -v DEBUG "$OUT/static.log" | grep -E "^ +mode| static " | tail -4
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

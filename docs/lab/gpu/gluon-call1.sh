#!/usr/bin/env bash
# Issue 20, part A: the Gluon kernel with FA3's schedule (loads gluon_ws / gluon_pingpong) on the
# H200, one call of under 9 minutes:
#   bash docs/lab/gpu/gluon-call1.sh      (with the jsonschema wheels carried in .whl)
# 1. its numerics: tests/gpu/test_gluon_gpu.py (bf16/fp16 vs the float32 reference; D64/128/256;
#    lengths 1000, 4096, 333/1000; causal; GQA 32/8; strided inputs); a hang (a barrier that never
#    completes) ends at the timeout and skips the timing;
# 2. its tiles timed beside each suite workload's recorded best (h200_grown + h200_lean, top 1),
#    lean_ws_oneloop's tiles and the SDPA peers, interleaved in one run (bench_peers --also);
# 3. with NCU=1: an Nsight Compute profile of the Gluon tile at D128 beside the recorded best.
# Back in $OUT: gluon-call1.log, gpu_tests.xml, peers.json (ncu.json with NCU=1).
source "$(dirname "$0")/../../gpu/setup.sh" gluon-call1.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 ${TEST_S:-150} python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -q -p no:cacheprovider -x \
  --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -25
rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "GPU tests timed out (rc $rc): timing skipped"; exit 1; fi
ALSO=()
for t in '"gluon_pingpong", "BLOCK_M": 128, "BLOCK_N": 128, "num_stages": 2' \
         '"gluon_pingpong", "BLOCK_M": 128, "BLOCK_N": 128, "num_stages": 2, "tile_order": "longest_first"' \
         '"gluon_pingpong", "BLOCK_M": 128, "BLOCK_N": 64, "num_stages": 2' \
         '"gluon_pingpong", "BLOCK_M": 128, "BLOCK_N": 64, "num_stages": 3' \
         '"gluon_pingpong", "BLOCK_M": 256, "BLOCK_N": 64, "num_stages": 3' \
         '"gluon_ws", "BLOCK_M": 64, "BLOCK_N": 128, "num_stages": 2' \
         '"lean_ws_oneloop", "BLOCK_M": 128, "BLOCK_N": 128, "num_stages": 2' \
         '"lean_ws_oneloop", "BLOCK_M": 128, "BLOCK_N": 64, "num_stages": 1' ${EXTRA_ALSO:-}; do
  ALSO+=(--also "{\"loads\": $t, \"num_warps\": 4}")
done
timeout -k 5 ${BENCH_S:-240} python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --top 1 --rounds 3 "${ALSO[@]}" --json "$OUT/peers.json" 2>&1 | tail -40
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

#!/usr/bin/env bash
# Issue 20 part B (branch s20b), one GPU call on the merged tree, under 4 minutes:
#   1. GPU numerics of the one-loop kernel: both loop forms (BLOCK_M 128 specialized, one
#      masked loop; BLOCK_M 64 unspecialized, unmasked blocks then the masked band), bf16,
#      fp16 and fp8 against the float32 reference, ragged and unaligned causal lengths, GQA;
#   2. bench_peers on the suite: the recorded bests (top 1) beside the one-loop tiles, the
#      SDPA peers in the same interleaved rounds (3);
#   3. bench_fp8: fp8 kernel-only (pre-quantized, launch_quantized) at D128 and D256 with the
#      one-loop fp8 tiles beside the recorded ones, each against its accuracy gate;
#   4. the short tables of 2 and 3, last.
# Each step has its own log and timeout; a failing step does not stop the next.
#   bash docs/lab/gpu/s20b.sh
# Back in $OUT: s20b.log (everything), gpu_tests.log/.xml, peers.log/.json, fp8.log/.json.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/s20b.log") 2>&1
PY=${PY:-python3}
C='"loads": "lean_ws_oneloop"'

echo "== 1. GPU tests (one-loop kernel)"
timeout -k 5 90 $PY -m pytest -m gpu tests/gpu/test_oneloop_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1 || echo "step 1 exit $?"
tail -6 "$OUT/gpu_tests.log"

echo "== 2. bench_peers: one-loop tiles beside the recorded bests and SDPA"
ALSO=()
for t in '128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2' '128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1' \
         '128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2' '64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 1' \
         '64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2' '64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2'; do
  ALSO+=(--also "{\"BLOCK_M\": $t, $C}")
done
ALSO+=(--also "{\"BLOCK_M\": 128, \"BLOCK_N\": 128, \"num_warps\": 4, \"num_stages\": 2, $C, \"tile_order\": \"longest_first\"}")
timeout -k 5 95 $PY -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --top 1 --rounds 3 "${ALSO[@]}" --json "$OUT/peers.json" \
  > "$OUT/peers.log" 2>&1 || echo "step 2 exit $?"

echo "== 3. bench_fp8: kernel-only fp8 (pre-quantized)"
F8=()
for t in '128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2' '128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3' \
         '256, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2' '128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1' \
         '128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2' '128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 1'; do
  F8+=(--also "{\"BLOCK_M\": $t, $C}")
done
timeout -k 5 45 $PY docs/lab/tools/bench_fp8.py --rounds 3 --top-fp8 2 "${F8[@]}" \
  --json "$OUT/fp8.json" > "$OUT/fp8.log" 2>&1 || echo "step 3 exit $?"

echo "== 4. tables"
echo "-- suite, TFLOP/s, peers in the same rounds (bench_peers)"
tail -40 "$OUT/peers.log"
echo "-- fp8 kernel-only (bench_fp8)"
tail -30 "$OUT/fp8.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

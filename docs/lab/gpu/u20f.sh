#!/usr/bin/env bash
# Issue 20 part F (branch u20f): fp8 in the Gluon kernel, one GPU call of under 5 minutes:
#   1. GPU numerics of the Gluon fp8 path (tests/gpu/test_gluon_fp8_gpu.py: e4m3 Q, K, V^T,
#      P in e4m3, against the float32 reference within FP8_TOLERANCE: D64/128/256, ragged
#      lengths, causal bottom-right with rows that see no key, GQA, strided; and one bf16
#      launch of the same kernel);
#   2. bench_fp8: fp8 kernel-only (pre-quantized, launch_quantized) at D128 (2, 32, 8192) and
#      D256 (2, 16, 8192): the Gluon fp8 tiles (ping-pong free-running and ordered, 128x128 and
#      128x64, 2 and 3 stages; one 8-warp group; 256x64) beside the one-loop fp8 best (lean_ws_oneloop 128x128 2st), the
#      recorded fp8 best, our bf16 best and SDPA cuDNN (bf16), interleaved rounds;
#   3. the short table of 2, last.
# Each step has its own log and timeout; a failing step does not stop the next.
#   bash docs/lab/gpu/u20f.sh            (with the jsonschema wheels carried in .whl)
# Back in $OUT: u20f.log (everything), gpu_tests.log/.xml, fp8.log/.json.
source "$(dirname "$0")/../../gpu/setup.sh" u20f.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
PY=${PY:-python3}

echo "== 1. GPU tests (Gluon fp8)"
timeout -k 5 110 $PY -m pytest -m gpu tests/gpu/test_gluon_fp8_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1 || echo "step 1 exit $?"
tail -25 "$OUT/gpu_tests.log"

echo "== 2. bench_fp8: Gluon fp8 tiles beside the one-loop fp8 best"
F8=()
for t in '"loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 2' '"loads": "gluon_pingpong", "BLOCK_N": 64, "num_stages": 2' \
         '"loads": "gluon_pingpong_ordered", "BLOCK_N": 128, "num_stages": 2' \
         '"loads": "gluon_pingpong_ordered", "BLOCK_N": 64, "num_stages": 2' \
         '"loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 3' '"loads": "gluon_pingpong", "BLOCK_N": 64, "num_stages": 3' \
         '"loads": "lean_ws_oneloop", "BLOCK_N": 128, "num_stages": 2'; do
  F8+=(--also "{\"BLOCK_M\": 128, \"num_warps\": 4, $t}")
done
# One 8-warp consumer group (no ping-pong), and two 128-row groups (6 spilled words at D128).
F8+=(--also '{"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2, "loads": "gluon_ws"}')
F8+=(--also '{"BLOCK_M": 256, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "loads": "gluon_pingpong"}')
timeout -k 5 130 $PY docs/lab/tools/bench_fp8.py --rounds 3 --top-fp8 1 "${F8[@]}" \
  --json "$OUT/fp8.json" > "$OUT/fp8.log" 2>&1 || echo "step 2 exit $?"

echo "== 3. table"
echo "-- fp8 kernel-only (bench_fp8), TFLOP/s"
tail -30 "$OUT/fp8.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

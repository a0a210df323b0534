#!/usr/bin/env bash
# Issue 20 part F, second step (branch s20f): fp8 P in the Gluon kernel without the x448
# multiply and without the layout conversion's shuffles, one GPU call of under 4 minutes:
#   1. GPU numerics of the Gluon fp8 path (tests/gpu/test_gluon_fp8_gpu.py: the op's form, P in
#      FA3's key order on V^T written in it, at D64/128/256, ragged, causal with rows that see no
#      key, GQA, strided; each of the three P forms beside the others at two hard cases; one bf16
#      launch of the same kernel);
#   2. bench_fp8: fp8 kernel-only (pre-quantized) at D128 (2, 32, 8192) and D256 (2, 16, 8192):
#      each Gluon fp8 tile in each P form (multiply: the first fp8 form; exp2: the stretch
#      folded into exp2; permuted: that and FA3's in-thread permute) side by side, beside the
#      one-loop fp8 kernel, the recorded fp8 best, our bf16 best and SDPA cuDNN (bf16), rounds
#      interleaved;
#   3. the short table of 2, last.
# Each step has its own log and timeout; a failing step does not stop the next.
#   bash docs/lab/gpu/u20f2.sh            (with the jsonschema wheels carried in .whl)
# Back in $OUT: u20f2.log (everything), gpu_tests.log/.xml, fp8.log/.json.
source "$(dirname "$0")/../../gpu/setup.sh" u20f2.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
PY=${PY:-python3}

echo "== 1. GPU tests (Gluon fp8)"
timeout -k 5 120 $PY -m pytest -m gpu tests/gpu/test_gluon_fp8_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1 || echo "step 1 exit $?"
tail -25 "$OUT/gpu_tests.log"

echo "== 2. bench_fp8: the Gluon fp8 tiles in each P form"
F8=()
for t in '"loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 2' \
         '"loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 3' \
         '"loads": "gluon_pingpong_ordered", "BLOCK_N": 128, "num_stages": 2' \
         '"loads": "gluon_pingpong", "BLOCK_N": 64, "num_stages": 2' \
         '"loads": "gluon_pingpong_ordered", "BLOCK_N": 64, "num_stages": 2' \
         '"loads": "lean_ws_oneloop", "BLOCK_N": 128, "num_stages": 2'; do
  F8+=(--also "{\"BLOCK_M\": 128, \"num_warps\": 4, $t}")
done
timeout -k 5 150 $PY docs/lab/tools/bench_fp8.py --rounds 3 --top-fp8 1 "${F8[@]}" \
  --gluon-fp8-forms multiply,exp2,permuted --json "$OUT/fp8.json" > "$OUT/fp8.log" 2>&1 || echo "step 2 exit $?"

echo "== 3. table"
echo "-- fp8 kernel-only (bench_fp8), TFLOP/s; fp8_kernel#i/FORM: tile i in P form FORM"
tail -40 "$OUT/fp8.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

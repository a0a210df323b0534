#!/usr/bin/env bash
# Issue 20 part F, third step (branch s20h): fp8 P with f16 exponentials (FP8_P="permuted_h2",
# ex2.approx.f16x2) against "permuted", one GPU call of under 150 s:
#   1. GPU numerics of the Gluon fp8 path (tests/gpu/test_gluon_fp8_gpu.py; the P-form test
#      now runs permuted_h2 too, within the gate and within 1e-2 of permuted);
#   2. bench_fp8: fp8 kernel-only (pre-quantized) at D128 and D256, the three 128x128 Gluon
#      tiles in both forms, beside the one-loop fp8 kernel, our bf16 best and SDPA cuDNN, 4
#      interleaved rounds;
#   3. the table of 2, last.
#   bash docs/lab/gpu/u20h.sh            (with the jsonschema wheels carried in .whl)
# Back in $OUT: u20h.log (everything), gpu_tests.log/.xml, fp8.log/.json.
source "$(dirname "$0")/../../gpu/setup.sh" u20h.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
PY=${PY:-python3}

echo "== 1. GPU tests (Gluon fp8)"
timeout -k 5 45 $PY -m pytest -m gpu tests/gpu/test_gluon_fp8_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1 || echo "step 1 exit $?"
tail -8 "$OUT/gpu_tests.log"

echo "== 2. bench_fp8: three Gluon fp8 tiles, permuted vs permuted_h2"
F8=()
for t in '"loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 2' \
         '"loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 3' \
         '"loads": "gluon_pingpong_ordered", "BLOCK_N": 128, "num_stages": 2' \
         '"loads": "lean_ws_oneloop", "BLOCK_N": 128, "num_stages": 2'; do
  F8+=(--also "{\"BLOCK_M\": 128, \"num_warps\": 4, $t}")
done
timeout -k 5 80 $PY docs/lab/tools/bench_fp8.py --rounds 4 --top-fp8 1 "${F8[@]}" \
  --gluon-fp8-forms permuted,permuted_h2 --json "$OUT/fp8.json" > "$OUT/fp8.log" 2>&1 || echo "step 2 exit $?"

echo "== 3. table"
echo "-- fp8 kernel-only (bench_fp8), TFLOP/s; fp8_kernel#i/FORM: tile i in P form FORM"
tail -30 "$OUT/fp8.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

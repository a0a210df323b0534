#!/usr/bin/env bash
# Issue 20 part F, second step, call 2 (branch s20f): the P forms' timing again (the same
# version timed twice: METHOD.md), at the three fastest D128 tiles of call 1 (u20f2.sh),
# 5 interleaved rounds; no GPU tests (call 1 ran them on this code).
#   bash docs/lab/gpu/u20f2b.sh            (with the jsonschema wheels carried in .whl)
# Back in $OUT: u20f2b.log (everything), fp8.log/.json.
source "$(dirname "$0")/../../gpu/setup.sh" u20f2b.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
PY=${PY:-python3}

echo "== 1. bench_fp8: three Gluon fp8 tiles in each P form, again"
F8=()
for t in '"loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 2' \
         '"loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 3' \
         '"loads": "gluon_pingpong_ordered", "BLOCK_N": 128, "num_stages": 2' \
         '"loads": "lean_ws_oneloop", "BLOCK_N": 128, "num_stages": 2'; do
  F8+=(--also "{\"BLOCK_M\": 128, \"num_warps\": 4, $t}")
done
timeout -k 5 120 $PY docs/lab/tools/bench_fp8.py --rounds 5 --top-fp8 1 "${F8[@]}" \
  --gluon-fp8-forms multiply,exp2,permuted --json "$OUT/fp8.json" > "$OUT/fp8.log" 2>&1 || echo "step 1 exit $?"

echo "== 2. table"
echo "-- fp8 kernel-only (bench_fp8), TFLOP/s; fp8_kernel#i/FORM: tile i in P form FORM"
tail -30 "$OUT/fp8.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

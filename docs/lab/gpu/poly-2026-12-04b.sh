#!/usr/bin/env bash
# Issue 20: the space's loads=gluon_pingpong_poly (2 of 16 exp2s of P on the FMA pipe), one call:
#   1. GPU numerics: the 16-bit file's polynomial and persistent-loop tests, the whole fp8 file
#      (its configs now include the polynomial ping-pong);
#   2. bench_fp8: fp8 kernel-only at D128 and D256, the ping-pong with and without the
#      polynomial beside the ordered one, 4 interleaved rounds;
#   3. then, in its own process, the suite with the polynomial's grids beside the others:
#      ALSO_JSON="$(bash docs/lab/gpu/poly-2026-12-04b.sh --also)" bash docs/lab/gpu/suite-2026-12-04.sh
# Run as: bash docs/lab/gpu/poly-2026-12-04b.sh && ALSO_JSON="$(bash docs/lab/gpu/poly-2026-12-04b.sh --also)" \
#   bash docs/lab/gpu/suite-2026-12-04.sh        (with the jsonschema wheels carried in .whl)
# Back in $OUT: poly.log, gpu_tests*.log/.xml, fp8.log/.json (and the suite's suite.log/.json).
poly() { echo "{\"loads\": \"gluon_pingpong_poly\", \"BLOCK_M\": 128, \"BLOCK_N\": $1, \"num_warps\": 4, \"num_stages\": 2, \"grid\": \"$2\", \"tile_order\": \"$3\"}"; }
if [ "${1:-}" = "--also" ]; then
  poly 128 persistent head_major; poly 128 persistent_zigzag head_major; poly 128 persistent_zigzag longest_first
  poly 128 tiles longest_first; poly 64 tiles longest_first
  exit 0
fi
source "$(dirname "$0")/../../gpu/setup.sh" poly.log
export FLASHTUNE_STORE="$OUT/empty_store.json"

echo "== 1. GPU tests"
timeout -k 5 170 python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -k "polynomial or persistent_programs or share" \
  -q -p no:cacheprovider --junitxml "$OUT/gpu_tests16.xml" > "$OUT/gpu_tests16.log" 2>&1 || echo "step 1a exit $?"
tail -4 "$OUT/gpu_tests16.log"
timeout -k 5 90 python3 -m pytest -m gpu tests/gpu/test_gluon_fp8_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests8.xml" > "$OUT/gpu_tests8.log" 2>&1 || echo "step 1b exit $?"
tail -4 "$OUT/gpu_tests8.log"

echo "== 2. bench_fp8"
F8=()
for t in '"loads": "gluon_pingpong"' '"loads": "gluon_pingpong_poly"' '"loads": "gluon_pingpong_ordered"'; do
  F8+=(--also "{\"BLOCK_M\": 128, \"BLOCK_N\": 128, \"num_warps\": 4, \"num_stages\": 2, $t}")
done
timeout -k 5 80 python3 docs/lab/tools/bench_fp8.py --rounds 4 --top-fp8 1 "${F8[@]}" \
  --json "$OUT/fp8.json" > "$OUT/fp8.log" 2>&1 || echo "step 2 exit $?"
tail -24 "$OUT/fp8.log"

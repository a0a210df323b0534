#!/usr/bin/env bash
# Issue 20, fp8 D128: the row sums by the tensor cores (ROWSUM_MMA), then Nsight Compute. One call:
#   bash docs/gpu/rowsum-2026-12-05.sh      (with the jsonschema wheels carried in .whl)
# 1. GPU numerics of ROWSUM_MMA: 16-bit (three kernel shapes x four cases) and fp8 (four cases,
#    beside the adds' output);
# 2. docs/gpu/variants_probe.py --plan rowsum: fp8 D128 / D256 and bf16 D64 with and without it,
#    beside SDPA cuDNN and flash, 3 interleaved rounds;
# 3. docs/gpu/ncu-2026-12-05.sh (the suite's new bests beside the old ones, fp8).
# Back in $OUT: rowsum.log, tests16.xml/.log, tests8.xml/.log, probe.json, and ncu's files.
source "$(dirname "$0")/setup.sh" rowsum.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
echo "== 1. GPU tests"
timeout -k 5 ${TEST_S:-150} python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -k row_sums -q -p no:cacheprovider \
  --junitxml "$OUT/tests16.xml" > "$OUT/tests16.log" 2>&1 || echo "step 1a exit $?"
tail -4 "$OUT/tests16.log"
timeout -k 5 ${TEST8_S:-90} python3 -m pytest -m gpu tests/gpu/test_gluon_fp8_gpu.py -k row_sums -q -p no:cacheprovider \
  --junitxml "$OUT/tests8.xml" > "$OUT/tests8.log" 2>&1 || echo "step 1b exit $?"
tail -4 "$OUT/tests8.log"
echo "== 2. probe"
timeout -k 5 ${PROBE_S:-170} python3 docs/gpu/variants_probe.py --plan rowsum --rounds 3 --json "$OUT/probe.json" \
  > "$OUT/probe.log" 2>&1 || echo "step 2 exit $?"
grep -v " round " "$OUT/probe.log" | tail -24
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
echo "== 3. ncu"
NCU_S=${NCU_S:-60} bash docs/gpu/ncu-2026-12-05.sh > /dev/null 2>&1 || echo "step 3 exit $?"
tail -40 "$OUT/ncu.log"

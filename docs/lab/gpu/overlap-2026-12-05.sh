#!/usr/bin/env bash
# Issue 20: a kernel flag outside the space, timed and checked in one call (the flag left the kernel
# after this ran; put it back first):
#   git apply docs/results/overlap-2026-12-05/overlap-pv.patch
#   bash docs/lab/gpu/overlap-2026-12-05.sh      (with the jsonschema wheels carried in .whl)
# OVERLAP_PV (a block's exponentials under the previous block's PV product: on sm90 ptxas had put
# the PV wait ahead of them).
# 1. docs/gpu/variants_probe.py --plan overlap: at fp8 D128 / D256 and the suite's best Gluon
#    tiles, beside SDPA cuDNN and flash, 3 interleaved rounds (each variant checked against cuDNN first);
# 2. GPU numerics: fp8 (four cases: the flag beside the plain kernel) and 16-bit (four cases,
#    three kernel shapes).
# Back in $OUT: overlap.log, probe.json/.log, tests8.xml/.log, tests16.xml/.log.
source "$(dirname "$0")/../../gpu/setup.sh" overlap.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
echo "== 1. probe"
timeout -k 5 ${PROBE_S:-200} python3 docs/gpu/variants_probe.py --plan overlap --rounds 3 --json "$OUT/probe.json" \
  > "$OUT/probe.log" 2>&1 || echo "step 1 exit $?"
grep -v " round " "$OUT/probe.log" | tail -30
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
echo "== 2. GPU tests"
timeout -k 5 ${TEST8_S:-100} python3 -m pytest -m gpu tests/gpu/test_gluon_fp8_gpu.py -k kernel_flags -q -p no:cacheprovider \
  --junitxml "$OUT/tests8.xml" > "$OUT/tests8.log" 2>&1 || echo "step 2a exit $?"
tail -4 "$OUT/tests8.log"
timeout -k 5 ${TEST_S:-180} python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -k kernel_flags -q -p no:cacheprovider \
  --junitxml "$OUT/tests16.xml" > "$OUT/tests16.log" 2>&1 || echo "step 2b exit $?"
tail -4 "$OUT/tests16.log"

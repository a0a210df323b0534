#!/usr/bin/env bash
# Issue 20, fp8 D128 >= 1.0 PFLOP/s: fp8 with a lagging row maximum (FP8_LAG, the rescale skipped
# by a warp until a row's maximum grows by more than 2^lag; P stretched by 448 / 2^lag), timed
# beside SDPA cuDNN and flash, then its GPU numerics, in one call (about 4 minutes):
#   bash docs/gpu/fp8-lag.sh      (with the jsonschema wheels carried in .whl)
# Back in $OUT: lag.log, probe.json/.log, tests.xml/.log.
source "$(dirname "$0")/setup.sh" lag.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 ${PROBE_S:-200} python3 docs/gpu/variants_probe.py --plan fp8_lag --rounds 3 --json "$OUT/probe.json" \
  > "$OUT/probe.log" 2>&1 || echo "probe exit $?"
grep -v " round " "$OUT/probe.log" | tail -16
timeout -k 5 ${TEST_S:-150} python3 -m pytest -m gpu tests/gpu/test_gluon_fp8_gpu.py -k lagging -q -p no:cacheprovider \
  --junitxml "$OUT/tests.xml" > "$OUT/tests.log" 2>&1 || echo "tests exit $?"
tail -3 "$OUT/tests.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

#!/usr/bin/env bash
# Issue 20, fp8 D128 >= 1.0 PFLOP/s: fp8's deeper K/V rings and 256-row programs (never swept: the
# Gluon tables are bf16), timed beside SDPA cuDNN and flash; then the whole fp8 GPU test file
# (the kernel has FP8_LAG since: its default must still pass), in one call (about 4 minutes):
#   bash docs/gpu/fp8-tiles.sh      (with the jsonschema wheels carried in .whl)
# Back in $OUT: tiles.log, probe.json/.log, tests.xml/.log.
source "$(dirname "$0")/setup.sh" tiles.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 ${PROBE_S:-240} python3 docs/gpu/variants_probe.py --plan fp8_tiles --rounds 3 --json "$OUT/probe.json" \
  > "$OUT/probe.log" 2>&1 || echo "probe exit $?"
grep -v " round " "$OUT/probe.log" | tail -16
timeout -k 5 ${TEST_S:-200} python3 -m pytest -m gpu tests/gpu/test_gluon_fp8_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/tests.xml" > "$OUT/tests.log" 2>&1 || echo "tests exit $?"
tail -3 "$OUT/tests.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

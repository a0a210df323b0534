#!/usr/bin/env bash
# Issue 20, fp8 D128 >= 1.0 PFLOP/s: three consumer warpgroups at fp8 (prepared 2026-12-05, not yet
# run), timed beside SDPA cuDNN and flash, then their GPU numerics, in one call (about 4 minutes):
#   bash docs/gpu/three-fp8.sh      (with the jsonschema wheels carried in .whl)
# It applies docs/results/three-groups-fp8/three-groups.patch (the kernel's NUM_GROUPS == 3 branch,
# FA3's 160-register split, the GPU test) to the device's copy first.
# Back in $OUT: three.log, probe.json/.log, tests.xml/.log.
source "$(dirname "$0")/setup.sh" three.log
git apply docs/results/three-groups-fp8/three-groups.patch 2>/dev/null || patch -p1 < docs/results/three-groups-fp8/three-groups.patch \
  || { echo "the patch did not apply"; exit 1; }
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 ${PROBE_S:-150} python3 docs/gpu/variants_probe.py --plan three_fp8 --rounds 3 --json "$OUT/probe.json" \
  > "$OUT/probe.log" 2>&1 || echo "probe exit $?"
grep -v " round " "$OUT/probe.log" | tail -10
timeout -k 5 ${TEST_S:-120} python3 -m pytest -m gpu tests/gpu/test_gluon_fp8_gpu.py -k three_consumer -q -p no:cacheprovider \
  --junitxml "$OUT/tests.xml" > "$OUT/tests.log" 2>&1 || echo "tests exit $?"
tail -3 "$OUT/tests.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

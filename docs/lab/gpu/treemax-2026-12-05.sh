#!/usr/bin/env bash
# Issue 20: the row maxima as a tree (the kernel's) against Triton's chain (CHAIN_MAX), timed beside
# SDPA cuDNN and flash, then the Gluon kernel's GPU numerics with the tree, in one call:
# (the tree left the kernel after this ran: it was slower)
#   git apply docs/results/treemax-2026-12-05/tree-max.patch      (the tree, as it ran)
#   git apply docs/results/treemax-2026-12-05/chain-max.patch     (adds CHAIN_MAX for the comparison)
#   bash docs/lab/gpu/treemax-2026-12-05.sh      (with the jsonschema wheels carried in .whl)
# Back in $OUT: treemax.log, probe.json/.log, tests8.xml/.log, tests16.xml/.log.
source "$(dirname "$0")/../../gpu/setup.sh" treemax.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 ${PROBE_S:-200} python3 docs/gpu/variants_probe.py --plan treemax --rounds 3 --json "$OUT/probe.json" \
  > "$OUT/probe.log" 2>&1 || echo "probe exit $?"
grep -v " round " "$OUT/probe.log" | tail -26
timeout -k 5 ${TEST8_S:-90} python3 -m pytest -m gpu tests/gpu/test_gluon_fp8_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/tests8.xml" > "$OUT/tests8.log" 2>&1 || echo "fp8 tests exit $?"
tail -2 "$OUT/tests8.log"
timeout -k 5 ${TEST_S:-150} python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/tests16.xml" > "$OUT/tests16.log" 2>&1 || echo "16-bit tests exit $?"
tail -2 "$OUT/tests16.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

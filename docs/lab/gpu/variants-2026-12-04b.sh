#!/usr/bin/env bash
# Issue 20: Gluon variants outside the declared space beside SDPA cuDNN and flash, one call
# (docs/gpu/variants_probe.py says what is asked), with the jsonschema wheels carried in .whl:
#   bash docs/lab/gpu/variants-2026-12-04b.sh
# Back in $OUT: variants.log, variants.json.
source "$(dirname "$0")/../../gpu/setup.sh" variants.log
date +%T
timeout -k 5 ${PROBE_S:-480} python3 docs/gpu/variants_probe.py ${PLAN_ARGS:---plan first --plan fp8} --rounds 2 --json "$OUT/variants.json"
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

#!/usr/bin/env bash
# Issue 20: what one warpgroup barrier a block costs the Gluon kernel (Triton 3.6 puts one before
# each mbarrier arrival), timed beside SDPA cuDNN and flash in one call:
#   git apply docs/results/barrier-2026-12-05/extra-arrivals.patch
#   bash docs/lab/gpu/barrier-2026-12-05.sh      (with the jsonschema wheels carried in .whl)
# docs/gpu/variants_probe.py --plan barrier: fp8 D128 and bf16 D128 / D256 with 0, 1 (and 2)
# extra arrivals a block, 3 interleaved rounds (each variant checked against cuDNN first).
# Back in $OUT: barrier.log, probe.json, probe.log.
exec bash "$(dirname "$0")/../../gpu/probe.sh" barrier barrier.log

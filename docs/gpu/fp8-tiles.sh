#!/usr/bin/env bash
# Issue 20, fp8 D128 >= 1.0 PFLOP/s: fp8's deeper K/V rings and 256-row programs (never swept: the
# Gluon tables are bf16), timed beside SDPA cuDNN and flash; then the whole fp8 GPU test file
# (when it ran, 2026-12-05, with FP8_LAG in the kernel), in one call (about 4 minutes):
#   bash docs/gpu/fp8-tiles.sh      (with the jsonschema wheels carried in .whl)
exec bash "$(dirname "$0")/probe.sh" fp8_tiles tiles.log tests/gpu/test_gluon_fp8_gpu.py

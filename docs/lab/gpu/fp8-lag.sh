#!/usr/bin/env bash
# Issue 20, fp8 D128 >= 1.0 PFLOP/s: fp8 with a lagging row maximum (FP8_LAG, the rescale skipped
# by a warp until a row's maximum grows by more than 2^lag; P stretched by 448 / 2^lag), timed
# beside SDPA cuDNN and flash, then its GPU numerics, in one call (about 4 minutes):
#   bash docs/lab/gpu/fp8-lag.sh      (with the jsonschema wheels carried in .whl)
# It applies docs/results/fp8-lag-2026-12-05/fp8-lag.patch (FP8_LAG left the kernel: slower) first.
git apply docs/results/fp8-lag-2026-12-05/fp8-lag.patch 2>/dev/null || patch -p1 < docs/results/fp8-lag-2026-12-05/fp8-lag.patch \
  || { echo "the patch did not apply"; exit 1; }
exec bash "$(dirname "$0")/../../gpu/probe.sh" fp8_lag lag.log tests/gpu/test_gluon_fp8_gpu.py -k lagging

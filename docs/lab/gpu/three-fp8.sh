#!/usr/bin/env bash
# Issue 20, fp8 D128 >= 1.0 PFLOP/s: three consumer warpgroups at fp8 (run 2026-12-05: 0.97x), timed beside SDPA cuDNN and flash, then their GPU numerics, in one call (about 4 minutes):
#   bash docs/lab/gpu/three-fp8.sh      (with the jsonschema wheels carried in .whl)
# It applies docs/results/three-groups-fp8/three-groups.patch (the kernel's NUM_GROUPS == 3 branch,
# FA3's 160-register split, the GPU test) to the device's copy first.
# Back in $OUT: three.log, probe.json/.log, tests.xml/.log.
git apply docs/results/three-groups-fp8/three-groups.patch 2>/dev/null || patch -p1 < docs/results/three-groups-fp8/three-groups.patch \
  || { echo "the patch did not apply"; exit 1; }
exec bash "$(dirname "$0")/../../gpu/probe.sh" three_fp8 three.log tests/gpu/test_gluon_fp8_gpu.py -k three_consumer

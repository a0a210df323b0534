#!/usr/bin/env bash
# The prefill kernels' GPU tests after the length-1 twins (kernels/launch_support.py LengthTwins),
# and the serving tests (their decode steps launch with one query):
#   bash docs/lab/gpu/main-2026-12-03.sh      (with the jsonschema wheels carried in .whl)
# Back in $OUT: gpu-tests.log and <file>.xml (junit) for each test file.
exec bash "$(dirname "$0")/main-2026-12-02f.sh" test_kernel_gpu:220 test_serving_gpu:70

#!/usr/bin/env bash
# The prefill kernels' GPU tests after the length-1 twins (kernels/launch_support.py LengthTwins),
# and the serving tests (their decode steps launch with one query):
#   bash docs/gpu/main-2026-12-03.sh      (with the jsonschema wheels carried in .whl)
# Back in $OUT: gpu-tests.log and <file>.xml (junit) for each test file.
source "$(dirname "$0")/setup.sh" gpu-tests.log
for spec in test_kernel_gpu:220 test_serving_gpu:70; do
  name=${spec%%:*}; limit=${spec##*:}
  echo "== $name (limit $limit s)"; date +%T
  timeout -k 5 "$limit" python3 -m pytest -m "gpu and not slow" "tests/gpu/$name.py" -q -p no:cacheprovider \
    --junitxml "$OUT/$name.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -8
done
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

#!/usr/bin/env bash
# Every GPU test file of main but its exhaustive (slow) test, a file at a time (one pytest process each, its own time limit:
# the whole of `pytest -m gpu tests/gpu` in one process ran past 330 s on 2026-12-02):
#   bash docs/lab/gpu/main-2026-12-02f.sh      (with the jsonschema wheels carried in .whl)
# Back in $OUT: gpu-tests.log and <file>.xml (junit) for each test file.
# Arguments, if any: the files to run instead, each as name:limit_s (docs/lab/gpu/main-2026-12-03.sh).
source "$(dirname "$0")/../../gpu/setup.sh" gpu-tests.log
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=(test_kernel_gpu:240 test_lean_gpu:90 test_oneloop_gpu:90 test_peers_gpu:90
                                 test_serving_gpu:90 test_gluon_fp8_gpu:90 test_gluon_gpu:150 test_decode_gpu:200)
for spec in "${specs[@]}"; do
  name=${spec%%:*}; limit=${spec##*:}
  echo "== $name (limit $limit s)"; date +%T
  timeout -k 5 "$limit" python3 -m pytest -m "gpu and not slow" "tests/gpu/$name.py" -q -p no:cacheprovider \
    --junitxml "$OUT/$name.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -6
done
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

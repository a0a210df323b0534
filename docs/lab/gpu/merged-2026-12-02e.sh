#!/usr/bin/env bash
# The GPU tests of what this session changed, on the merged tree (the mask chain's fix, the
# Gluon fp8 P forms), one file at a time with its own limit, about 3 minutes:
#   bash docs/lab/gpu/merged-2026-12-02e.sh      (with the jsonschema wheels carried in .whl)
# Back in $OUT: merged-e.log, <file>.xml per test file.
source "$(dirname "$0")/../../gpu/setup.sh" merged-e.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
for file in test_serving_gpu test_gluon_fp8_gpu test_decode_gpu; do
  echo "== $file"; date +%T
  timeout -k 5 ${STEP_S:-45} python3 -m pytest -m gpu "tests/gpu/$file.py" -q -p no:cacheprovider \
    --junitxml "$OUT/$file.xml" 2>&1 | grep -E "^E |passed|failed|error|^FAILED" | cut -c1-300 | tail -6
done
date +%T

#!/usr/bin/env bash
# The session's closing GPU check of the Gluon kernel at HEAD (the unified consumer partition, the
# polynomial share for fp8, loads=gluon_pingpong_poly), about 5 minutes:
#   bash docs/lab/gpu/tests-2026-12-04b.sh      (with the jsonschema wheels carried in .whl)
# GPU tests: serving (the bound launch, the empty store's Hopper default), the Gluon kernel's
# 16-bit file and its fp8 file, whole. Back in $OUT: tests.log, *.xml.
source "$(dirname "$0")/../../gpu/setup.sh" tests.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
for spec in test_serving_gpu:100 test_gluon_gpu:260 test_gluon_fp8_gpu:80; do
  name=${spec%%:*}; limit=${spec##*:}
  echo "== $name"; date +%T
  timeout -k 5 "$limit" python3 -m pytest -m "gpu and not slow" "tests/gpu/$name.py" -q -p no:cacheprovider \
    --junitxml "$OUT/$name.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -8
done
date +%T

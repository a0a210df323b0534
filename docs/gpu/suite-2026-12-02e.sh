#!/usr/bin/env bash
# The whole GPU suite on the session's merged tree (the mask chain's fix, the Gluon fp8 P forms),
# one call, at most about 6 minutes:
#   bash docs/gpu/suite-2026-12-02e.sh      (with the jsonschema wheels carried in .whl)
# Back in $OUT: suite-e.log, gpu_suite.xml.
source "$(dirname "$0")/setup.sh" suite-e.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
date +%T
timeout -k 5 ${SUITE_S:-330} python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider --durations=5 \
  --junitxml "$OUT/gpu_suite.xml" 2>&1 | grep -E "^E |passed|failed|error|^FAILED|s call" | cut -c1-300 | tail -25
date +%T

#!/usr/bin/env bash
# One device call of at most 10 minutes (2026-12-05): the never-run GPU test of the lazy rescale
# (maxima that keep climbing, against the float32 reference), then the re-timing of the suite's
# top recorded configs (retime-gluon.sh, TOP=16, cut at BENCH_S; rows written per workload).
#   bash docs/lab/gpu/session-2026-12-05.sh      (carry .whl)
# Back in $OUT: session.log, maxima.xml, and retime-gluon.sh's files.
source "$(dirname "$0")/../../gpu/setup.sh" session.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
date +%T
timeout -k 5 150 python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -k maxima_that_keep_moving -q -p no:cacheprovider \
  --junitxml "$OUT/maxima.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -8
date +%T
TOP=${TOP:-16} BENCH_S=${BENCH_S:-330} bash "$(dirname "$0")/../../gpu/retime-gluon.sh"

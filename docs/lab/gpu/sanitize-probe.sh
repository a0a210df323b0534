#!/usr/bin/env bash
# Issue 44, 2026-12-06: what the H100's sanitizer findings are (about 1 minute; carry .whl).
#   bash docs/lab/gpu/sanitize-probe.sh      -> $OUT/probe.log, probe.txt, the kernels' SASS
source "$(dirname "$0")/../../gpu/setup.sh" probe.log
export TRITON_CACHE_DIR=/tmp/triton-probe
python3 docs/lab/gpu/sanitize_probe.py

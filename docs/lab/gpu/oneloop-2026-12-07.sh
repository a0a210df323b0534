#!/usr/bin/env bash
# Issue 44 item 3, 2026-12-07: the one-loop kernel's non-finite outputs (about 4 minutes; carry .whl).
#   bash docs/lab/gpu/oneloop-2026-12-07.sh      -> $OUT/oneloop.log, oneloop.jsonl, oneloop.txt
source "$(dirname "$0")/../../gpu/setup.sh" oneloop.log
git rev-parse --short HEAD 2>/dev/null || true
timeout -k 5 "${PROBE_S:-260}" python3 docs/lab/gpu/oneloop_probe.py --budget-s "${SCAN_S:-150}" || echo "probe exit $?"

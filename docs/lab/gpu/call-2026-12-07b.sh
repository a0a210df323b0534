#!/usr/bin/env bash
# 2026-12-07, one call of about 9.5 minutes (carry .whl and resume/, the verdicts of 2026-12-06):
#   bash docs/lab/gpu/call-2026-12-07b.sh
# 1. issue 44's sanitizer: its GPU tests, then the plan's configs not yet checked, in batches (docs/gpu/sanitize.sh);
# 2. the packed kernels' sweeps and their store (docs/gpu/continuous-batching.sh STEPS=sweep; the served tile first);
# 3. the varlen prologue probe (docs/lab/gpu/varlen_prologue_probe.py).
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/out}
TESTS_S=${TESTS_S:-80} TABLES_S=${TABLES_S:-220} bash docs/gpu/sanitize.sh 2>&1 | tail -25
STEPS=sweep SWEEP_S=${SWEEP_S:-180} bash docs/gpu/continuous-batching.sh 2>&1 | tail -12
( source docs/gpu/setup.sh prologue.log
  timeout -k 5 "${PROBE_S:-50}" python3 docs/lab/gpu/varlen_prologue_probe.py --out "$OUT/varlen_prologue.jsonl" \
    || echo "probe exit $?" ) 2>&1 | tail -12

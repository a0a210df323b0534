#!/usr/bin/env bash
# Issue 44 on the lent H100/H200, in one call of about 8 minutes: nothing unsafe is served.
#   bash docs/gpu/sanitize.sh           (carry .whl; TESTS_S, TABLES_S cut each step; TESTS_S=0 skips the tests,
#                                        TESTS_K=EXPR picks them: pytest -k)
# 1. the sanitizer GPU tests (tests/gpu/test_sanitize_gpu.py): the runtime's Hopper defaults
#    clean under memcheck, racecheck, synccheck and initcheck; a deliberately out-of-bounds
#    Triton kernel found by memcheck; a verdict cached per config, kernel and GPU;
# 2. sanitize_tables: the runtime's defaults, then each recorded workload's 3 best configs of
#    every kernel variant (forward, lean, one-loop, Gluon, decode) from the H200 and H100
#    tables, best first, 6 batches of 8 configs at a time (BATCH) until the budget; verdicts
#    cached in $OUT.
# Back in $OUT: sanitize.log, sanitize/{plan.json,findings.jsonl,findings.md}, sanitized.json
# (the verdict cache: carry it back as FLASHTUNE_SANITIZED to skip what was checked).
source "$(dirname "$0")/setup.sh" sanitize.log
git rev-parse --short HEAD 2>/dev/null || true
export PATH="$PATH:/usr/local/cuda/bin"
export FLASHTUNE_SANITIZED="$OUT/sanitized.json"
[ -f resume/sanitized.json ] && cp resume/sanitized.json "$FLASHTUNE_SANITIZED" && echo "resumed verdicts"
command -v compute-sanitizer && compute-sanitizer --version | tail -1
date +%T
if [ "${TESTS_S:-180}" -gt 0 ]; then  # TESTS_S=0: the tables only
  timeout -k 5 "${TESTS_S:-180}" python3 -m pytest -m gpu tests/gpu/test_sanitize_gpu.py -q -s -p no:cacheprovider \
    ${TESTS_K:+-k "$TESTS_K"} \
    2>&1 | tail -40 || echo "tests exit $?"
fi
date +%T
TABLES=()
for d in experiments/data/h200_grown experiments/data/h200_lean experiments/data/h200_lean_order \
         experiments/data/h200_gluon experiments/data/h200_variants experiments/data/h200_decode \
         experiments/data/h100_sampled; do
  [ -d "$d" ] && TABLES+=(--tables "$d")
done
timeout -k 10 "${TABLES_S:-280}" python3 docs/gpu/sanitize_tables.py "${TABLES[@]}" \
  --top "${TOP:-3}" --jobs "${JOBS:-6}" --batch-size "${BATCH:-8}" --budget-s "$(( ${TABLES_S:-280} - 60 ))" --timeout-s 120 \
  --out "$OUT/sanitize" || echo "sanitize_tables exit $?"
date +%T

#!/usr/bin/env bash
# One device call: a docs/gpu/variants_probe.py plan timed beside SDPA cuDNN and flash (3 rounds),
# then the GPU tests named after it, the short table last:
#   bash docs/gpu/probe.sh PLAN LOGNAME [PYTEST_ARGS...]     (the jsonschema wheels carried in .whl)
# Back in $OUT: LOGNAME, probe.json/.log and, with tests, tests.xml/.log.
source "$(dirname "$0")/setup.sh" "$2"
plan=$1
shift 2
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 ${PROBE_S:-240} python3 docs/gpu/variants_probe.py --plan "$plan" --rounds 3 --json "$OUT/probe.json" \
  > "$OUT/probe.log" 2>&1 || echo "probe exit $?"
grep -v " round " "$OUT/probe.log" | tail -20
if [ $# -gt 0 ]; then
  timeout -k 5 ${TEST_S:-200} python3 -m pytest -m gpu "$@" -q -p no:cacheprovider --junitxml "$OUT/tests.xml" \
    > "$OUT/tests.log" 2>&1 || echo "tests exit $?"
  tail -3 "$OUT/tests.log"
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

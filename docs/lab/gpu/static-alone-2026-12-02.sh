#!/usr/bin/env bash
# The compiled static cache's two cells (B1, B8, prompt 512), each implementation alone in its
# own process from a fresh compiled state, twice in turn (sdpa, op, sdpa, op), so that the
# spread between processes shows beside the ratio. About 5 minutes:
#   bash docs/lab/gpu/static-alone-2026-12-02.sh      (with the jsonschema wheels carried in .whl)
# Back in $OUT: static-alone.log, alone_<impl>_<turn>.json.
source "$(dirname "$0")/../../gpu/setup.sh" static-alone.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
for turn in 1 2; do
  for impl in sdpa op; do
    echo "== turn $turn: $impl"; date +%T
    timeout -k 5 75 python3 -m flashtune.experiments.benchmarks.bench_serving \
      --only $impl --modes static --batches 1,8 --static-prompts 512 --rounds 3 \
      --json "$OUT/alone_${impl}_$turn.json" 2>&1 | grep -v -e DEBUG -e USDT -e Warning -e warn | tail -3 || true
  done
done
date +%T

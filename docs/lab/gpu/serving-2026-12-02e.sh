#!/usr/bin/env bash
# Issue 19 after the mask chain's fix (each continued static step now checks its mask with one
# host read, and a chain never starts after right padding), one call, about 7 minutes:
#   bash docs/lab/gpu/serving-2026-12-02e.sh      (with the jsonschema wheels carried in .whl)
# 1. the compiled static cache (B1, B8, prompt 512), each implementation alone in its own process
#    from a fresh compiled state, twice in turn (sdpa, op, sdpa, op): tokens/s and host syncs;
# 2. the eager dynamic-cache and padded-batch cells (B1, B8 x prompts 512, 2k, 8k), both
#    implementations in one process, interleaved rounds;
# 3. the serving GPU tests.
# Back in $OUT: serving-e.log, alone_<impl>_<turn>.json, eager_padded.json, serving_tests.xml.
source "$(dirname "$0")/../../gpu/setup.sh" serving-e.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
for turn in 1 2; do
  for impl in sdpa op; do
    echo "== 1. static, turn $turn: $impl"; date +%T
    timeout -k 5 75 python3 -m flashtune.experiments.benchmarks.bench_serving \
      --only $impl --modes static --batches 1,8 --static-prompts 512 --rounds 3 \
      --json "$OUT/alone_${impl}_$turn.json" 2>&1 | grep -v -e DEBUG -e USDT -e Warning -e warn | tail -3 || true
  done
done
echo "== 2. eager and padded"; date +%T
timeout -k 5 200 python3 -m flashtune.experiments.benchmarks.bench_serving --modes eager,padded --rounds 2 \
  --budget-s 170 --json "$OUT/eager_padded.json" 2>&1 | grep -v -e DEBUG -e USDT -e Warning -e warn | tail -12 || true
echo "== 3. serving GPU tests"; date +%T
timeout -k 5 90 python3 -m pytest -m gpu tests/gpu/test_serving_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/serving_tests.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -8
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

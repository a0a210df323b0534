#!/usr/bin/env bash
# Issue 19, one call, about 8 minutes:
#   bash docs/lab/gpu/serving-2026-12-03.sh      (with the jsonschema wheels carried in .whl)
# 1. the serving GPU tests, with the new empty-store prefill default (the Gluon ping-pong at
#    head_dim 128/256 on sm90; key ranges served by a baseline that takes them);
# 2. host us per decode call, two processes: back to back (as before) and each call issued to an
#    idle GPU (a sync before each: the call's own host cost, whatever its kernel's length);
# 3. the compiled static cache (B1, B8, prompt 512), each implementation alone in its own process
#    from a fresh compiled state, twice in turn (sdpa, op, sdpa, op);
# 4. the eager dynamic-cache and padded-batch cells (B1, B8 x prompts 512, 2k, 8k), both
#    implementations in one process, 5 interleaved rounds (op/SDPA of the medians, and paired:
#    the median of each round's own ratio).
# Back in $OUT: serving-f.log, serving_tests.xml, host_time_<n>.json, alone_<impl>_<turn>.json,
# eager_padded.json.
source "$(dirname "$0")/../../gpu/setup.sh" serving-f.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
quiet() { grep -v -e DEBUG -e USDT -e Warning -e warn; }
echo "== 1. serving GPU tests"; date +%T
timeout -k 5 ${TEST_S:-110} python3 -m pytest -m gpu tests/gpu/test_serving_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/serving_tests.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -12
for n in 1 2; do
  echo "== 2. host time, process $n"; date +%T
  timeout -k 5 70 python3 -m flashtune.experiments.benchmarks.bench_host_time --calls 1000 \
    --json "$OUT/host_time_$n.json" 2>&1 | quiet | tail -20 || true
done
for turn in 1 2; do
  for impl in sdpa op; do
    echo "== 3. static, turn $turn: $impl"; date +%T
    timeout -k 5 75 python3 -m flashtune.experiments.benchmarks.bench_serving \
      --only $impl --modes static --batches 1,8 --static-prompts 512 --rounds 3 \
      --json "$OUT/alone_${impl}_$turn.json" 2>&1 | quiet | tail -3 || true
  done
done
echo "== 4. eager and padded"; date +%T
timeout -k 5 ${EAGER_S:-190} python3 -m flashtune.experiments.benchmarks.bench_serving --modes eager,padded --rounds 5 \
  --budget-s $(( ${EAGER_S:-190} - 30 )) --json "$OUT/eager_padded.json" 2>&1 | quiet | tail -12 || true
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

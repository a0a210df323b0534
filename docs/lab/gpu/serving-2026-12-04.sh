#!/usr/bin/env bash
# Issue 19, one call, about 8 minutes, on main after the padded dynamic-cache mask chain (7f08a91,
# never run on the GPU) and the review mends since the last serving calls:
#   bash docs/lab/gpu/serving-2026-12-04.sh      (with the jsonschema wheels carried in .whl)
# 1. GPU tests: serving; decode's per-sequence lengths, CUDA graphs, fused-vs-launched combine;
# 2. host us per decode call (one process);
# 3. the eager dynamic-cache and padded-batch cells, B1/B8 x prompts 512, 2k, 8k, both
#    implementations in one process, 5 interleaved rounds (paired ratios);
# 4. the compiled static cache, B1/B8 x prompts 512, 2k, 8k, each implementation alone in its own
#    process (sdpa, then op).
# Back in $OUT: serving.log, *_tests.xml, host_time.json, eager_padded.json, alone_<impl>.json.
source "$(dirname "$0")/../../gpu/setup.sh" ${LOG:-serving.log}
export FLASHTUNE_STORE="$OUT/empty_store.json"
quiet() { grep -v -e DEBUG -e USDT -e Warning -e warn; }
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: parts 3 and 4 alone
echo "== 1. GPU tests"; date +%T
timeout -k 5 90 python3 -m pytest -m gpu tests/gpu/test_serving_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/serving_tests.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -8
timeout -k 5 60 python3 -m pytest -m gpu tests/gpu/test_decode_gpu.py -q -p no:cacheprovider \
  -k "per_sequence or cuda_graph or capture or fused or default" \
  --junitxml "$OUT/decode_tests.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -8
echo "== 2. host time"; date +%T
timeout -k 5 50 python3 -m flashtune.experiments.benchmarks.bench_host_time --calls 1000 \
  --json "$OUT/host_time.json" 2>&1 | quiet | tail -14 || true
fi
echo "== 3. eager and padded"; date +%T
timeout -k 5 130 python3 -m flashtune.experiments.benchmarks.bench_serving --modes eager,padded --rounds 5 \
  --budget-s 110 --json "$OUT/eager_padded.json" 2>&1 | quiet | tail -16 || true
for impl in sdpa op; do
  echo "== 4. static alone: $impl"; date +%T
  timeout -k 5 ${STATIC_S:-110} python3 -m flashtune.experiments.benchmarks.bench_serving \
    --only $impl --modes static --batches 1,8 --static-prompts 512,2048,8192 --rounds 3 \
    --budget-s $(( ${STATIC_S:-110} - 15 )) --json "$OUT/alone_${impl}.json" 2>&1 | quiet | tail -8 || true
done
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

#!/usr/bin/env bash
# Issue 19, second call (after docs/lab/gpu/serving-2026-12-03.sh): a batch with per-sequence key
# ranges in a cache of at most 4,096 keys keeps the fused combine (kernels.decode.default_combine;
# was the launched one, a second launch a call). About 4 minutes:
#   bash docs/lab/gpu/serving-2026-12-03b.sh      (with the jsonschema wheels carried in .whl)
# 1. GPU tests: serving; decode's per-sequence lengths, CUDA graphs and fused-vs-launched;
# 2. host us per decode call (now with a batch-8 short cache, 8,32/8,2048);
# 3. the padded batch (B8, prompts 512 and 2048; the eager cells of the first call's B8 2048
#    too), 5 interleaved rounds;
# 4. the compiled static cache at B8 (its decode steps pass key ranges), each implementation
#    alone in its own process, one turn.
# Back in $OUT: serving-g.log, *_tests.xml, host_time.json, padded.json, alone_<impl>.json.
source "$(dirname "$0")/../../gpu/setup.sh" serving-g.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
quiet() { grep -v -e DEBUG -e USDT -e Warning -e warn; }
echo "== 1. GPU tests"; date +%T
timeout -k 5 80 python3 -m pytest -m gpu tests/gpu/test_serving_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/serving_tests.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -8
timeout -k 5 60 python3 -m pytest -m gpu tests/gpu/test_decode_gpu.py -q -p no:cacheprovider \
  -k "per_sequence or cuda_graph or capture or fused or default" \
  --junitxml "$OUT/decode_tests.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -8
echo "== 2. host time"; date +%T
timeout -k 5 70 python3 -m flashtune.experiments.benchmarks.bench_host_time --calls 1000 \
  --json "$OUT/host_time.json" 2>&1 | quiet | tail -22 || true
echo "== 3. padded"; date +%T
timeout -k 5 100 python3 -m flashtune.experiments.benchmarks.bench_serving --modes padded,eager --batches 8 \
  --prompts 512,2048 --rounds 5 --budget-s 80 --json "$OUT/padded.json" 2>&1 | quiet | tail -6 || true
for impl in sdpa op; do
  echo "== 4. static B8: $impl"; date +%T
  timeout -k 5 60 python3 -m flashtune.experiments.benchmarks.bench_serving \
    --only $impl --modes static --batches 8 --static-prompts 512 --rounds 3 \
    --json "$OUT/alone_${impl}.json" 2>&1 | quiet | tail -2 || true
done
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

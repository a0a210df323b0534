#!/usr/bin/env bash
# The merged tree of the 2026-12-01 (fourth) session on the H200, one call of under 9 minutes:
#   bash docs/lab/gpu/merged-2026-12-01c.sh      (with the jsonschema wheels carried in .whl)
# 1. GPU tests of what changed: serving (key ranges in bf16, the bound decode launch, the op
#    captured by torch.compile(mode="reduce-overhead")), decode (fused combine default),
#    lean_ws_oneloop numerics, the SDPA peers;
# 2. host time per eager decode call (bench_host_time: op, op + key ranges, the transformers
#    attention function, SDPA cuDNN/flash, each output checked);
# 3. the serving table (bench_serving): static cache compiled first (its GPU row failed in the
#    earlier run), then eager dynamic cache and the left-padded batch.
# Back in $OUT: merged.log, gpu_tests.xml, host_time.json, serving_static.json, serving.json.
source "$(dirname "$0")/../../gpu/setup.sh" merged.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 170 python3 -m pytest -m gpu tests/gpu/test_serving_gpu.py tests/gpu/test_decode_gpu.py \
  tests/gpu/test_oneloop_gpu.py tests/gpu/test_peers_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -15
timeout -k 5 90 python3 -m flashtune.experiments.benchmarks.bench_host_time --json "$OUT/host_time.json" 2>&1 | tail -25
timeout -k 5 110 python3 -m flashtune.experiments.benchmarks.bench_serving --modes static --budget-s 80 --json "$OUT/serving_static.json" 2>&1 | grep -v DEBUG | tail -15
timeout -k 5 120 python3 -m flashtune.experiments.benchmarks.bench_serving --modes eager,padded --budget-s 90 --json "$OUT/serving.json" 2>&1 | grep -v DEBUG | tail -20

#!/usr/bin/env bash
# The session's merged tree (issues 19, 20 part P + F, 21) on the H200, one call, about 7 minutes:
#   bash docs/lab/gpu/merged-2026-12-02c.sh      (with the jsonschema wheels carried in .whl)
# 1. the Gluon kernel's numerics after the merge of its persistent grid (u20p) and fp8 (u20f),
#    against the float32 reference: tests/gpu/test_gluon_gpu.py and test_gluon_fp8_gpu.py;
# 2. issue 19's serving table on the merged tree (docs/lab/gpu/u19b.sh's steps: static cache
#    compiled, each implementation alone; the online re-tuner in a generate loop; eager and
#    padded cells; host time a decode call beside SDPA's).
# Back in $OUT: merged-c.log, gluon_tests.xml, serving_static.json, online.json, serving.json,
# host_time.json.
source "$(dirname "$0")/../../gpu/setup.sh" merged-c.log
git log --oneline -1 2>/dev/null || true
export FLASHTUNE_STORE="$OUT/empty_store.json"
echo "== 1. Gluon numerics (persistent + fp8 merged)"; date +%T
timeout -k 5 ${TEST_S:-150} python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py tests/gpu/test_gluon_fp8_gpu.py -q \
  -p no:cacheprovider --junitxml "$OUT/gluon_tests.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -12
echo "== 2. serving"; date +%T
timeout -k 5 100 python3 -m flashtune.experiments.benchmarks.bench_serving --modes static --rounds 3 \
  --json "$OUT/serving_static.json" 2>&1 | grep -v -e DEBUG -e USDT -e Warning -e warn | tail -6 || true
timeout -k 5 30 python3 -m flashtune.experiments.benchmarks.bench_online_serving --rounds 5 --new-tokens 64 \
  --json "$OUT/online.json" 2>&1 | grep -v Warning | tail -6 || true
timeout -k 5 90 python3 -m flashtune.experiments.benchmarks.bench_serving --modes eager,padded --budget-s 70 \
  --json "$OUT/serving.json" 2>&1 | grep -v -e DEBUG -e USDT -e Warning -e warn | tail -12 || true
timeout -k 5 25 python3 -m flashtune.experiments.benchmarks.bench_host_time --calls 1000 \
  --json "$OUT/host_time.json" 2>&1 | grep -v Warning | tail -9 || true
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

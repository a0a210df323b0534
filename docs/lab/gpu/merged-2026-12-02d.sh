#!/usr/bin/env bash
# Issue 19's open measurements on the tree as it is (no kernel or serving code changed since
# merged-2026-12-02c.sh), one call, about 6 minutes:
#   bash docs/lab/gpu/merged-2026-12-02d.sh      (with the jsonschema wheels carried in .whl)
# 1. the online re-tuner inside a generate loop, with the time it needs (its step hit a 30 s cap
#    in the c call): attached / forced re-tune against plain, interleaved rounds;
# 2. host time a decode call, twice in two processes (the c call read 25.0 us at B1, t19's 17.6);
# 3. the compiled static cache, both implementations in one process (B1, B8; each alone:
#    docs/lab/gpu/static-alone-2026-12-02.sh);
# 4. the serving GPU tests.
# Back in $OUT: merged-d.log, online.json, host_time_1.json, host_time_2.json, serving_static.json,
# serving_tests.xml.
source "$(dirname "$0")/../../gpu/setup.sh" merged-d.log
git log --oneline -1 2>/dev/null || true
export FLASHTUNE_STORE="$OUT/empty_store.json"
echo "== 1. online re-tuner"; date +%T
timeout -k 5 170 python3 -m flashtune.experiments.benchmarks.bench_online_serving --rounds 6 --new-tokens 96 \
  --json "$OUT/online.json" 2>&1 | grep -v Warning | tail -8 || true
for i in 1 2; do
  echo "== 2.$i host time"; date +%T
  timeout -k 5 40 python3 -m flashtune.experiments.benchmarks.bench_host_time --calls 1000 \
    --json "$OUT/host_time_$i.json" 2>&1 | grep -v Warning | tail -9 || true
done
echo "== 3. static compiled"; date +%T
timeout -k 5 110 python3 -m flashtune.experiments.benchmarks.bench_serving --modes static --rounds 3 \
  --json "$OUT/serving_static.json" 2>&1 | grep -v -e DEBUG -e USDT -e Warning -e warn | tail -6 || true
echo "== 4. serving GPU tests"; date +%T
timeout -k 5 90 python3 -m pytest -m gpu tests/gpu/test_serving_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/serving_tests.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -8
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

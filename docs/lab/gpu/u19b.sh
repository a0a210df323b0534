#!/usr/bin/env bash
# Issue 19, branch u19, GPU call 2 (about 3.5 minutes on the H200): the serving table on the tree
# with the static-cache mask chain (a decode step's mask that continues the last checked one: no
# host read, 3 ops) and the tuner's routed prepared calls:
#   bash docs/lab/gpu/u19b.sh      (with the jsonschema wheels carried in .whl)
# 1. static cache compiled (bench_serving --modes static: each implementation alone from a fresh
#    compiled state, 3 rounds), B1 and B8, prompt 512, teacher-forced logits against SDPA's;
# 2. the online re-tuner in an eager generate loop (bench_online_serving, 5 rounds);
# 3. eager dynamic cache B1/B8 and the left-padded batch B8, prompts 512/2k/8k (2 rounds,
#    interleaved; cells past the budget are skipped and say so);
# 4. host us per eager decode call beside SDPA's (bench_host_time --calls 1000).
# Back in $OUT: u19b.log, serving_static.json, online.json, serving.json, host_time.json.
source "$(dirname "$0")/../../gpu/setup.sh" u19b.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 100 python3 -m flashtune.experiments.benchmarks.bench_serving --modes static --rounds 3 \
  --json "$OUT/serving_static.json" 2>&1 | grep -v -e DEBUG -e USDT -e Warning -e warn | tail -6 || true
timeout -k 5 30 python3 -m flashtune.experiments.benchmarks.bench_online_serving --rounds 5 --new-tokens 64 \
  --json "$OUT/online.json" 2>&1 | grep -v Warning | tail -6 || true
timeout -k 5 100 python3 -m flashtune.experiments.benchmarks.bench_serving --modes eager,padded --budget-s 80 \
  --json "$OUT/serving.json" 2>&1 | grep -v -e DEBUG -e USDT -e Warning -e warn | tail -12 || true
timeout -k 5 25 python3 -m flashtune.experiments.benchmarks.bench_host_time --calls 1000 \
  --json "$OUT/host_time.json" 2>&1 | grep -v Warning | tail -9 || true

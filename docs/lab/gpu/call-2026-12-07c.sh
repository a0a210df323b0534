#!/usr/bin/env bash
# 2026-12-07, third session: the one call that got a machine (an H200), run as one command line.
# On an H200, issue 42: the packed kernels' timings, then generate_batch of 64 requests with sdpa,
# the op (varlen and block-table), and torch's varlen attention (one timed round: the budget).
# On an H100, issue 44: the sanitizer tables (carry resume/ with the H100's verdicts).
#   bash docs/lab/gpu/call-2026-12-07c.sh      (carry [".whl", "resume"]; about 310 s on the H200)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  STEPS=kernels KERNELS_S=60 bash docs/gpu/continuous-batching.sh 2>&1 | tail -25
  mv "$OUT/cb.log" "$OUT/cb_kernels.log"
  bash -c 'source docs/gpu/setup.sh cb.log; date +%T
    timeout -k 10 240 python3 -m flashtune.experiments.benchmarks.bench_continuous_batching --requests 64 \
      --implementations sdpa,op,op-paged,torch-varlen --rounds 1 --out "$OUT/cb.json" || echo bench exit $?
    date +%T' 2>&1 | tail -30
else
  TESTS_S=0 BATCH=8 TABLES_S=220 bash docs/gpu/sanitize.sh 2>&1 | tail -40
fi

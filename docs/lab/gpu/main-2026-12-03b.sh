#!/usr/bin/env bash
# The merged tree of 2026-12-03 (the Gluon kernel's zigzag grid and EXP2_POLY from branch h20k,
# whose own calls ran filtered test selections), one call:
#   bash docs/lab/gpu/main-2026-12-03b.sh      (with the jsonschema wheels carried in .whl)
# 1. the whole Gluon GPU test files, bf16/fp16 and fp8, on the merged kernel;
# 2. D64 causal and D64 full again, the persistent grid in both orders beside the tiles grid and
#    the recorded best, peers in the same run (h20k's call 2 read every Gluon config at D64 full
#    20-35 % below its call 1: settle it).
# Back in $OUT: gpu-tests.log, <file>.xml, peers.log, peers.json.
bash "$(dirname "$0")/main-2026-12-02f.sh" test_gluon_gpu:170 test_gluon_fp8_gpu:80
source "$(dirname "$0")/../../gpu/setup.sh" peers.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
cfg() { echo "{\"loads\": \"gluon_pingpong\", \"BLOCK_M\": 128, \"BLOCK_N\": 128, \"num_warps\": 4, \"num_stages\": 2, \"grid\": \"$1\", \"tile_order\": \"$2\"}"; }
ALSO=(--also "$(cfg tiles longest_first)" --also "$(cfg persistent head_major)" --also "$(cfg persistent_zigzag head_major)")
timeout -k 5 ${BENCH_S:-90} python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --top 1 --rounds 3 --only b8_h16_n2048_d64_causal_bfloat16 \
  --only b16_h16_n1024_d64_full_bfloat16 "${ALSO[@]}" --json "$OUT/peers.json" 2>&1 | tail -12
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

#!/usr/bin/env bash
# Issue 20, D64 causal (branch h20k), first call: the Gluon ping-pong with a share of P's exp2
# as a polynomial on the FMA pipe (loads="gluon_pingpong_poly", EXP2_POLY of every 16).
#   bash docs/lab/gpu/h20k-call1.sh      (with the jsonschema wheels carried in .whl)
# Runs at commit e26aaab only: the loads value it times left the space after this call
# (slower at every share; the share stays the kernel's EXP2_POLY, docs/lab/gpu/h20k_shares.py).
# 1. numerics of the new value against the float32 reference (every case of the file, odd
#    lengths, causal, GQA; every share 0-16 of 16 on D64 causal; many tiles a program);
# 2. the shares 0, 2, 3, 4, 6, 8 of 16 side by side with SDPA cuDNN/flash (docs/lab/gpu/h20k_shares.py)
#    on D64 causal, D64 full and D128 causal;
# 3. bench_peers on the 7 suite workloads: the Gluon bests of u20p beside the same configs
#    with the declared share, peers in the same run.
# Back in $OUT: h20k-call1.log, gpu_tests.xml, shares.json, peers.json.
source "$(dirname "$0")/../../gpu/setup.sh" h20k-call1.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
date +%T
timeout -k 5 ${TEST_S:-110} python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -k "poly" -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -8
date +%T
timeout -k 5 ${SHARES_S:-80} python3 docs/lab/gpu/h20k_shares.py --json "$OUT/shares.json" 2>&1 | tail -40
date +%T
cfg() { echo "{\"loads\": \"$1\", \"BLOCK_M\": 128, \"BLOCK_N\": $2, \"num_warps\": 4, \"num_stages\": 2, \"grid\": \"$3\", \"tile_order\": \"$4\"}"; }
ALSO=()
for loads in gluon_pingpong gluon_pingpong_poly; do
  ALSO+=(--also "$(cfg $loads 128 tiles longest_first)" --also "$(cfg $loads 128 persistent head_major)"
         --also "$(cfg $loads 128 persistent longest_first)" --also "$(cfg $loads 64 tiles head_major)")
done
timeout -k 5 ${BENCH_S:-110} python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --top 1 --rounds 3 "${ALSO[@]}" --json "$OUT/peers.json" 2>&1 | tail -24
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

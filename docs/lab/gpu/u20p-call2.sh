#!/usr/bin/env bash
# Issue 20, part P (branch u20p), second call (after docs/lab/gpu/u20p-call1.sh): the persistent
# grid with its causal order kept head by head (longest tile of each head first: call 1's
# (batch, head)-fastest order ran 6-14 % behind the tiles grid at D128 causal) and the output's
# store waited for a block into the next tile instead of at the tile's end.
#   bash docs/lab/gpu/u20p-call2.sh      (with the jsonschema wheels carried in .whl)
# 1. numerics again (the kernel's persistent loop changed): every persistent config, D64, the
#    strided inputs and the ordered turns across many tiles (the whole file ran in call 1);
# 2. with the peers, the workloads the change is about (causal, D64 full): the Gluon tiles and
#    persistent configs side by side (the lead's reserve left a short call).
# Back in $OUT: u20p-call2.log, gpu_tests.xml, peers.json.
source "$(dirname "$0")/../../gpu/setup.sh" u20p-call2.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
date +%T
timeout -k 5 ${TEST_S:-100} python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -k "persistent or d64 or strided" -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -8
date +%T
cfg() { echo "{\"loads\": \"$1\", \"BLOCK_M\": $2, \"BLOCK_N\": $3, \"num_warps\": 4, \"num_stages\": $4, \"grid\": \"$5\", \"tile_order\": \"$6\"}"; }
ALSO=()
for grid in tiles persistent; do
  ALSO+=(--also "$(cfg gluon_pingpong 128 128 2 $grid longest_first)" --also "$(cfg gluon_pingpong 128 128 2 $grid head_major)")
done
ALSO+=(--also "$(cfg gluon_pingpong 128 128 3 persistent head_major)")
timeout -k 5 ${BENCH_S:-150} python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --top 1 --rounds 3 --only b4_h32_n4096_d128_causal_bfloat16 \
  --only b1_h32_n16384_d128_causal_bfloat16 --only b8_h16_n2048_d64_causal_bfloat16 \
  --only b4_hq32kv8_n4096_d128_causal_bfloat16 --only b16_h16_n1024_d64_full_bfloat16 "${ALSO[@]}" --json "$OUT/peers.json" 2>&1 | tail -14
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

#!/usr/bin/env bash
# Issue 20, part P (branch u20p): the Gluon kernel's persistent grid, one call on the H200.
#   bash docs/lab/gpu/u20p-call1.sh      (with the jsonschema wheels carried in .whl)
# 1. numerics (tests/gpu/test_gluon_gpu.py: every Gluon variant, tiles and persistent grids,
#    against the float32 reference; persistent programs looping over many tiles, ordered
#    turns included; each pytest under its own timeout: a lost mbarrier phase would hang);
# 2. the suite (all 7 workloads) with the SDPA peers in the same run: the recorded bests,
#    the Gluon tiles configs that were best (BENCHMARKS.md, "FA3's ping-pong in Gluon") and
#    their persistent counterparts, side by side (bench_peers --also).
# Back in $OUT: u20p-call1.log, gpu_tests.xml, gpu_tests_ordered.xml, peers.json.
source "$(dirname "$0")/../../gpu/setup.sh" u20p-call1.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
date +%T
timeout -k 5 ${TEST_S:-100} python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -k "not ordered" -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -8
date +%T
timeout -k 5 ${ORDERED_S:-40} python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -k "ordered" -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests_ordered.xml" 2>&1 | tail -6
date +%T
cfg() { echo "{\"loads\": \"$1\", \"BLOCK_M\": $2, \"BLOCK_N\": $3, \"num_warps\": 4, \"num_stages\": $4, \"grid\": \"$5\", \"tile_order\": \"$6\"}"; }
ALSO=()
for grid in tiles persistent; do
  ALSO+=(--also "$(cfg gluon_pingpong 128 128 2 $grid longest_first)"
         --also "$(cfg gluon_pingpong 128 128 2 $grid head_major)"
         --also "$(cfg gluon_pingpong 256 64 3 $grid head_major)")
done
ALSO+=(--also "$(cfg gluon_pingpong 128 64 2 tiles head_major)" --also "$(cfg gluon_pingpong 128 32 2 persistent head_major)"
       --also "$(cfg gluon_pingpong 128 128 3 persistent head_major)" --also "$(cfg gluon_pingpong 256 64 3 persistent longest_first)")
timeout -k 5 ${BENCH_S:-150} python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --top 1 --rounds 3 "${ALSO[@]}" --json "$OUT/peers.json" 2>&1 | tail -14
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

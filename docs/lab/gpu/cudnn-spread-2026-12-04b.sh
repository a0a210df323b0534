#!/usr/bin/env bash
# Is bench_peers' SDPA cuDNN reading at D128 full (561-604 in three suite processes) the one a
# fresh process makes (609-616, docs/lab/gpu/cudnn_spread.py)? bench_peers on that workload alone:
# twice with the suite's configs beside it (13 functions a round), once with the recorded best
# only (4), then the small probe again. About 3 minutes; carry .whl.
#   bash docs/lab/gpu/cudnn-spread-2026-12-04b.sh
source "$(dirname "$0")/../../gpu/setup.sh" spread2.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
cfg() { echo "{\"loads\": \"$5\", \"BLOCK_M\": 128, \"BLOCK_N\": $1, \"num_warps\": 4, \"num_stages\": $2, \"grid\": \"$3\", \"tile_order\": \"$4\"}"; }
ALSO=()
for l in gluon_pingpong gluon_pingpong_poly; do
  ALSO+=(--also "$(cfg 128 2 tiles longest_first $l)" --also "$(cfg 128 2 persistent head_major $l)"
         --also "$(cfg 128 2 persistent_zigzag head_major $l)" --also "$(cfg 128 2 persistent_zigzag longest_first $l)"
         --also "$(cfg 64 2 tiles longest_first $l)")
done
T=(--tables experiments/data/h200_grown --tables experiments/data/h200_lean --tables experiments/data/h200_gluon)
for run in many-1 many-2 few; do
  extra=("${ALSO[@]}"); [ $run = few ] && extra=()
  python3 -m flashtune.experiments.benchmarks.bench_peers "${T[@]}" --only b4_h32_n4096_d128_full_bfloat16 --top 1 \
    --rounds 3 "${extra[@]}" --json "$OUT/$run.json" > "$OUT/$run.log" 2>&1 || echo "$run exit $?"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[0]; print(sys.argv[2], 'cuDNN', round(r['sdpa_cudnn']), 'flash', round(r['sdpa_flash']), 'ours', round(r['flashtune']))" "$OUT/$run.json" $run
done
python3 docs/lab/gpu/cudnn_spread.py --after-ours

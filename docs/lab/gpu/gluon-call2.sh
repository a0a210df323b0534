#!/usr/bin/env bash
# Issue 20, part A, second call (after docs/lab/gpu/gluon-call1.sh): the ordered ping-pong
# (loads gluon_pingpong_ordered: the two consumer groups' GEMMs take turns) and a profile.
#   bash docs/lab/gpu/gluon-call2.sh      (with the jsonschema wheels carried in .whl)
# 1. numerics of every Gluon variant again (the kernel's loop changed), then of the ordered
#    one on its own (a turn never handed over would hang: its own timeout, and timing skips it);
# 2. Nsight Compute (SpeedOfLight, occupancy, warp states, stall reasons) of the Gluon tiles
#    beside the recorded bests at D128 and D256 (full);
# 3. the ordered and free-running ping-pong tiles beside the recorded bests and the SDPA peers.
# Back in $OUT: gluon-call2.log, gpu_tests.xml, gpu_tests_ordered.xml, ncu_raw.csv, peers.json.
source "$(dirname "$0")/../../gpu/setup.sh" gluon-call2.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 ${TEST_S:-90} python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -k "not ordered" -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -6
timeout -k 5 ${ORDERED_S:-50} python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -k ordered -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests_ordered.xml" 2>&1 | tail -6
ordered_rc=$?
echo "ordered tests rc $ordered_rc"
cfg() { echo "{\"loads\": \"$1\", \"BLOCK_M\": $2, \"BLOCK_N\": $3, \"num_warps\": $4, \"num_stages\": $5, \"grid\": \"$6\"}"; }
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  SECT=""; for s in SpeedOfLight LaunchStats Occupancy ComputeWorkloadAnalysis WarpStateStats; do SECT="$SECT --section $s"; done
  timeout -k 5 ${NCU_S:-60} "$NCU" --clock-control none --target-processes all -k regex:"attention" $SECT -f -o "$OUT/ncu" \
    python3 docs/lab/tools/ncu_metrics.py target b4_h32_n4096_d128_full_bfloat16 b2_h16_n8192_d256_full_bfloat16 \
    --config "$(cfg tma_ws 128 128 8 3 tiles)" --config "$(cfg tma 128 64 8 2 persistent)" \
    --config "$(cfg gluon_pingpong 128 128 4 2 tiles)" --config "$(cfg gluon_pingpong 128 64 4 2 tiles)"
  timeout 30 "$NCU" --import "$OUT/ncu.ncu-rep" --csv --page raw > "$OUT/ncu_raw.csv"
  rm -f "$OUT/ncu.ncu-rep"
else
  echo "no ncu found"
fi
LF='"tile_order": "longest_first"'
ALSO=(--also "{\"loads\": \"gluon_pingpong\", \"BLOCK_M\": 128, \"BLOCK_N\": 128, \"num_warps\": 4, \"num_stages\": 2, $LF}"
      --also "{\"loads\": \"gluon_pingpong\", \"BLOCK_M\": 128, \"BLOCK_N\": 64, \"num_warps\": 4, \"num_stages\": 2}"
      --also "{\"loads\": \"gluon_pingpong\", \"BLOCK_M\": 256, \"BLOCK_N\": 64, \"num_warps\": 4, \"num_stages\": 3}")
if [ "$ordered_rc" = 0 ]; then
  ALSO+=(--also "{\"loads\": \"gluon_pingpong_ordered\", \"BLOCK_M\": 128, \"BLOCK_N\": 128, \"num_warps\": 4, \"num_stages\": 2, $LF}"
         --also "{\"loads\": \"gluon_pingpong_ordered\", \"BLOCK_M\": 128, \"BLOCK_N\": 64, \"num_warps\": 4, \"num_stages\": 2}"
         --also "{\"loads\": \"gluon_pingpong_ordered\", \"BLOCK_M\": 256, \"BLOCK_N\": 64, \"num_warps\": 4, \"num_stages\": 3}")
else
  echo "ordered ping-pong failed its tests: not timed"
fi
timeout -k 5 ${BENCH_S:-110} python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --top 1 --rounds 3 "${ALSO[@]}" --json "$OUT/peers.json" 2>&1 | tail -14
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

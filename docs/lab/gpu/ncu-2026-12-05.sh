#!/usr/bin/env bash
# Issue 20, deliverable 4: Nsight Compute of the suite's new bests beside the old ones, and of fp8.
#   bash docs/lab/gpu/ncu-2026-12-05.sh      (with the jsonschema wheels carried in .whl)
# One launch of each config (ncu --clock-control none: the card's own clocks, METHOD.md), sections
# SpeedOfLight, LaunchStats, Occupancy, ComputeWorkloadAnalysis, WarpStateStats, plus the SM clock
# and the instruction count (ncu_metrics HEADLINES):
#   D128 full  : the old best (tma_ws 128x128 8w 3st, 2026-11-30's space) / the re-timed best (Gluon
#                ping-pong 128x128 2st, persistent zigzag, longest first)
#   D256 full  : the old best (tma persistent 128x64 8w 2st) / the re-timed best (ping-pong 128x64 2st)
#   D64 full   : the re-timed best (polynomial ping-pong 128x128 2st, persistent zigzag)
#   fp8 D128 (2,32,8192,128): polynomial and plain ping-pong 128x128 2st, and the same kernel in bf16
#   fp8 D256 (2,16,8192,256): ordered 128x128 2st
# Back in $OUT: ncu.log, ncu_<part>.csv (ncu --page raw), nvidia-smi before and after.
source "$(dirname "$0")/../../gpu/setup.sh" ncu.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu found"; exit 1; }
"$NCU" --version | tail -1
"$NCU" --query-metrics > "$OUT/query.txt" 2>&1
METRICS=$(python3 docs/lab/tools/ncu_metrics.py metrics "$OUT/query.txt")
SECT=""; for s in SpeedOfLight LaunchStats Occupancy ComputeWorkloadAnalysis WarpStateStats; do SECT="$SECT --section $s"; done
cfg() { echo "{\"loads\": \"$1\", \"BLOCK_M\": $2, \"BLOCK_N\": $3, \"num_warps\": $4, \"num_stages\": $5, \"grid\": \"$6\", \"tile_order\": \"$7\", \"use_fp8\": ${8:-false}}"; }
profile() {  # part workload config...
  local part=$1 workload=$2; shift 2
  local args=(); for c in "$@"; do args+=(--config "$c"); done
  echo "== $part $workload"
  timeout -k 5 ${NCU_S:-90} "$NCU" --clock-control none --target-processes all -k regex:"attention_kernel|attention_forward" \
    $SECT --metrics "$METRICS" -f -o "$OUT/ncu_$part" \
    python3 docs/lab/tools/ncu_metrics.py target "$workload" "${args[@]}" 2>&1 | grep -v "^==PROF==" | tail -8
  timeout 60 "$NCU" --import "$OUT/ncu_$part.ncu-rep" --csv --page raw > "$OUT/ncu_$part.csv" && rm -f "$OUT/ncu_$part.ncu-rep"
}
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
profile d128 b4_h32_n4096_d128_full_bfloat16 "$(cfg tma_ws 128 128 8 3 tiles head_major)" \
  "$(cfg gluon_pingpong 128 128 4 2 persistent_zigzag longest_first)"
profile d256 b2_h16_n8192_d256_full_bfloat16 "$(cfg tma 128 64 8 2 persistent head_major)" \
  "$(cfg gluon_pingpong 128 64 4 2 tiles head_major)"
profile d64 b16_h16_n1024_d64_full_bfloat16 "$(cfg gluon_pingpong_poly 128 128 4 2 persistent_zigzag longest_first)"
profile fp8d128 2,32,8192,128 "$(cfg gluon_pingpong_poly 128 128 4 2 tiles head_major true)" \
  "$(cfg gluon_pingpong 128 128 4 2 tiles head_major true)" "$(cfg gluon_pingpong 128 128 4 2 tiles head_major)"
profile fp8d256 2,16,8192,256 "$(cfg gluon_pingpong_ordered 128 128 4 2 tiles head_major true)"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
ls -la "$OUT"

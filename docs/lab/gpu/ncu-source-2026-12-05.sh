#!/usr/bin/env bash
# Issue 20: where fp8 D128's block loop waits, instruction by instruction (Nsight Compute's
# warp-state sampling of the SASS) for the fp8 polynomial ping-pong 128x128 2st on 2,32,8192,128:
#   bash docs/lab/gpu/ncu-source-2026-12-05.sh      (with the jsonschema wheels carried in .whl)
# Back in $OUT: ncu-source.log, source.csv (ncu --page source --print-source sass: per SASS
# instruction, its stall samples by reason), details.csv (the sections, --page details).
source "$(dirname "$0")/../../gpu/setup.sh" ncu-source.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu found"; exit 1; }
CFG='{"loads": "gluon_pingpong_poly", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "grid": "tiles", "tile_order": "head_major", "use_fp8": true}'
timeout -k 5 ${NCU_S:-150} "$NCU" --clock-control none --target-processes all -k regex:"attention_kernel|attention_forward" \
  --section SourceCounters --section WarpStateStats --section InstructionStats --section SchedulerStats \
  --import-source no -f -o /tmp/src \
  python3 docs/lab/tools/ncu_metrics.py target 2,32,8192,128 --config "$CFG" 2>&1 | grep -v "^==PROF==" | tail -5
timeout 90 "$NCU" --import /tmp/src.ncu-rep --page source --print-source sass --csv > "$OUT/source.csv" 2> "$OUT/source.err" || echo "source page exit $?"
timeout 60 "$NCU" --import /tmp/src.ncu-rep --page details --csv > "$OUT/details.csv" || echo "details exit $?"
wc -l "$OUT"/*.csv; head -c 1500 "$OUT/source.csv"; echo; tail -3 "$OUT/source.err"
ls -la /tmp/src.ncu-rep

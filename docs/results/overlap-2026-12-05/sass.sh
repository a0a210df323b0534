#!/usr/bin/env bash
# The SASS behind OVERLAP_PV and ROWSUM_MMA, compiled for sm90 on the CPU (no GPU), about 2 minutes.
# Both flags have left the kernel; this ran at commit d9d54e9 (git checkout d9d54e9 -- kernels/ to rerun;
# its OVERLAP_PV was the first form, the K-stage release after a reduction of the row sums):
#   bash docs/results/overlap-2026-12-05/sass.sh > docs/results/overlap-2026-12-05/sass.log
PY=${PY:-python}
count() { $PY docs/lab/tools/sass_count.py --ops FADD,FMUL,FFMA,FMNMX,MUFU,HGMMA,QGMMA,BAR "$@"; }
PP='{"loads": "gluon_pingpong", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2}'
PPZ='{"loads": "gluon_pingpong", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "grid": "persistent_zigzag", "tile_order": "longest_first"}'
F8='{"loads": "gluon_pingpong_poly", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "use_fp8": true}'
echo "## bf16 D128 ping-pong 128x128 2st (4,32,4096,128): plain, OVERLAP_PV"
count --workload 4,32,4096,128 --config "$PP" --schedule
count --workload 4,32,4096,128 --config "$PP" --schedule --extra OVERLAP_PV=true
echo "## bf16 D128 the re-timed best (persistent zigzag): plain, OVERLAP_PV, ROWSUM_MMA"
count --workload 4,32,4096,128 --config "$PPZ"
count --workload 4,32,4096,128 --config "$PPZ" --extra OVERLAP_PV=true
count --workload 4,32,4096,128 --config "$PPZ" --extra ROWSUM_MMA=true
echo "## fp8 D128 polynomial ping-pong 128x128 2st (2,32,8192,128): plain, ROWSUM_MMA, OVERLAP_PV, both"
count --workload 2,32,8192,128 --config "$F8" --schedule
count --workload 2,32,8192,128 --config "$F8" --extra ROWSUM_MMA=true
count --workload 2,32,8192,128 --config "$F8" --schedule --extra OVERLAP_PV=true
count --workload 2,32,8192,128 --config "$F8" --extra OVERLAP_PV=true --extra ROWSUM_MMA=true

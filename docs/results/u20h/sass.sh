#!/usr/bin/env bash
# SASS of permuted vs permuted_h2 (issue 20 part F, third step), compiled for sm90 on the CPU.
#   bash docs/results/u20h/sass.sh   (from the repository root; writes docs/results/u20h/sass_*.json)
PY=${PY:-python}
OPS=FMUL,FADD,FFMA,MUFU,SHFL,PRMT,F2FP,HADD2,FSEL,FMNMX
R=docs/results/u20h
pp() { echo "{\"loads\": \"$1\", \"BLOCK_M\": 128, \"BLOCK_N\": $2, \"num_warps\": 4, \"num_stages\": 2, \"use_fp8\": true}"; }
for form in permuted permuted_h2; do
  $PY docs/lab/tools/sass_count.py --workload 2,32,8192,128 --config "$(pp gluon_pingpong 128)" \
    --fp8-p $form --ops $OPS --json $R/sass_${form}_d128.json
  $PY docs/lab/tools/sass_count.py --workload 2,16,8192,256 --config "$(pp gluon_pingpong 128)" \
    --config "$(pp gluon_pingpong_ordered 128)" --config "$(pp gluon_pingpong 64)" \
    --fp8-p $form --ops $OPS --json $R/sass_${form}_d256.json
  $PY docs/lab/tools/sass_count.py --workload 2,32/8,1000,128,causal --config "$(pp gluon_pingpong 128)" \
    --fp8-p $form --ops $OPS --json $R/sass_${form}_ragged.json
done

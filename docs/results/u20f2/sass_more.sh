cd "$(dirname "$0")/../../.."  # the repository root
t() { echo "{\"num_warps\": 4, \"use_fp8\": true, $1}"; }
for f in multiply exp2 permuted; do
  echo "## $f D256 pp128x128"; ${PY:-python} docs/lab/tools/sass_count.py --workload 2,16,8192,256 --fp8-p $f \
    --config "$(t '"BLOCK_M": 128, "loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 2')" \
    --config "$(t '"BLOCK_M": 128, "loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 3')" --json docs/results/u20f2/sass_d256_pp128_$f.json
done
for f in exp2 permuted; do
  echo "## $f D128 256-row"; ${PY:-python} docs/lab/tools/sass_count.py --workload 2,32,8192,128 --fp8-p $f \
    --config "$(t '"BLOCK_M": 256, "loads": "gluon_pingpong", "BLOCK_N": 64, "num_stages": 2')" \
    --config "$(t '"BLOCK_M": 256, "loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 2')" --json docs/results/u20f2/sass_d128_256rows_$f.json
done

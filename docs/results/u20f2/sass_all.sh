cd "$(dirname "$0")/../../.."  # the repository root
t() { echo "{\"BLOCK_M\": 128, \"num_warps\": 4, \"use_fp8\": true, $1}"; }
PP128='"loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 2'
PP128_3='"loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 3'
OR128='"loads": "gluon_pingpong_ordered", "BLOCK_N": 128, "num_stages": 2'
PP64='"loads": "gluon_pingpong", "BLOCK_N": 64, "num_stages": 2'
OR64='"loads": "gluon_pingpong_ordered", "BLOCK_N": 64, "num_stages": 2'
for f in multiply exp2 permuted; do
  echo "## $f D128"; ${PY:-python} docs/lab/tools/sass_count.py --workload 2,32,8192,128 --fp8-p $f \
    --config "$(t "$PP128")" --config "$(t "$PP128_3")" --config "$(t "$OR128")" --config "$(t "$PP64")" --json docs/results/u20f2/sass_d128_$f.json
  echo "## $f D256"; ${PY:-python} docs/lab/tools/sass_count.py --workload 2,16,8192,256 --fp8-p $f \
    --config "$(t "$PP64")" --config "$(t "$OR64")" --config "$(t "$OR128")" --json docs/results/u20f2/sass_d256_$f.json
  echo "## $f ragged causal GQA"; ${PY:-python} docs/lab/tools/sass_count.py --workload 2,32/8,1000,128,causal --fp8-p $f \
    --config "$(t "$PP128")" --json docs/results/u20f2/sass_ragged_$f.json
done
echo "## bf16 D128 / D256"
${PY:-python} docs/lab/tools/sass_count.py --workload 2,32,8192,128 --config '{"BLOCK_M": 128, "num_warps": 4, "loads": "gluon_pingpong", "BLOCK_N": 128, "num_stages": 2}' --json docs/results/u20f2/sass_d128_bf16.json
${PY:-python} docs/lab/tools/sass_count.py --workload 2,16,8192,256 --config '{"BLOCK_M": 128, "num_warps": 4, "loads": "gluon_pingpong", "BLOCK_N": 64, "num_stages": 2}' --json docs/results/u20f2/sass_d256_bf16.json

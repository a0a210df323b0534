#!/usr/bin/env bash
# Branch t22 (issue 22, one declaration per knob) on the H200, under 90 s:
#   bash docs/lab/gpu/t22.sh
# The launchers now take the plan's constexprs by name and its compile options as a mapping
# (kernels/gluon.py, kernels/lean.py) and the bound decode launch reads the combine kernel's
# constexprs by name (kernels/decode.py). On the CPU the Gluon kernel's Triton hash and PTX
# were unchanged for a sample of configs; this runs what only a GPU can show:
# 1. the Gluon kernel's numerics (every case of tests/gpu/test_gluon_gpu.py);
# 2. a lean and a one-loop sample (odd lengths, strided inputs);
# 3. decode: the fused combine against the launched one, and the bound launch against the
#    jit launch over a growing cache (BoundDecode's constexprs).
# Back in $OUT: t22.log.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/t22.log") 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
run() {  # seconds, then pytest arguments
  local limit=$1; shift
  timeout -k 5 "$limit" python3 -m pytest -m gpu -q -p no:cacheprovider "$@" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -8
}
echo "== 1. Gluon"; run 40 tests/gpu/test_gluon_gpu.py
echo "== 2. lean, one-loop"; run 20 tests/gpu/test_lean_gpu.py -k "odd_lengths and (777 or 4097) or strided" \
  tests/gpu/test_oneloop_gpu.py::test_strided_inputs
echo "== 3. decode"; run 20 tests/gpu/test_decode_gpu.py -k "fused_combine_matches or bound_decode_launch" \
  tests/gpu/test_serving_gpu.py::test_bound_decode_launch_equals_the_jit_launch_over_a_growing_cache

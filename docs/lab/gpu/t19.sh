#!/usr/bin/env bash
# Issue 19, the eager decode call's host time (branch t19), one call of about 60-90 s on the H200:
#   bash docs/lab/gpu/t19.sh      (with the jsonschema wheels carried in .whl, as for s19.sh)
# 1. GPU tests of the serving path (tests/gpu/test_serving_gpu.py): among them the bound decode
#    launch, which now passes the pointers to the compiled kernel as device addresses, bit-equal
#    to the jit launch over a growing cache, and the op under torch.compile(mode="reduce-overhead");
# 2. host us per eager decode call (bench_host_time --calls 1000: the op, op + key ranges, the
#    transformers function with ranges and without a mask, transformers' own sdpa function,
#    SDPA cuDNN/flash, all in the same run).
# 3. the same with FLASHTUNE_LAUNCH_ADDRESSES=0 first (tensors to the bound launch: before/after, one run).
# Back in $OUT: t19.log, gpu_tests.xml, host_time_tensors.json, host_time.json.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/t19.log") 2>&1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
git log --oneline -1 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 50 python3 -m pytest -m gpu tests/gpu/test_serving_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -6
# The same, with the bound launches handed tensors (the launcher's per-pointer data_ptr() and
# cuPointerGetAttribute, as before this branch): the address cut's before/after in one run.
FLASHTUNE_LAUNCH_ADDRESSES=0 timeout -k 5 30 python3 -m flashtune.experiments.benchmarks.bench_host_time \
  --calls 1000 --json "$OUT/host_time_tensors.json" 2>&1 | grep -v Warning | tail -9
timeout -k 5 30 python3 -m flashtune.experiments.benchmarks.bench_host_time --calls 1000 \
  --json "$OUT/host_time.json" 2>&1 | grep -v Warning | tail -9

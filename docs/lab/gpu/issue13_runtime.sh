#!/usr/bin/env bash
# Issue 13, runtime half, in one device call of about 5 minutes (limit 8): the runtime's GPU
# tests (decode class, CUDA-graph capture of a decode step, prepared calls), host time per
# call against a bare Triton launch (bench_dispatch), and greedy generation of a random
# Llama with the op against SDPA (bench_generate). Needs the jsonschema wheels in .whl
# (carry [".whl"]; see /work/.library/device/README.md). Results in $OUT; tables printed last.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
timeout -k 5 220 python3 -m pytest -m gpu tests/runtime/test_runtime_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
timeout -k 5 50 python3 docs/lab/tools/bench_dispatch.py --json "$OUT/dispatch.json" > "$OUT/dispatch.log" 2>&1
timeout -k 5 180 python3 -m flashtune.experiments.benchmarks.bench_generate --json "$OUT/generate.json" > "$OUT/generate.log" 2>&1
echo "== bench_dispatch (µs of host time per call) =="; tail -4 "$OUT/dispatch.log"
echo "== bench_generate =="; tail -8 "$OUT/generate.log"

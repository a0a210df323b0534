#!/usr/bin/env bash
# Issue 13, the decode kernel on the H200, in one call of under 9 minutes:
#   bash docs/gpu/decode.sh
# 1. the decode GPU tests (bf16/fp16 numerics, per-sequence lengths, CUDA-graph replay),
#    at most 2 minutes;
# 2. bench_decode: per shape of the table, a sweep of the decode space (every
#    config checked against the float32 reference, one JSON line each), then the best and
#    the default config against SDPA cuDNN/flash/efficient, interleaved; table last.
# Back in $OUT: decode.log, bench_decode.json, decode_sweep.tgz (the sweep tables).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/decode.log") 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
timeout "${TESTS_S:-120}" python3 -m pytest -m gpu tests/gpu/test_decode_gpu.py -q -p no:cacheprovider 2>&1 | tail -25
timeout "${BENCH_S:-400}" python3 -m flashtune.experiments.benchmarks.bench_decode --out /tmp/bench_decode
cp /tmp/bench_decode/bench_decode.json "$OUT/" 2>/dev/null
tar czf "$OUT/decode_sweep.tgz" -C /tmp/bench_decode decode_sweep 2>/dev/null

#!/usr/bin/env bash
# What the 2026-12-01 sessions built without device time, to check and measure in one call
# of under 9 minutes:
#   bash docs/lab/gpu/next.sh
# 1. GPU tests: the fused decode combine (bf16 against the launched combine, 20 calls in a
#    row so a missing fence shows; CUDA-graph replay with new lengths), the rest of the
#    decode suite, and the SDPA peers the main job prints on a GPU (objectives/peers.py);
# 2. bench_decode: issue 13's decode table again, with the fused combine's column ("fused
#    us": one launch a call instead of two).
# Then: if the fused combine is correct and faster on the short rows, make it a knob of
# DECODE_TUNABLES (IMPLIED "launch" for recorded tables) and the runtime's decode default.
# Back in $OUT: next.log, gpu_tests.xml, bench_decode.json, decode_sweep.tgz.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/next.log") 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
timeout -k 5 180 python3 -m pytest -m gpu tests/gpu/test_decode_gpu.py tests/gpu/test_peers_gpu.py -q \
  -p no:cacheprovider --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -25
timeout -k 5 330 python3 -m flashtune.experiments.benchmarks.bench_decode --out /tmp/bench_decode
cp /tmp/bench_decode/bench_decode.json "$OUT/" 2>/dev/null
tar czf "$OUT/decode_sweep.tgz" -C /tmp/bench_decode decode_sweep 2>/dev/null

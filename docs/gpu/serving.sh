#!/usr/bin/env bash
# Issue 19 on the H200, one call of about 6 minutes:
#   bash docs/gpu/serving.sh
# 1. GPU tests: per-sequence key ranges in bf16 (prefill and decode kernels), the bound
#    decode launch bit-equal to the jit launch over a growing cache, the op with key ranges
#    captured by torch.compile(mode="reduce-overhead") and replayed with new lengths;
# 2. host time per decode call: the op (bound launch / jit dispatcher / with key ranges)
#    against SDPA cuDNN and flash, and the serving table (bench_serving): eager dynamic
#    cache, left-padded batch, static cache compiled x batch 1, 8 x prompt 512, 2k, 8k,
#    SDPA vs the op in one run, teacher-forced logits.
# Back in $OUT: serving.log, gpu_tests.xml, serving.json. The GPU image lacks jsonschema (runtime/storage/store.py
# imports it): carry its wheels in .whl (README of the device tool) and install them first.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/serving.log") 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -c "import transformers, torch, triton; print('transformers', transformers.__version__, 'torch', torch.__version__, 'triton', triton.__version__)"
timeout -k 5 100 python3 -m pytest -m gpu tests/gpu/test_serving_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -30
timeout -k 5 170 python3 -m flashtune.experiments.benchmarks.bench_serving --host-time --budget-s 90 --json "$OUT/serving.json"

#!/usr/bin/env bash
# Issue 22 (one config-to-kernel translator, kernels/launch_plan.py) on the H200, in one
# device call of under 3 minutes: the GPU tests of every launch path the translator now
# feeds, on the merged tree:
#   * the forward kernel: pointer, tma, tma_ws loads, tiles and persistent grids, fp8
#     (test_kernel_gpu's odd-length samples, persistent grid, refusals);
#   * the lean launcher's variants: lean, lean_ws, lean_overlap, persistent, fp8, strided
#     inputs, a CUDA graph (test_lean_gpu, its exhaustive sweep left out);
#   * the one-loop variant (test_oneloop_gpu);
#   * decode: the tma config's numerics, launched and fused combine, per-sequence lengths,
#     graphs, the bound launch, and the runtime's prepared decode calls and graph captures
#     (test_decode_gpu, test_serving_gpu, test_runtime_gpu).
#   run with carry [".whl"] where the GPU image lacks jsonschema (docs/gpu/host_time.sh):
#   bash docs/lab/gpu/s22.sh
# Back in $OUT: s22.log.
source "$(dirname "$0")/../../gpu/setup.sh" s22.log
run() { timeout -k 5 "$1" python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 "${@:2}" 2>&1 | tail -15; }
# Caps sum to 155 s (a part that hits its cap prints "Terminated": rerun that line alone).
run 40 tests/gpu/test_kernel_gpu.py -k "persistent_grid or infeasible or (odd_lengths and 777)"
run 35 tests/gpu/test_lean_gpu.py -k "not switches_on_every_suite_shape"
run 25 tests/gpu/test_oneloop_gpu.py
run 35 tests/gpu/test_decode_gpu.py tests/gpu/test_serving_gpu.py -k "not numerics or tma128s16"
run 20 tests/runtime/test_runtime_gpu.py -k "decode_class or cuda_graph"

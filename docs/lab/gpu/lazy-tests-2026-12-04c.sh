#!/usr/bin/env bash
# Issue 20 (2026-12-04c): the Gluon kernel with LAZY_RESCALE on at head_dim 256 (16-bit), checked
# and timed: the D256 cases of tests/gpu/test_gluon_gpu.py (bf16 and fp16 against the float32
# reference, ragged, causal, every schedule and the zigzag persistent grid; the kernel's SASS at
# head_dim 64 and 128, and for fp8, is byte for byte c6f1e9a's, compiled for sm90 on the CPU),
# then bench_peers on the suite's D256 workload, the recorded best beside the 128x64 Gluon tiles
# (plain, ordered, polynomial), SDPA cuDNN and flash in the same rounds. About 3 minutes; carry .whl.
#   bash docs/lab/gpu/lazy-tests-2026-12-04c.sh
# Back in $OUT: lazy-tests.log, test_gluon_gpu.xml, d256.json.
source "$(dirname "$0")/../../gpu/setup.sh" lazy-tests.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
date +%T
timeout -k 5 150 python3 -m pytest -m "gpu and not slow" tests/gpu/test_gluon_gpu.py -k d256 -q -p no:cacheprovider \
  --junitxml "$OUT/test_gluon_gpu.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -8
date +%T
cfg() { echo "{\"loads\": \"$1\", \"BLOCK_M\": 128, \"BLOCK_N\": 64, \"num_warps\": 4, \"num_stages\": 2, \"grid\": \"tiles\", \"tile_order\": \"longest_first\"}"; }
timeout -k 5 90 python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --tables experiments/data/h200_gluon --only b2_h16_n8192_d256_full_bfloat16 \
  --top 1 --rounds 3 --also "$(cfg gluon_pingpong)" --also "$(cfg gluon_pingpong_ordered)" \
  --also "$(cfg gluon_pingpong_poly)" --json "$OUT/d256.json" 2>&1 | tail -12
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

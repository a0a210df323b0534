#!/usr/bin/env bash
# Issue 20, second call (under 4 minutes): the one-loop kernel without the mask where the
# launch needs none (non-causal, kv_len % BLOCK_N == 0): its GPU numerics again, then
# bench_peers on the suite with its best tiles from the first call beside the recorded
# bests (top 2) and SDPA in both GQA forms, interleaved, 3 rounds.
#   bash docs/lab/gpu/i20b.sh
# Back in $OUT: i20b.log, gpu_tests_b.xml, peers_b.json.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/i20b.log") 2>&1
timeout -k 5 80 python3 -m pytest -m gpu tests/gpu/test_oneloop_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests_b.xml" 2>&1 | tail -8
C='"loads": "lean_ws_oneloop"'
ALSO=()
for t in '128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2' '128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1' \
         '128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2'; do
  ALSO+=(--also "{\"BLOCK_M\": $t, $C}")
done
ALSO+=(--also "{\"BLOCK_M\": 128, \"BLOCK_N\": 128, \"num_warps\": 4, \"num_stages\": 2, $C, \"tile_order\": \"longest_first\"}")
timeout -k 5 150 python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --top 2 --rounds 3 "${ALSO[@]}" --json "$OUT/peers_b.json" 2>&1 | tail -24
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

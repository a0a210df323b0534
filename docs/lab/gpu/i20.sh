#!/usr/bin/env bash
# Issue 20 (prefill above cuDNN) in one call of under 8 minutes:
#   bash docs/lab/gpu/i20.sh
# 1. the SDPA line's diagnosis on the idle card (docs/lab/gpu/peer_clock.py: cuDNN on GQA causal
#    4,32/8,4096 alone, as the main job timed it, with the SM clock);
# 2. GPU tests: the one-loop kernel's numerics (bf16, fp16, fp8; ragged, causal, GQA,
#    strided) and the peers in both GQA forms;
# 3. bench_peers on the suite: the recorded bests (h200_grown + h200_lean, top 2), the new
#    lean_ws_oneloop tiles and the old lean/lean_ws at the minimal kernel's tiles (the
#    ablation), SDPA cuDNN and flash in both GQA forms, interleaved, 3 rounds;
# 4. the diagnosis again on the loaded card (after 20 s of back-to-back calls);
# a short table last. Back in $OUT: i20.log, gpu_tests.xml, peers.json, clock.jsonl.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/i20.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout -k 5 30 python3 docs/lab/gpu/peer_clock.py idle | tee -a "$OUT/clock.jsonl"
timeout -k 5 130 python3 -m pytest -m gpu tests/gpu/test_oneloop_gpu.py tests/gpu/test_peers_gpu.py -q \
  -p no:cacheprovider --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -25
C='"loads": "lean_ws_oneloop"'
ALSO=()
for t in '128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2' '128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1' \
         '128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2' '64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 1' \
         '64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2' '128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2'; do
  ALSO+=(--also "{\"BLOCK_M\": $t, $C}")
done
ALSO+=(--also "{\"BLOCK_M\": 128, \"BLOCK_N\": 128, \"num_warps\": 4, \"num_stages\": 2, $C, \"tile_order\": \"longest_first\"}")
ALSO+=(--also "{\"BLOCK_M\": 128, \"BLOCK_N\": 128, \"num_warps\": 4, \"num_stages\": 2, $C, \"use_fp8\": true}")
ALSO+=(--also "{\"BLOCK_M\": 128, \"BLOCK_N\": 64, \"num_warps\": 4, \"num_stages\": 1, $C, \"use_fp8\": true}")
# The ablation at the minimal kernel's tiles: the lean kernel's loops there.
for l in lean lean_ws; do
  ALSO+=(--also "{\"BLOCK_M\": 128, \"BLOCK_N\": 64, \"num_warps\": 4, \"num_stages\": 1, \"loads\": \"$l\"}")
  ALSO+=(--also "{\"BLOCK_M\": 64, \"BLOCK_N\": 128, \"num_warps\": 4, \"num_stages\": 1, \"loads\": \"$l\"}")
done
timeout -k 5 250 python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --top 2 --rounds 3 "${ALSO[@]}" --json "$OUT/peers.json" 2>&1 | tail -40
timeout -k 5 45 python3 docs/lab/gpu/peer_clock.py loaded --load-s 20 | tee -a "$OUT/clock.jsonl"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

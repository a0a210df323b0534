#!/usr/bin/env bash
# Issue 20, D64 causal (branch h20k), second call. Call 1 (docs/lab/gpu/h20k-call1.sh) found the
# exp2 polynomial slower at every share on D64 causal; the static persistent schedule is what
# D64 causal pays: program p took every 132nd tile, so it saw 4 of a head's 16 causal lengths
# and the busiest program had 1.21x the mean's key blocks. grid="persistent_zigzag" reverses
# the odd rounds (1.03x; tests/kernels/test_gluon_zigzag.py).
#   bash docs/lab/gpu/h20k-call2.sh      (with the jsonschema wheels carried in .whl)
# 1. numerics: the zigzag grid on every case of the file (free-running and ordered), three and
#    five programs over many tiles, the polynomial's shares through the launcher;
# 2. bench_peers on the 7 suite workloads: the Gluon bests (tiles and persistent) beside the
#    zigzag grid, peers in the same run.
# Back in $OUT: h20k-call2.log, gpu_tests.xml, peers.json.
source "$(dirname "$0")/../../gpu/setup.sh" h20k-call2.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
date +%T
timeout -k 5 ${TEST_S:-120} python3 -m pytest -m gpu tests/gpu/test_gluon_gpu.py -k "zigzag or share" -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -8
date +%T
cfg() { echo "{\"loads\": \"gluon_pingpong\", \"BLOCK_M\": 128, \"BLOCK_N\": $1, \"num_warps\": 4, \"num_stages\": $2, \"grid\": \"$3\", \"tile_order\": \"$4\"}"; }
ALSO=(--also "$(cfg 128 2 tiles longest_first)" --also "$(cfg 128 2 persistent head_major)"
      --also "$(cfg 128 2 persistent longest_first)" --also "$(cfg 64 2 tiles head_major)"
      --also "$(cfg 128 2 persistent_zigzag head_major)" --also "$(cfg 128 2 persistent_zigzag longest_first)"
      --also "$(cfg 128 3 persistent_zigzag head_major)")
timeout -k 5 ${BENCH_S:-150} python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --top 1 --rounds 3 "${ALSO[@]}" --json "$OUT/peers.json" 2>&1 | tail -24
date +%T
python3 - "$OUT/peers.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
label = lambda c: f"{c['grid']} {c['tile_order']} {c['BLOCK_M']}x{c['BLOCK_N']} {c['num_stages']}st"
print("\nTFLOP/s (x SDPA cuDNN), same run:")
for r in rows:
    print(f"{r['workload']}: cuDNN {r['sdpa_cudnn']:.0f}, flash {r['sdpa_flash']:.0f}, recorded best {r['recorded_best']:.0f}")
    for key, v in r["new_each"].items():
        print(f"   {label(json.loads(key)):45s} {v:6.1f} ({v / r['sdpa_cudnn']:.3f}x)")
PY
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

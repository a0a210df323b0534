#!/usr/bin/env bash
# Issue 20: the seven suite workloads in one run, the peers (SDPA cuDNN and flash, as users call
# them) beside the recorded best of every H200 table and the Gluon kernel's grids, about 1-2 minutes:
#   bash docs/lab/gpu/suite-2026-12-04.sh      (with the jsonschema wheels carried in .whl)
# Extra configs: ALSO_JSON, one config JSON a line, timed beside these.
# Back in $OUT: suite.log, suite.json.
source "$(dirname "$0")/../../gpu/setup.sh" suite.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
cfg() { echo "{\"loads\": \"gluon_pingpong\", \"BLOCK_M\": 128, \"BLOCK_N\": $1, \"num_warps\": 4, \"num_stages\": $2, \"grid\": \"$3\", \"tile_order\": \"$4\"}"; }
ALSO=(--also "$(cfg 128 2 tiles longest_first)" --also "$(cfg 128 3 tiles longest_first)"
      --also "$(cfg 128 2 persistent head_major)" --also "$(cfg 128 2 persistent_zigzag head_major)"
      --also "$(cfg 128 2 persistent_zigzag longest_first)" --also "$(cfg 64 2 tiles longest_first)")
while IFS= read -r extra; do [ -n "$extra" ] && ALSO+=(--also "$extra"); done <<< "${ALSO_JSON:-}"
date +%T
timeout -k 5 ${BENCH_S:-200} python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --tables experiments/data/h200_gluon --top 1 --rounds 3 "${ALSO[@]}" \
  --json "$OUT/suite.json" 2>&1 | tail -14
date +%T
python3 - "$OUT/suite.json" <<'PY'
import json, math, sys
rows = json.load(open(sys.argv[1]))
def label(c):
    return f"{c['loads']} {c.get('grid', '')} {c.get('tile_order', '')} {c['BLOCK_M']}x{c['BLOCK_N']} {c['num_stages']}st"
print("\nTFLOP/s (x SDPA cuDNN), same run:")
best = []
for r in rows:
    print(f"{r['workload']}: cuDNN {r['sdpa_cudnn']:.0f}, flash {r['sdpa_flash']:.0f}, recorded best {r['recorded_best']:.0f}")
    figures = [r["recorded_best"]]
    for key, v in r["new_each"].items():
        print(f"   {label(json.loads(key)):55s} {v:6.1f} ({v / r['sdpa_cudnn']:.3f}x)")
        figures.append(v)
    best.append(max(figures) / r["sdpa_cudnn"])
    print(f"   best of the run: {best[-1]:.3f}x cuDNN")
print(f"\ngeomean, best of each workload vs cuDNN: {math.exp(sum(map(math.log, best)) / len(best)):.3f}x")
PY
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader

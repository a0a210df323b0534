#!/usr/bin/env bash
# Issues 19 and 20, one call, about 6 minutes, after docs/lab/gpu/serving-2026-12-04.sh and
# suite-2026-12-04.sh: the processes there ran at different host speeds (the op's compiled static
# B1 process paid 1.4-1.6x SDPA's per CUDA launch, graph launch and dynamo cache lookup alike).
#   bash docs/lab/gpu/static-pinned-2026-12-04.sh      (with the jsonschema wheels carried in .whl)
# 1. the compiled static cache, B1/B8 x prompts 512, 2k, 8k, each implementation alone in its own
#    process pinned to one core (taskset), two turns (sdpa, op, sdpa, op);
# 2. D64 full (b16 h16 n1024: a 167 us kernel) alone in a fresh process, unpinned then pinned:
#    in both full-suite runs its Gluon rows read 25 % low, alone 414.
# Back in $OUT: static-pinned.log, alone_<impl>_<turn>.json, d64_<how>.json.
source "$(dirname "$0")/../../gpu/setup.sh" static-pinned.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
quiet() { grep -v -e DEBUG -e USDT -e Warning -e warn; }
CORE=${CORE:-5}
for turn in 1 2; do
  for impl in sdpa op; do
    echo "== 1. static, turn $turn: $impl (core $CORE)"; date +%T
    timeout -k 5 100 taskset -c $CORE python3 -m flashtune.experiments.benchmarks.bench_serving \
      --only $impl --modes static --batches 1,8 --static-prompts 512,2048,8192 --rounds 3 \
      --budget-s 85 --json "$OUT/alone_${impl}_$turn.json" 2>&1 | quiet | tail -1 || true
  done
done
cfg() { echo "{\"loads\": \"gluon_pingpong\", \"BLOCK_M\": 128, \"BLOCK_N\": 128, \"num_warps\": 4, \"num_stages\": $1, \"grid\": \"$2\", \"tile_order\": \"$3\"}"; }
ALSO=(--also "$(cfg 2 persistent head_major)" --also "$(cfg 2 tiles longest_first)" --also "$(cfg 3 tiles longest_first)")
for how in unpinned pinned; do
  echo "== 2. D64 full alone, $how"; date +%T
  pin=(); [ $how = pinned ] && pin=(taskset -c $CORE)
  timeout -k 5 60 "${pin[@]}" python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
    --tables experiments/data/h200_lean --top 1 --rounds 3 --only b16_h16_n1024_d64_full_bfloat16 "${ALSO[@]}" \
    --json "$OUT/d64_$how.json" 2>&1 | grep -E "^\| b16|new variants" | cut -c1-200
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
cells = {}
for f in sorted(out.glob("alone_*_*.json")):
    impl, turn = f.stem.split("_")[1:]
    for c in json.loads(f.read_text())["cases"]:
        cells.setdefault((c["batch"], c["prompt"]), {}).setdefault(impl, []).append(c["tokens_per_s"])
print("\nstatic compiled, tok/s by turn (pinned), median of turns, op/SDPA:")
for (b, p), by in sorted(cells.items()):
    s, o = by.get("sdpa", []), by.get("op", [])
    ratio = statistics.median(o) / statistics.median(s) if s and o else float("nan")
    print(f"  B{b} prompt {p}: sdpa {[round(x) for x in s]}  op {[round(x) for x in o]}  {ratio:.3f}x")
for how in ("unpinned", "pinned"):
    f = out / f"d64_{how}.json"
    if f.exists():
        r = json.loads(f.read_text())[0]
        each = " ".join(f"{v:.0f}" for v in r["new_each"].values())
        print(f"D64 full {how}: cuDNN {r['sdpa_cudnn']:.0f}, flash {r['sdpa_flash']:.0f}, recorded {r['recorded_best']:.0f}, gluon {each}")
PY
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

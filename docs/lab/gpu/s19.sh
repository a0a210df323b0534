#!/usr/bin/env bash
# Issue 19 on the H200 (branch s19), one call of about 4 minutes:
#   bash docs/lab/gpu/s19.sh      (with the jsonschema wheels carried in .whl)
# 1. GPU tests of the serving path (key ranges in bf16, the bound decode launch against the
#    jit launch, the op captured by torch.compile(mode="reduce-overhead"));
# 2. host time per eager decode call (bench_host_time: op, op + key ranges, the transformers
#    function with ranges and without a mask, transformers' own sdpa function, SDPA cuDNN/flash);
# 3. the serving table (bench_serving): static cache compiled (B1, B8; with TORCH_LOGS
#    recompiles/cudagraphs/perf_hints, torch.compile's counters and a profile of one generate
#    per implementation), then eager dynamic cache and the left-padded batch (profiled first cell).
# Back in $OUT: s19.log, gpu_tests.xml, host_time.json, serving_static.json, static_compile.log,
# serving.json.
source "$(dirname "$0")/../../gpu/setup.sh" s19.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 60 python3 -m pytest -m gpu tests/gpu/test_serving_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -6
timeout -k 5 45 python3 -m flashtune.experiments.benchmarks.bench_host_time --calls 1000 \
  --json "$OUT/host_time.json" 2>&1 | grep -v Warning | tail -12
TORCH_LOGS=recompiles,cudagraphs,perf_hints timeout -k 5 95 python3 -m flashtune.experiments.benchmarks.bench_serving \
  --modes static --budget-s 60 --profile --json "$OUT/serving_static.json" > "$OUT/static_compile.log" 2>&1
grep -iE "skipping cudagraph|recompil|re-record|rerecord|cudagraph_skips|^profile|^ +[0-9.]+ us x| static " \
  "$OUT/static_compile.log" | grep -v DEBUG | cut -c1-220 | tail -60
timeout -k 5 60 python3 -m flashtune.experiments.benchmarks.bench_serving --modes eager,padded --budget-s 45 \
  --profile --json "$OUT/serving.json" 2>&1 | grep -v DEBUG | grep -v USDT | tail -45
echo "== short table =="
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("serving_static.json", "serving.json"):
    p = out / name
    if not p.exists():
        print(name, "missing"); continue
    for c in json.loads(p.read_text())["cases"]:
        if "error" in c:
            print(f"{c['mode']:>7} {c['batch']:>2} {c['prompt']:>5} {c['error'][:90]}"); continue
        t = c["tokens_per_s"]
        print(f"{c['mode']:>7} {c['batch']:>2} {c['prompt']:>5} sdpa {t['sdpa']:8.1f} op {t[c['attention']]:8.1f} "
              f"ratio {c['ratio']:.3f} tf {c['teacher_forced']['max_abs']:.3f} fb {len(c['fallback'])}")
        if c.get("compile_counters"):
            print("        counters", json.dumps(c["compile_counters"])[:300])
p = out / "host_time.json"
if p.exists():
    for shape, rows in json.loads(p.read_text())["results"].items():
        print(shape, "; ".join(f"{k} {v.get('host_us', float('nan')):.1f}/{v.get('wall_us', float('nan')):.1f}"
                               + ("" if v.get("correct") else " BAD") for k, v in rows.items()))
PY

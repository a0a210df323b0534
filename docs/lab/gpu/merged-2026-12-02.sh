#!/usr/bin/env bash
# The merged tree of the 2026-12-02 session on the H200, one call of about 8 minutes:
#   bash docs/lab/gpu/merged-2026-12-02.sh      (with the jsonschema wheels carried in .whl)
# 1. GPU tests of every launch path the one translator (kernels/launch_plan.py) now feeds
#    (docs/lab/gpu/s22.sh's selection), the Gluon kernel's numerics and the one-loop kernel's
#    new loop forms (bf16/fp16/fp8 against the float32 reference);
# 2. the suite with the SDPA peers in the same interleaved rounds: the recorded bests, the
#    Gluon kernel's and the one-loop kernel's tiles (bench_peers);
# 3. fp8 kernel-only, pre-quantized (bench_fp8);
# 4. the serving table's static-cache cells (transformers compiles the decode step with CUDA
#    graphs), SDPA in the same run, after the fix that gives every step one graph.
# Each step has its own log and timeout; a failing step does not stop the next.
# Back in $OUT: merged.log, tests.log, peers.json, fp8.json, serving_static.json, static.log.
source "$(dirname "$0")/../../gpu/setup.sh" merged.log
export FLASHTUNE_STORE="$OUT/empty_store.json"

echo "== 1. GPU tests"
run() { timeout -k 5 "$1" python3 -m pytest -m gpu -q -p no:cacheprovider "${@:2}" 2>&1 | tail -4; }
{
run 40 tests/gpu/test_kernel_gpu.py -k "persistent_grid or infeasible or (odd_lengths and 777)"
run 35 tests/gpu/test_lean_gpu.py -k "not switches_on_every_suite_shape"
run 45 tests/gpu/test_oneloop_gpu.py
run 35 tests/gpu/test_decode_gpu.py tests/gpu/test_serving_gpu.py -k "not numerics or tma128s16"
run 20 tests/runtime/test_runtime_gpu.py -k "decode_class or cuda_graph"
run 60 tests/gpu/test_gluon_gpu.py
} > "$OUT/tests.log" 2>&1
grep -E "passed|failed|error|Terminated" "$OUT/tests.log"

echo "== 2. the suite: recorded bests, Gluon and one-loop tiles, SDPA peers in the same rounds"
LF='"tile_order": "longest_first"'
g() { echo "{\"loads\": \"$1\", \"BLOCK_M\": $2, \"BLOCK_N\": $3, \"num_warps\": 4, \"num_stages\": $4${5:+, $5}}"; }
ALSO=(--also "$(g gluon_pingpong 128 128 2 "$LF")" --also "$(g gluon_pingpong 128 128 2)"
      --also "$(g gluon_pingpong 128 64 2)" --also "$(g gluon_pingpong 256 64 3)"
      --also "$(g gluon_pingpong_ordered 128 64 2)"
      --also "$(g lean_ws_oneloop 128 128 2)" --also "$(g lean_ws_oneloop 128 64 1)"
      --also "$(g lean_ws_oneloop 64 128 2)" --also "$(g lean_ws_oneloop 128 128 2 "$LF")")
timeout -k 5 150 python3 -m flashtune.experiments.benchmarks.bench_peers --tables experiments/data/h200_grown \
  --tables experiments/data/h200_lean --top 1 --rounds 3 "${ALSO[@]}" --json "$OUT/peers.json" \
  > "$OUT/peers.log" 2>&1 || echo "step 2 exit $?"

echo "== 3. fp8 kernel-only (pre-quantized)"
F8=(--also "$(g lean_ws_oneloop 128 128 2)" --also "$(g lean_ws_oneloop 128 128 3)"
    --also "$(g lean_ws_oneloop 128 64 1)" --also "$(g lean_ws_oneloop 128 64 2)")
timeout -k 5 50 python3 docs/lab/tools/bench_fp8.py --rounds 3 --top-fp8 2 "${F8[@]}" \
  --json "$OUT/fp8.json" > "$OUT/fp8.log" 2>&1 || echo "step 3 exit $?"

echo "== 4. serving, static cache compiled (B1, B8; prompt 512)"
TORCH_LOGS=recompiles,cudagraphs timeout -k 5 110 python3 -m flashtune.experiments.benchmarks.bench_serving \
  --modes static --budget-s 75 --profile --json "$OUT/serving_static.json" > "$OUT/static.log" 2>&1 || echo "step 4 exit $?"
grep -icE "recompil" "$OUT/static.log" | sed 's/^/recompile lines: /'

echo "== tables"
echo "-- suite, TFLOP/s, peers in the same rounds"; tail -32 "$OUT/peers.log"
echo "-- fp8 kernel-only"; tail -22 "$OUT/fp8.log"
echo "-- serving static"
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
p = Path(sys.argv[1]) / "serving_static.json"
if not p.exists():
    print("serving_static.json missing"); sys.exit()
for c in json.loads(p.read_text())["cases"]:
    if "error" in c:
        print(f"{c['mode']:>7} {c['batch']:>2} {c['prompt']:>5} {c['error'][:150]}"); continue
    t = c["tokens_per_s"]
    print(f"{c['mode']:>7} {c['batch']:>2} {c['prompt']:>5} sdpa {t['sdpa']:8.1f} op {t[c['attention']]:8.1f} "
          f"ratio {c['ratio']:.3f} tf {c['teacher_forced']['max_abs']:.3f} fb {len(c['fallback'])}")
    if c.get("compile_counters"):
        print("        counters", json.dumps(c["compile_counters"])[:300])
PY
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

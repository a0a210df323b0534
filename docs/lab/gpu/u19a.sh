#!/usr/bin/env bash
# Issue 19, branch u19, GPU call 1 (about 2-3 minutes on the H200):
#   bash docs/lab/gpu/u19a.sh      (with the jsonschema wheels carried in .whl, as for t19.sh)
# 1. GPU tests of the serving path (tests/gpu/test_serving_gpu.py), the weak-reference fix of
#    the key-range memo (1e7765d) among them (it failed on the H200 before it);
# 2. the compiled static cache, one implementation per process (bench_serving --only: a warm-up
#    generate, 2 timed ones, then one profiled, warm): B1 and B8 at prompt 512, each batch from a
#    fresh compiled state; GPU kernels by device time and launch counts, compiled regions and
#    CUDA-graph replays, the CUDA API calls, torch.compile's counters (graph breaks, recompiles);
# 3. the online re-tuner inside an eager generate loop (bench_online_serving, B1, prompt 512):
#    tokens/s plain, with a tuner attached, and through a forced re-tune (swap + rollback);
#    the tokens against plain's; the rollback's lag in decode calls.
# Back in $OUT: u19a.log, gpu_tests.xml, alone_sdpa.json, alone_op.json, online.json.
source "$(dirname "$0")/../../gpu/setup.sh" u19a.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 60 python3 -m pytest -m gpu tests/gpu/test_serving_gpu.py -q -p no:cacheprovider \
  --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -6 || true
for impl in sdpa op; do
  TORCH_LOGS=recompiles,graph_breaks timeout -k 5 75 python3 -m flashtune.experiments.benchmarks.bench_serving \
    --only $impl --modes static --batches 1,8 --static-prompts 512 --rounds 2 \
    --json "$OUT/alone_$impl.json" 2>&1 | grep -v -e DEBUG -e USDT || true
done
timeout -k 5 45 python3 -m flashtune.experiments.benchmarks.bench_online_serving --rounds 2 --new-tokens 64 \
  --json "$OUT/online.json" 2>&1 | grep -v Warning | tail -8 || true
python3 - "$OUT" <<'PY' || true
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for impl in ("sdpa", "op"):
    f = out / f"alone_{impl}.json"
    if f.exists():
        for c in json.loads(f.read_text())["cases"]:
            if "error" in c:
                print(impl, c["batch"], "error", c["error"][:100]); continue
            (p,) = c["profile"].values()
            print(f"{impl:>5} B{c['batch']} {c['tokens_per_s']:8.1f} tok/s  kernels {p['kernel_launches']:5d}  "
                  f"device {p['device_us_total']:9.0f} us  wall {p['wall_s'] * 1e3:7.1f} ms  markers {p['graph_markers']}")
PY

#!/usr/bin/env bash
# One short device call (the session had under 5 minutes of device time left) for the
# kernel-performance and runtime issues, steps in order of value, each under `timeout` so a
# failure or the call's limit loses only what comes after it; every step writes straight
# into $OUT (at most 8 files come back, and a killed call still returns them):
#   fp8 kernel-only vs bf16 and cuDNN, Nsight Compute of three best configs, the knee
#   sweep, dispatch overhead, a small Llama forward vs SDPA, the fast GPU tests.
# Not here: the grown-space suite sweep (minutes per workload; see variants.sh).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1
T0=$(date +%s); el() { echo "--- $1 (t=$(( $(date +%s) - T0 ))s)"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
# The package without an install (seconds saved): flashtune.* is the repo root as a namespace.
mkdir -p /tmp/ft && ln -sfn "$PWD" /tmp/ft/flashtune
export PYTHONPATH=/tmp/site:/tmp/ft${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
el fp8
timeout ${FP8_S:-70} python3 docs/lab/tools/bench_fp8.py --rounds 2 --top-fp8 2 --json "$OUT/fp8.json"
el ncu
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout 20 "$NCU" --query-metrics --chip gh100 > /tmp/ncu_query.txt 2>&1
  M=$(python3 docs/lab/tools/ncu_metrics.py metrics /tmp/ncu_query.txt)
  echo "metrics: $M"
  SECT=""; for s in SpeedOfLight LaunchStats Occupancy ComputeWorkloadAnalysis MemoryWorkloadAnalysis WarpStateStats; do SECT="$SECT --section $s"; done
  timeout ${NCU_S:-60} "$NCU" --clock-control none --target-processes all -k regex:attention_forward $SECT \
    ${M:+--metrics $M} -f -o "$OUT/ncu" python3 docs/lab/tools/ncu_metrics.py target \
    b4_h32_n4096_d128_full_bfloat16 b2_h16_n8192_d256_full_bfloat16 b4_h32_n4096_d128_causal_bfloat16
  timeout 20 "$NCU" --import "$OUT/ncu.ncu-rep" --csv --page raw > "$OUT/ncu_raw.csv"
else
  echo "no ncu found"
fi
el knee
timeout ${KNEE_S:-40} python3 docs/lab/tools/bench_knee.py run --rounds 2 --json "$OUT/knee.json"
el dispatch
timeout 40 python3 docs/lab/tools/bench_dispatch.py --iters 1000 --repeats 5 --json "$OUT/dispatch.json" | tail -22
el model
(cd /tmp && timeout ${MODEL_S:-60} python3 "$OLDPWD/docs/lab/tools/bench_model.py" --batch 2 --seq 4096 --layers 2 --hidden 2048 \
  --heads 16 --kv-heads 4 --rounds 3 --json "$OUT/model.json") | tail -8
el pytest
timeout ${PYTEST_S:-150} python3 -m pytest -m gpu tests/runtime/test_runtime_gpu.py tests/gpu -q -p no:cacheprovider \
  -k "not every_feasible and not odd_lengths" 2>&1 | tail -15
el summary
python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
def load(n):
    try: return json.loads((out / n).read_text())
    except Exception as e: return None
f = load("fp8.json")
for c in (f or {}).get("cases", []):
    print("fp8", c["workload"], {k: round(v, 2) for k, v in c["ratios"].items()}, c["errors"] or "")
k = load("knee.json")
if k: print("knee", [(r["batch"], r["seq"], round(r["flashtune_tflops"] / r["sdpa_cudnn_tflops"], 2)) for r in k["rows"]])
d = load("dispatch.json")
if d: print("dispatch us", {n: round(v, 2) for n, v in d["us_per_call"].items()})
m = load("model.json")
if m: print("model ms", m["forward_ms"], "speedup", round(m["speedup_vs_sdpa"], 3), "err", m["logits_rel_error_vs_sdpa"])
PY

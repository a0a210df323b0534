#!/usr/bin/env bash
# The device work the 2026-11-30 sessions could not do (no device time left), ready for the
# next one, in two calls of under 10 minutes each:
#   bash docs/gpu/next.sh sweep    # the grown space on the suite, then bench_peers
#   bash docs/gpu/next.sh runtime  # model forward vs SDPA, GPU tests of the new knobs
# Needs the jsonschema wheels in .whl (see /work/.library/device/README.md) for `runtime`.
# Results go to $OUT; tables to sweeps_*/ (tar'd: at most 8 files come back from a call).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/next_$1.log") 2>&1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader

case "$1" in
  sweep)
    # bf16 only (use_fp8 pinned: the fp8 twins would double it): the configs the recorded
    # pointer tables lack, 7 x (120 pointer-persistent + 480 TMA) = 4200, about 25 min at
    # the compile pool's 171 trials/min: run it in several calls; each resumes from
    # *.partial. Persistent pointer first: the knee says it matters most. One folder per
    # sweep: a finished sweep writes <workload>.jsonl, which another sweep would overwrite.
    timeout 430 sh -c 'flashtune sweep --suite --where use_fp8=False --where loads=pointer --where grid=persistent \
        --out sweeps_persistent --no-static-check --timeout 60 && \
      flashtune sweep --suite --where use_fp8=False --where loads=tma,tma_ws \
        --out sweeps_tma --no-static-check --timeout 60' 2>&1 | grep -v 'cfg/s'
    tar czf "$OUT/sweeps.tgz" sweeps_persistent sweeps_tma 2>/dev/null
    tables=(--tables experiments/data/h200)  # plus whichever sweep finished a table
    for d in sweeps_persistent sweeps_tma; do ls "$d"/*.jsonl >/dev/null 2>&1 && tables+=(--tables "$d"); done
    timeout 100 python3 -m flashtune.experiments.benchmarks.bench_peers "${tables[@]}" --rounds 3 --json "$OUT/peers.json"
    ;;
  runtime)
    timeout 200 python3 -m flashtune.runtime.bench_model --batch 2 --seq 4096 --layers 2 --hidden 2048 \
      --heads 16 --kv-heads 4 --rounds 3 --json "$OUT/model.json"
    timeout 300 python3 -m pytest -m gpu tests/runtime/test_runtime_gpu.py tests/gpu -q \
      -k "not every_feasible" -p no:cacheprovider 2>&1 | tail -15
    ;;
  *) echo "usage: $0 sweep|runtime" >&2; exit 2 ;;
esac

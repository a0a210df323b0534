#!/usr/bin/env bash
# The Gluon prefill kernel's prepared, bound launch (kernels.gluon.BoundGluon, runtime PreparedGluon;
# the descriptors' shared layouts cached for every Gluon launch), one call, about 4 minutes:
#   bash docs/lab/gpu/gluon-bound-2026-12-04.sh      (with the jsonschema wheels carried in .whl)
# 1. GPU tests: serving (the bound launch bit for bit the jit launch's across key classes, D64
#    full and D128 causal GQA; the empty store's Hopper baseline); the Gluon kernel's own file
#    (the cached layouts), bf16/fp16 and fp8;
# 2. docs/lab/gpu/d64_probe.py: host us a call, back to back, do_bench and do_bench_cudagraph through
#    launch(), the prepared call with the jit dispatcher and the bound prepared call.
# Back in $OUT: gluon-bound.log, *.xml, d64_probe.log.
source "$(dirname "$0")/../../gpu/setup.sh" gluon-bound.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
for spec in test_serving_gpu:100 test_gluon_gpu:170 test_gluon_fp8_gpu:80; do
  name=${spec%%:*}; limit=${spec##*:}
  echo "== $name"; date +%T
  timeout -k 5 "$limit" python3 -m pytest -m "gpu and not slow" "tests/gpu/$name.py" -q -p no:cacheprovider \
    --junitxml "$OUT/$name.xml" 2>&1 | grep -E "^E |passed|failed|error" | cut -c1-300 | tail -8
done
echo "== probe"; date +%T
timeout -k 5 100 python3 docs/lab/gpu/d64_probe.py 2>&1 | grep -v Warning | tee "$OUT/d64_probe.log" | tail -10
date +%T
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true

#!/usr/bin/env bash
# Issue 19, second part, on the H200 in one device call of about 1-2 minutes (limit 3):
# host µs per eager decode call (2,000 asynchronous calls, then one sync) of the runtime op
# (bound launch), the op with key ranges, the transformers attention function's eager path,
# SDPA cuDNN and flash (sdpa_kernel entered once), on 1,32/8,1/4096 and 8,32/8,1/8192 bf16,
# each output checked against float32 SDPA first. Table printed last.
#   run with carry [".whl"] (the GPU image lacks jsonschema, which runtime/storage/store.py imports;
#   see /work/.library/device/README.md):  bash docs/gpu/host_time.sh
# Back in $OUT: host_time.log, host_time.json.
source "$(dirname "$0")/setup.sh" host_time.log
# An empty store: every shape serves the decode kernel's default (what a fresh install runs).
export FLASHTUNE_STORE="$OUT/empty_store.json"
timeout -k 5 170 python3 -m flashtune.experiments.benchmarks.bench_host_time --json "$OUT/host_time.json"

#!/usr/bin/env bash
# The Gluon ping-pong kernel's part of the prefill space, swept on the H200, so the replayed
# tuner (issue 20's tuner target) and the main job see it as the GPU times it:
#   bash docs/lab/gpu/sweep-gluon.sh            (the jsonschema wheels carried in .whl)
# By default loads gluon_pingpong, gluon_pingpong_ordered and gluon_pingpong_poly x every grid
# (tiles, persistent, persistent_zigzag) x every tile, stage, warp count and tile order the
# feasibility model admits, bf16: 2,160 configs a workload over the 7 suite workloads, about
# 400 of them feasible (the rest recorded as infeasible with the model's reason), about 13
# minutes of device time: more than one call holds, so the sweep is cut at SWEEP_S seconds and
# resumed by running the script again with the returned folder in the checkout:
#   tar xzf <files_at>/gluon_tables.tar.gz      (restores sweeps_gluon/, then run the script again)
# The 2026-12-02 tables (commit 0b2c107) were LOADS=gluon_pingpong,gluon_pingpong_ordered GRIDS=tiles.
# Back in $OUT: sweep-gluon.log and gluon_tables.tar.gz (one Measurement JSONL a workload,
# as `flashtune sweep` writes them, for experiments/data/h200_gluon/; .jsonl.partial: resumable).
source "$(dirname "$0")/../../gpu/setup.sh" sweep-gluon.log
git rev-parse --short HEAD 2>/dev/null || true
LOADS=${LOADS:-gluon_pingpong,gluon_pingpong_ordered,gluon_pingpong_poly}
GRIDS=${GRIDS:-tiles,persistent,persistent_zigzag}
started=$SECONDS
timeout -k 5 ${SWEEP_S:-520} flashtune sweep --suite --where loads=$LOADS --where use_fp8=False --where grid=$GRIDS \
  --timeout 60 --out sweeps_gluon 2>&1 | grep -v 'cfg/s\|cfg]' || echo "sweep exit $?"
echo "   ($((SECONDS - started)) s)"
tar czf "$OUT/gluon_tables.tar.gz" sweeps_gluon
python3 - <<'PY'
import json, pathlib
for table in sorted(pathlib.Path("sweeps_gluon").glob("*.jsonl*")):
    rows = [json.loads(line) for line in table.read_text().splitlines() if line.strip()]
    ok = [r for r in rows if r.get("status") == "ok"]
    best = max(ok, key=lambda r: r.get("tflops") or 0, default=None)
    print(f"{table.name:48s} {len(rows):4d} rows {len(ok):4d} ok  best "
          + (f"{best['tflops']:.0f} TFLOP/s {best['config']}" if best else "-"))
PY

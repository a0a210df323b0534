#!/usr/bin/env bash
# The Gluon ping-pong kernel's part of the prefill space, swept on the H200 (about 5 minutes),
# so the replayed tuner can be asked whether it finds the suite's new bests (issue 20's tuner
# target):   bash docs/gpu/sweep-gluon.sh      (the jsonschema wheels carried in .whl)
# loads gluon_pingpong and gluon_pingpong_ordered x every tile, stage and warp count the
# feasibility model admits, grid tiles, both tile orders, bf16 (fp8 and the persistent grid
# are known failures of this kernel at 0b2c107): 344 configs a kernel over the 7 suite workloads.
# Back in $OUT: sweep-gluon.log and gluon_tables.tar.gz (one Measurement JSONL a workload,
# as `flashtune sweep` writes them, for experiments/data/h200_gluon/).
source "$(dirname "$0")/setup.sh" sweep-gluon.log
git rev-parse --short HEAD 2>/dev/null || true
started=$SECONDS
# A sweep cut by its timeout leaves <workload>.jsonl.partial (valid rows, resumable).
timeout -k 5 ${SWEEP_S:-420} flashtune sweep --suite --where loads=gluon_pingpong,gluon_pingpong_ordered \
  --where use_fp8=False --where grid=tiles --timeout 60 --out sweeps_gluon 2>&1 | grep -v 'cfg/s\|cfg]' \
  || echo "sweep exit $?"
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

#!/usr/bin/env bash
# Issue 20 (2026-12-04c): FA4's conditional rescaling in the Gluon kernel (LAZY_RESCALE) beside
# the kernel as it is, at each suite workload's best Gluon tiles and for fp8 (128- and 256-key
# blocks), SDPA cuDNN and flash in the same rounds (docs/gpu/variants_probe.py --plan lazy); the
# SM clock, power and throttle reasons sampled through it; then the cuDNN engine SDPA picks in
# three fresh processes (docs/lab/gpu/cudnn_engine.py, cuDNN's frontend log). About 5 minutes; carry .whl.
#   bash docs/lab/gpu/lazy-2026-12-04c.sh
# Back in $OUT: lazy.log, variants.json, clocks.csv, cudnn_fe_*.log.
source "$(dirname "$0")/../../gpu/setup.sh" lazy.log
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 250 > "$OUT/clocks.csv" 2>&1 &
sampler=$!
date +%T
timeout -k 5 ${PROBE_S:-420} python3 docs/gpu/variants_probe.py --plan lazy --rounds 2 --json "$OUT/variants.json"
date +%T
kill $sampler 2>/dev/null
for i in 1 2 3; do
  CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE="$OUT/cudnn_fe_$i.log" timeout 60 python3 docs/lab/gpu/cudnn_engine.py
done
ls -la "$OUT"/cudnn_fe_*.log 2>/dev/null
for i in 1 2 3; do grep -io 'engine[^,]*\|eng[0-9][^ ,]*' "$OUT/cudnn_fe_$i.log" 2>/dev/null | sort | uniq -c | head -8; echo "--"; done
python3 - "$OUT/clocks.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r and not r[0].startswith("timestamp")]
clk = sorted(int(r[1].split()[0]) for r in rows if r[1].strip().split()[0].isdigit())
pw = sorted(float(r[2].split()[0]) for r in rows if r[2].strip().split()[0].replace(".", "").isdigit())
reasons = {}
for r in rows:
    reasons[r[4].strip()] = reasons.get(r[4].strip(), 0) + 1
if clk:
    print(f"SM clock MHz: min {clk[0]} median {clk[len(clk)//2]} max {clk[-1]} ({len(clk)} samples); "
          f"power W median {pw[len(pw)//2] if pw else '-'} max {pw[-1] if pw else '-'}; throttle reasons {reasons}")
PY

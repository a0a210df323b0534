#!/usr/bin/env bash
# Record a GPU model from the H200's recorded space, as the H200 is recorded: its spec read from
# the device, then `flashtune sweep --like h200` (each suite workload's H200 top 5 %, a
# space-filling sample of the rest with every kernel variant, and configs the H200 could not run,
# compiled without the static check so the feasibility model is graded on this GPU), then its
# top configs re-timed beside SDPA cuDNN and flash (bench_peers, 3 interleaved rounds, a fresh
# process a workload) with the H200's best configs and the runtime's defaults on every workload.
#   bash docs/gpu/record-gpu.sh            (carry .whl; STEPS=sweep,retime; SWEEP_S, BENCH_S cut each step)
# A call cut short is resumed by the same command with the returned tables carried back:
#   mkdir -p resume && cp <files_at>/tables.tar.gz resume/   (carry resume too)
# Back in $OUT: record.log, spec.json, clocks.txt, tables.tar.gz (sweeps/: one Measurement JSONL a
# workload, .partial while unfinished), retime.json, bench_peers.log, retimed.tar.gz (retimed/).
source "$(dirname "$0")/setup.sh" record.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
git rev-parse --short HEAD 2>/dev/null || true
date +%T
[ -f resume/tables.tar.gz ] && tar xzf resume/tables.tar.gz && echo "resumed: $(cat sweeps/*.jsonl* | wc -l) rows"
python3 -c "
from flashtune.objectives.hardware import HardwareSpec
spec = HardwareSpec.from_device(); spec.to_json('$OUT/spec.json'); print(spec)"
nvidia-smi -q -d CLOCK,POWER > "$OUT/clocks.txt"
grep -A4 -E "Max Clocks|Power Limit" "$OUT/clocks.txt" | head -20
STEPS=${STEPS:-sweep,retime}
if [[ $STEPS == *sweep* ]]; then
  started=$SECONDS
  timeout -k 5 ${SWEEP_S:-480} flashtune sweep --suite --like h200 --where use_fp8=False --no-static-check \
    --timeout 60 --precompile 15 --out sweeps 2>&1 | grep -v 'cfg/s\|cfg]' || echo "sweep exit $?"
  echo "   sweep: $((SECONDS - started)) s"
  tar czf "$OUT/tables.tar.gz" sweeps
fi
if [[ $STEPS == *retime* ]]; then
  date +%T
  # The H200's best config of each suite workload and the runtime's Hopper default of each
  # (fallback_config): timed on every workload they fit, beside this GPU's own top 12.
  ALSO=$(python3 -c "
import json
from flashtune.kernels.space import validate_config
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.replay import load_table
from flashtune.objectives.types import SUITE
from flashtune.runtime.dispatching.baselines import fallback_config
hw = HardwareSpec.from_device()
also = set()
for w in SUITE:
    best = min((m for m in load_table(f'experiments/data/h200_retimed/{w.name}.jsonl') if m.ok), key=lambda m: m.median_ms)
    also |= {json.dumps(validate_config(c).to_dict(), sort_keys=True) for c in (best.config, fallback_config(hw, w))}
print(' '.join(\"--also '\" + a + \"'\" for a in sorted(also)))")
  eval "timeout -k 5 ${BENCH_S:-330} python3 -m flashtune.experiments.benchmarks.bench_peers --process-per-workload \
    --tables sweeps --top ${TOP:-12} --rounds 3 --json $OUT/retime.json $ALSO" > "$OUT/bench_peers.log" 2>&1
  tail -14 "$OUT/bench_peers.log"
  python3 docs/gpu/retimed_tables.py "$OUT/retime.json" --tables sweeps --out retimed \
    && tar czf "$OUT/retimed.tar.gz" retimed
fi
date +%T

#!/usr/bin/env bash
# Live studies on this GPU, cold and warm-started from the H200's recorded tables, seed after seed,
# each workload of the suite a study of its own (the default strategy):
#   bash docs/gpu/live-transfer.sh          (carry .whl; SEEDS="0 1", TRIALS=30, LIVE_S cuts the whole)
# ARMS="cold" (or "warm") runs one arm only. WARM_TRIALS (default TRIALS) shortens the warm arm: to show warm within 2 % in at most a third of
# cold's trials, warm needs no more than TRIALS/3 of them.
# The image lacks optuna, mlflow, deap and scikit-optimize: build .whl first (`bash docs/gpu/wheels.sh`, then
# `python docs/gpu/wheels_check.py`).
# Each workload runs the warm study first (its compiles warm Triton's cache for the cold one).
# Back in $OUT: live.log, <arm>-s<seed>.log, optuna.db (studies warm-s<seed> / cold-s<seed>, per workload), mlflow.db
# (one experiment for this GPU model: a parent run a study, a child run a trial).
source "$(dirname "$0")/setup.sh" live.log
export FLASHTUNE_STORE="$OUT/empty_store.json"
python3 -c "import optuna, mlflow, deap, skopt; print('optuna', optuna.__version__, 'mlflow', mlflow.__version__)" || exit 3
date +%T
PRIORS="--prior-from table:experiments/data/h200_grown --prior-from table:experiments/data/h200_lean
  --prior-from table:experiments/data/h200_lean_order --prior-from table:experiments/data/h200_gluon
  --prior-from table:experiments/data/h200_retimed"
deadline=$((SECONDS + ${LIVE_S:-500}))
# Workload by workload, the warm study then the cold one: a call cut short leaves whole pairs.
WORKLOADS=${WORKLOADS:-"4,32,4096,128 4,32,4096,128,causal 16,16,1024,64 1,32,16384,128,causal 8,16,2048,64,causal 2,16,8192,256 4,32/8,4096,128,causal"}
for seed in ${SEEDS:-0 1}; do
  for workload in $WORKLOADS; do
    for arm in ${ARMS:-warm cold}; do
      left=$((deadline - SECONDS)); [ $left -le 10 ] && break 3
      [ $arm = warm ] && from=$PRIORS || from=""
      [ $arm = warm ] && trials=${WARM_TRIALS:-${TRIALS:-30}} || trials=${TRIALS:-30}
      timeout -k 5 $left flashtune study h100 --workload $workload --trials $trials --seed $seed --no-progress \
        --study-name $arm-s$seed-$(echo $workload | tr ",/" "_-") --storage "sqlite:///$OUT/optuna.db" --tracking-uri "sqlite:///$OUT/mlflow.db" \
        $from >> "$OUT/$arm-s$seed.log" 2>&1 || echo "study $arm-s$seed $workload exit $?"
      echo "   $arm-s$seed $workload done at $(date +%T): $(grep -E '^best config' "$OUT/$arm-s$seed.log" | tail -1 | grep -oE '[0-9.]+ TFLOP/s')"
    done
  done
done
date +%T

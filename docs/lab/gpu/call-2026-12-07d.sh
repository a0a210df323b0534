#!/usr/bin/env bash
# 2026-12-07, fourth session, two commands on one machine (either card):
#   PART=kernels bash docs/lab/gpu/call-2026-12-07d.sh   (about 300 s) issue 42: the varlen kernel with its
#       output rows re-read (varlen_regs_probe.py: against the kernel before and dense, same tile), then the
#       continuous-batching GPU tests (TESTS_ANYWHERE=1; else on an H100, generate_batch against sdpa
#       and torch's varlen attention);
#   PART=sanitize bash docs/lab/gpu/call-2026-12-07d.sh  (about 450 s; carry [".whl", "resume"]) issue 44: the
#       sanitizer's GPU tests and tables; on the H100 resumed from the verdicts of 2026-12-07b.
#   PART=pack bash docs/lab/gpu/call-2026-12-07d.sh      (about 250 s) the packed kernels' defaults under the sanitizer
#       (issue 44), then issue 42's varlen_pack_probe.py (pack-GQA against one query head a tile).
if [ "${PART:-kernels}" = pack ]; then
  bash -c 'source docs/gpu/setup.sh pack.log; export PATH="$PATH:/usr/local/cuda/bin"; date +%T
    timeout -k 5 "${TESTS_S:-150}" python3 -m pytest -m gpu tests/gpu/test_sanitize_gpu.py -q -s -rA -k packed \
      -p no:cacheprovider 2>&1 | tail -25 || echo tests exit $?
    date +%T
    timeout -k 10 "${PROBE_S:-200}" python3 docs/lab/gpu/varlen_pack_probe.py --out "$OUT/varlen_pack.jsonl" \
      || echo probe exit $?
    date +%T' 2>&1 | tail -70
elif [ "${PART:-kernels}" = kernels ]; then
  bash -c 'source docs/gpu/setup.sh regs.log; date +%T
    timeout -k 10 "${PROBE_S:-240}" python3 docs/lab/gpu/varlen_regs_probe.py --out "$OUT/varlen_regs.jsonl" \
      || echo probe exit $?
    date +%T' 2>&1 | tail -45
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || [ -n "$TESTS_ANYWHERE" ]; then
    STEPS=tests TESTS_S="${TESTS_S:-110}" bash docs/gpu/continuous-batching.sh 2>&1 | tail -20
  else  # the tests passed on this H100 in the first call: the benchmark with torch's varlen peer instead
    STEPS=bench BENCH_S="${BENCH_S:-260}" IMPLS=sdpa,op,torch-varlen ROUNDS=1 bash docs/gpu/continuous-batching.sh 2>&1 | tail -30
  fi
else
  nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || echo "H100: resuming its verdicts"
  BATCH=8 TESTS_K="batches or memcheck or cached" TESTS_S="${TESTS_S:-130}" TABLES_S="${TABLES_S:-400}" \
    bash docs/gpu/sanitize.sh 2>&1 | tail -40
fi

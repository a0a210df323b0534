#!/usr/bin/env bash
# 2026-12-07, sixth session (no machine was lent; the plan for the next one), chained calls on one
# machine, either card (an H200 preferred: issue 42's H200 numbers are the kernel's before this day):
#   PART=pack bash docs/lab/gpu/call-2026-12-07f.sh     (about 250 s; carry [".whl", "resume"]) the packed
#       kernels' defaults under the sanitizer (issue 44), then varlen_pack_probe.py (pack-GQA, issue 42);
#   PART=kernels bash docs/lab/gpu/call-2026-12-07f.sh  (about 420 s) the varlen kernel's three SASS changes
#       against the kernel before and dense (varlen_band_probe.py), the grid by packed rows against the
#       grid by the longest (varlen_grid_probe.py), then the continuous-batching GPU tests;
#   PART=bench bash docs/lab/gpu/call-2026-12-07f.sh    (about 560 s) generate_batch: sdpa, op, op with the
#       grid by packed rows ("auto"), the same with pack-GQA (whose 4x tiles a sequence the longest's grid
#       would multiply under CUDA graphs' padded max_seqlen_q), op-paged, torch-varlen; IMPLS, ROUNDS override.
case "${PART:-pack}" in
  pack) PART=pack bash docs/lab/gpu/call-2026-12-07d.sh ;;
  kernels)
    bash -c 'source docs/gpu/setup.sh band.log; date +%T
      timeout -k 10 "${PROBE_S:-240}" python3 docs/lab/gpu/varlen_band_probe.py --out "$OUT/varlen_band.jsonl" \
        || echo band probe exit $?
      date +%T
      timeout -k 10 "${GRID_S:-100}" python3 docs/lab/gpu/varlen_grid_probe.py --out "$OUT/varlen_grid.jsonl" \
        || echo grid probe exit $?
      date +%T' 2>&1 | tail -70
    STEPS=tests TESTS_S="${TESTS_S:-110}" bash docs/gpu/continuous-batching.sh 2>&1 | tail -20 ;;
  bench) IMPLS="${IMPLS:-sdpa,op,op-auto,op-packgqa-auto,op-paged,torch-varlen}" BENCH_S="${BENCH_S:-540}" \
           PART=bench bash docs/lab/gpu/call-2026-12-07e.sh ;;
esac

#!/usr/bin/env bash
# 2026-12-07, sixth session (no machine was lent; the plan for the next one), chained calls on one
# machine, either card (an H200 preferred: issue 42's H200 numbers are the kernel's before two changes):
#   PART=pack bash docs/lab/gpu/call-2026-12-07f.sh     (about 250 s; carry [".whl", "resume"]) the packed
#       kernels' defaults under the sanitizer (issue 44), then varlen_pack_probe.py (pack-GQA, issue 42);
#   PART=kernels bash docs/lab/gpu/call-2026-12-07f.sh  (about 300 s) the causal band masked by causality
#       alone against the kernel before and dense (varlen_band_probe.py), then the continuous-batching
#       GPU tests on whichever card (the kernel changed since they last passed);
#   PART=bench bash docs/lab/gpu/call-2026-12-07f.sh    (about 330 s) generate_batch: sdpa, op, op with
#       pack-GQA, op-paged, torch-varlen (call-2026-12-07e.sh's); IMPLS and ROUNDS override.
case "${PART:-pack}" in
  pack) PART=pack bash docs/lab/gpu/call-2026-12-07d.sh ;;
  kernels)
    bash -c 'source docs/gpu/setup.sh band.log; date +%T
      timeout -k 10 "${PROBE_S:-240}" python3 docs/lab/gpu/varlen_band_probe.py --out "$OUT/varlen_band.jsonl" \
        || echo probe exit $?
      date +%T' 2>&1 | tail -45
    STEPS=tests TESTS_S="${TESTS_S:-110}" bash docs/gpu/continuous-batching.sh 2>&1 | tail -20 ;;
  bench) PART=bench bash docs/lab/gpu/call-2026-12-07e.sh ;;
esac

#!/usr/bin/env bash
# 2026-12-07, fifth session, chained calls on one machine (an H200 wanted for issue 42's numbers):
#   PART=pack bash docs/lab/gpu/call-2026-12-07e.sh     (about 250 s) the packed kernels' defaults under the
#       sanitizer (issue 44), then varlen_pack_probe.py (pack-GQA against one query head a tile, issue 42);
#   PART=kernels bash docs/lab/gpu/call-2026-12-07e.sh  (about 300 s) the re-read rows' kernel against the
#       kernel before and dense (varlen_regs_probe.py), then the continuous-batching GPU tests;
#   PART=bench bash docs/lab/gpu/call-2026-12-07e.sh    (about 330 s) generate_batch: sdpa, op, op with
#       pack-GQA (cb_pack_bench.py), op-paged, torch-varlen; IMPLS and ROUNDS override.
case "${PART:-pack}" in
  pack|kernels) PART=$PART bash docs/lab/gpu/call-2026-12-07d.sh ;;
  bench)
    bash -c 'source docs/gpu/setup.sh cb.log; date +%T
      timeout -k 10 "${BENCH_S:-420}" python3 docs/lab/gpu/cb_pack_bench.py --requests "${REQUESTS:-64}" \
        --implementations "${IMPLS:-sdpa,op,op-packgqa,op-paged,torch-varlen}" --rounds "${ROUNDS:-1}" \
        --out "$OUT/cb.json" || echo "bench exit $?"
      date +%T' 2>&1 | tail -40 ;;
esac

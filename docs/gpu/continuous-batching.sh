#!/usr/bin/env bash
# transformers' continuous batching on the op, on the lent GPU, in one call of about 8 minutes:
#   bash docs/gpu/continuous-batching.sh      (STEPS="tests kernels bench"; TESTS_S, KERNELS_S, BENCH_S cut; ROUNDS=2
#                                               each step; REQUESTS=64; IMPLS=sdpa,op,op-paged, and
#                                               torch-varlen: torch's varlen attention on the same path)
# 1. the GPU tests: the varlen kernel in bf16 against float32 (mixed lengths, chunked prefill,
#    GQA, a padded step); the paged kernel against the contiguous cache; generate_batch on the op
#    (varlen and paged) against transformers' sdpa, greedy tokens and teacher-forced packed logits
#    (tests/gpu/test_continuous_batching_gpu.py);
# 2. kernels: docs/lab/tools/cb_kernels.py, packed prefill against dense prefill with the same tile,
#    mixed lengths against torch's varlen attention, paged decode against contiguous decode;
# 3. bench_continuous_batching: a Llama-3-8B-shaped model (4 layers, bf16, 32/8 heads), REQUESTS
#    requests with prompts of 64 to 8192 tokens and 16 to 256 new ones, all at once and in a
#    stream, sdpa and the op taking turns (a warm-up round, then 2): tokens/s, time to first token,
#    greedy agreement. The image has transformers (5.17 as of 2026-12-06): no wheels needed.
# 4. sweep (optional, not in the default STEPS: run it alone, STEPS=sweep): `flashtune sweep --kernel varlen`
#    (120 configs) on 16 sequences x 1024 causal and `--kernel paged --page-size 256` (512 configs, 64
#    compiles: num_splits is a runtime argument) on 64 sequences x 4096 cached keys, q_len 1 (bf16, 32/8
#    heads, head dim 128, the Llama shape of bench), then `flashtune export` of both into a store. SWEEP_S
#    (default 500) cuts it, half to each kernel; a sweep cut short keeps its <table>.partial in $OUT/sweeps,
#    which the same command resumes when $OUT/sweeps is brought back (export reads finished tables only).
# Back in $OUT: cb.log, cb_tests.log (the tests' whole output), cb_kernels.json, cb.json; with sweep,
# sweeps/ (the varlen and paged tables) and packed-configs.json (their store).
source "$(dirname "$0")/setup.sh" cb.log
git rev-parse --short HEAD 2>/dev/null || true
python3 -c "import transformers; print('transformers', transformers.__version__)"
for step in ${STEPS:-tests kernels bench}; do
  date +%T
  case $step in
    tests) timeout -k 5 "${TESTS_S:-150}" python3 -m pytest -m gpu tests/gpu/test_continuous_batching_gpu.py -q -rA \
             -p no:cacheprovider > "$OUT/cb_tests.log" 2>&1; echo "tests exit $? (whole output: cb_tests.log)"
           grep -E "^(PASSED|FAILED|ERROR)|passed|failed|Aborted|illegal" "$OUT/cb_tests.log" | tail -15 ;;
    kernels) timeout -k 5 "${KERNELS_S:-200}" python3 docs/lab/tools/cb_kernels.py --out "$OUT/cb_kernels.json" \
               || echo "kernels exit $?" ;;
    bench) timeout -k 10 "${BENCH_S:-330}" python3 -m flashtune.experiments.benchmarks.bench_continuous_batching \
             --requests "${REQUESTS:-64}" --implementations "${IMPLS:-sdpa,op,op-paged}" --rounds "${ROUNDS:-2}" --out "$OUT/cb.json" \
             || echo "bench exit $?" ;;
    sweep) half=$(( ${SWEEP_S:-500} / 2 ))
           timeout -k 5 "$half" flashtune sweep --kernel varlen --workload 16,32/8,1024,128,causal,bfloat16 \
             --out "$OUT/sweeps" || echo "varlen sweep exit $?"
           timeout -k 5 "$half" flashtune sweep --kernel paged --page-size 256 \
             --workload 64,32/8,1/4096,128,causal,bfloat16 --out "$OUT/sweeps" || echo "paged sweep exit $?"
           flashtune export --to "$OUT/packed-configs.json" "table:$OUT/sweeps" || echo "export exit $?" ;;
  esac
done
date +%T

#!/usr/bin/env bash
# The continuous-batching GPU tests one process each (the whole file aborted with exit 134 on the
# H100 on 2026-12-06, its output cut by a tail): which test, its full output, and compute-sanitizer's
# memcheck on the kernel tests that fail.   bash docs/lab/gpu/cb-tests-isolated-2026-12-06.sh
source "$(dirname "$0")/../../gpu/setup.sh" isolated.log
FILE=tests/gpu/test_continuous_batching_gpu.py
ids=$(python3 -m pytest -m gpu $FILE --collect-only -q -p no:cacheprovider | grep '::')
i=0
for id in $ids; do
  i=$((i + 1))
  CUDA_LAUNCH_BLOCKING=1 timeout -k 5 ${TEST_S:-90} python3 -m pytest -m gpu "$id" -x -q -p no:cacheprovider \
    > "$OUT/test$i.log" 2>&1
  rc=$?
  echo "test$i rc=$rc $id"
  if [ $rc -ne 0 ]; then
    grep -m8 -E "illegal|CUDA error|Error|error:|^E |assert" "$OUT/test$i.log"
    case $id in *generate_batch*) ;; *)
      timeout -k 5 ${SAN_S:-120} compute-sanitizer --tool memcheck --print-limit 5 python3 -m pytest -m gpu "$id" -x -q \
        -p no:cacheprovider > "$OUT/memcheck$i.log" 2>&1
      grep -m12 -E "Invalid|at .*0x|by thread|Address|ERROR SUMMARY" "$OUT/memcheck$i.log" ;;
    esac
  else
    tail -1 "$OUT/test$i.log"
  fi
done

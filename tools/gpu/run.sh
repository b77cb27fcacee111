#!/usr/bin/env bash
# One call on the GPU machine (device tool, `carry: [".devrun"]`): builds tools/gpu, runs a
# short smoke test, then per MODE:
#   test   all GPU tests              bench   the full GEMV benchmark (tools/bench_gemv.sh)
#   full   benchmark + tests + compute-sanitizer memcheck / racecheck on the GEMV tests
#   prof   Nsight Compute source-level stall samples of one launch per shape (SHAPES="a b"),
#          in the configuration VARIANT (gemv_bench --shape flags: "acc d4 nopdl"; default plain)
# Logs go to $OUT/logs.tgz (the device tool returns at most 8 files).
set -o pipefail
mode=${1:-full}
t0=$(date +%s)
L=/tmp/dsv4-gpu-logs; rm -rf $L; mkdir -p $L
trap 'tar czf $OUT/logs.tgz -C $L .' EXIT
B=.devrun/build
cmake -S tools/gpu -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > $L/cmake.log 2>&1 || { tail -30 $L/cmake.log; exit 1; }
ninja -C $B -j16 cuda_gpu_test cuda_layout_test gemv_bench > $L/build.log 2>&1 || { grep -E "error" -A5 $L/build.log | head -60; exit 1; }
echo "build done $(( $(date +%s) - t0 ))s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv,noheader
$B/cuda_layout_test > $L/layout_test.log 2>&1 || { tail -20 $L/layout_test.log; exit 1; }
timeout 90 $B/cuda_gpu_test --gtest_filter='GemvGpu.Odd*:GemvGpu.DependentChain*' > $L/smoke.log 2>&1 || { tail -20 $L/smoke.log; exit 1; }
if [ "$mode" = prof ]; then
  N=/usr/local/cuda/bin/ncu
  for sh in ${SHAPES:-experts_w13 wq_b}; do
    timeout 150 $N --graph-profiling node --kernel-name regex:gemv_kernel --launch-skip 40 --launch-count 1 \
      --section WarpStateStats --section SourceCounters --import-source no -o $L/rep_$sh \
      $B/gemv_bench --shape $sh ${VARIANT:-} > $L/ncu_$sh.txt 2>&1; echo "ncu $sh rc=$?"
    $N --import $L/rep_$sh.ncu-rep --page source --csv --print-source sass > $L/src_$sh.csv 2>&1
  done
  exit 0
fi
if [ "$mode" = bench ] || [ "$mode" = full ]; then
  timeout 330 bash tools/bench_gemv.sh $B $L/bench > $L/bench.out 2>&1; echo "bench rc=$?"
  cat $L/bench/table.md
fi
if [ "$mode" = test ] || [ "$mode" = full ]; then
  timeout $(( 540 - ($(date +%s) - t0) )) $B/cuda_gpu_test > $L/gpu_test.log 2>&1; echo "gpu test rc=$?"
  grep -E "^\[  (PASSED|FAILED)|FAILED" $L/gpu_test.log | head -30
fi
if [ "$mode" = full ]; then
  for tool in memcheck racecheck; do
    timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool $tool --error-exitcode 9 $B/cuda_gpu_test \
      --gtest_filter='GemvGpu.EveryGrid*:GemvGpu.DependentChain*:GemvGpu.GroupedExperts*:GemvGpu.CapturedInAGraph:GemvGpu.AccumulateIntoY:GemvGpu.MoeStepChainWithPdl' \
      > $L/sanitizer_$tool.log 2>&1; echo "$tool rc=$?"
  done
fi
true

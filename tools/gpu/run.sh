#!/usr/bin/env bash
# One call on the GPU machine (device tool, `carry: [".devrun"]`), from the repo root: configures
# the whole project with the top-level CMake and the `gpu` preset (CI's release preset with the
# CUDA backend required) against the Debian packages of tools/gpu/deps.sh
# (tools/gpu/configure.sh), builds everything, runs a short smoke test, then per MODE:
#   test   ctest --preset gpu: the tests labelled gpu and cuda
#   bench  the full GEMV benchmark (tools/bench_gemv.sh)
#   full   benchmark + tests + compute-sanitizer memcheck / racecheck on the GEMV tests
#   engine the whole-model benchmark (tools/gpu/bench_engine.sh: CPU vs CUDA), then
#          compute-sanitizer memcheck / racecheck on the op and numerics tests; run after `test`
#   decode the GPU tests of the step graphs and synthetic experts, then the V4-Flash-size decode
#          benchmark (tools/gpu/bench_decode.sh; CONTEXT, default 8192)
#   multigpu  (a machine with 2+ GPUs) ctest --preset gpu2 (ranks over NCCL, label multigpu),
#          then `dsv4 bench --gpus N` (GPUS, default 2) on synthetic V4-Flash, all 43 layers,
#          batch 1 and 32 at 8K (FORMAT, default nvfp4) with the op profile (the collective's
#          time), beside one GPU's batch 1 on the layers that fit it
# TARGETS="a b" builds only those targets.
#   kprof  Nsight Compute's time of every kernel of 3 batch-1 decode steps (4 layers; LAYERS=N
#          for more; tools/gpu/kprof_summary.py sums them by part of the layer);
#          OPS_TESTS=1 runs the op tests first (build cuda_ops_gpu_test too)
#   trace  a decode step's graph as a timeline: `dsv4 bench` (LAYERS, default 4; BATCH, FORMAT,
#          CONTEXT) without and then with bench/kernel_trace.cc's CUPTI recorder, and
#          tools/gpu/trace_summary.py's tables (every kernel's start, duration and share of the
#          step; the shares per layer kind; the sums by kernel; LAUNCHES=A-B: also each launch's
#          own start and end of kernels A..B)
#   prof   Nsight Compute source-level stall samples of one launch per shape (SHAPES="a b"),
#          in the configuration VARIANT (gemv_bench --shape flags: "acc d4 nopdl"; default plain);
#          KERNEL=REGEX: of one launch of that decode-step kernel instead (e.g.
#          hc_pre_cluster_kernel; SKIP launches of it skipped first, default 8, counted from the
#          prefill's: check the grid in details_kernel.log), in the 4-layer decode bench, timed
#          alone (not beside its graph neighbours); samples every 32 cycles; each profile
#          summarised by tools/gpu/ncu_stalls.py (stalls_SHAPE.log, stalls_kernel.log)
# DSV4_EXPECT_GPU=1 throughout: a GPU test that cannot reach the GPU fails instead of skipping.
# Each step's output is in logs/NAME.log (the prof CSVs in src_SHAPE.log, or src_kernel.log).
# Exits with the worst (highest) status of its steps, 0 only when every step passed. Logs go to
# $OUT/logs.tgz (the device tool returns at most 8 files).
set -o pipefail
mode=${1:-full}
t0=$(date +%s)
L=/tmp/dsv4-gpu-logs; rm -rf $L; mkdir -p $L
B=build-gpu
export DSV4_EXPECT_GPU=1
rc=0
trap 'tar czf $OUT/logs.tgz -C $L .' EXIT
# step NAME CMD...: runs CMD with its output in $L/NAME.log, prints NAME's status (and the log's
# tail when it failed) and keeps the worst status in rc.
step() {
  local name=$1 r
  shift
  "$@" > $L/$name.log 2>&1
  r=$?
  echo "$name rc=$r ($(( $(date +%s) - t0 ))s)"
  if [ $r -ne 0 ]; then
    tail -30 $L/$name.log
    if [ $r -gt $rc ]; then rc=$r; fi
  fi
  return $r
}

step configure bash tools/gpu/configure.sh gpu || exit $rc
# -k 0: a target that fails to build does not stop the others (their tests still run; rc keeps
# the failure).
step build cmake --build --preset gpu -j16 ${TARGETS:+--target $TARGETS} -- -k 0
grep -E ": (error|warning)" $L/build.log | head -40
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv,noheader
[ "$mode" = kprof ] || [ "$mode" = trace ] || [ -n "${KERNEL:-}" ] || step smoke timeout 90 $B/tests/cuda/cuda_gpu_test --gtest_filter='GemvGpu.Odd*:GemvGpu.DependentChain*' ||
  exit $rc
if [ "$mode" = prof ]; then
  N=/usr/local/cuda/bin/ncu
  # profile NAME TIMEOUT REGEX SKIP [NCU FLAGS...] -- CMD...: the stall samples of the launch of
  # REGEX past the first SKIP (graph nodes count), its SASS page in src_NAME.log and
  # ncu_stalls.py's summary of it in stalls_NAME.log.
  profile() {
    local name=$1 limit=$2 regex=$3 skip=$4 flags=()
    shift 4
    while [ "$1" != -- ]; do flags+=("$1"); shift; done
    shift
    step ncu_$name timeout $limit $N --graph-profiling node --kernel-name regex:$regex \
      --launch-skip $skip --launch-count 1 "${flags[@]}" --section WarpStateStats \
      --section SourceCounters --import-source no -o $L/rep_$name "$@"
    step src_$name $N --import $L/rep_$name.ncu-rep --page source --csv --print-source sass
    step stalls_$name python3 tools/gpu/ncu_stalls.py $L/src_$name.log
  }
  if [ -n "${KERNEL:-}" ]; then
    # One launch of a decode-step kernel (its graph node) of the 4-layer V4-Flash-size model,
    # past the first SKIP launches of that name (default 8), counted from the prefill's: the
    # details page names the launch's grid (a prefill launch has the chunk's tokens in it).
    profile kernel 400 "$KERNEL" ${SKIP:-8} --warp-sampling-interval 0 --section SpeedOfLight -- \
      $B/src/cli/dsv4 bench --device cuda --synthetic v4-flash --layers ${LAYERS:-4} \
      --format nvfp4 --context ${CONTEXT:-8192} --prompt-len 512 --max-chunk 512 --repeats 1 \
      --decode 8 --batch ${BATCH:-1}
    step details_kernel $N --import $L/rep_kernel.ncu-rep --page details
    grep -E "^  [a-z].*\(|Duration" $L/details_kernel.log
    head -30 $L/stalls_kernel.log
    exit $rc
  fi
  for sh in ${SHAPES:-experts_w13 wq_b}; do
    profile $sh 150 gemv_kernel 40 -- $B/bench/gemv_bench --shape $sh ${VARIANT:-}
  done
  exit $rc
fi
if [ "$mode" = kprof ] && [ -n "${OPS_TESTS:-}" ]; then
  step ops_tests timeout 200 $B/tests/cuda/cuda_ops_gpu_test
  grep -E "FAILED|PASSED|tests ran" $L/ops_tests.log | tail -15
fi
if [ "$mode" = trace ]; then
  # The same bench twice: the untraced run's ms/step says how much the recorder perturbs.
  bench="$B/src/cli/dsv4 bench --device cuda --synthetic v4-flash --layers ${LAYERS:-4}
         --format ${FORMAT:-nvfp4} --context ${CONTEXT:-8192} --prompt-len 512 --max-chunk 512
         --repeats 1 --decode 24 --batch ${BATCH:-1}"
  step bench_untraced timeout 200 $bench
  step bench_traced timeout 200 env CUDA_INJECTION64_PATH=$PWD/$B/bench/libkernel_trace.so \
    DSV4_TRACE_OUT=$L/trace.csv $bench
  grep -hE "^read bandwidth|^\| " $L/bench_untraced.log $L/bench_traced.log
  step trace_summary python3 tools/gpu/trace_summary.py $L/trace.csv 16 ${LAUNCHES:+--launches $LAUNCHES}
  cat $L/trace_summary.log
  exit $rc
fi
if [ "$mode" = kprof ]; then
  # Every kernel of a few batch-1 decode steps of a 4-layer V4-Flash-size model, timed one by
  # one by Nsight Compute (the capture range is the bench's --profile steps).
  step kprof timeout 400 /usr/local/cuda/bin/ncu --clock-control none --profile-from-start off \
    --metrics gpu__time_duration.sum --csv $B/src/cli/dsv4 bench --device cuda \
    --synthetic v4-flash --layers ${LAYERS:-4} --format nvfp4 --context ${CONTEXT:-8192} \
    --prompt-len 512 --max-chunk 512 --repeats 1 --decode 3 --batch ${BATCH:-1} --profile
  exit $rc
fi
if [ "$mode" = bench ] || [ "$mode" = full ]; then
  step bench timeout 330 bash tools/bench_gemv.sh $B/bench $L/bench
  cat $L/bench/table.md
fi
if [ "$mode" = test ] || [ "$mode" = full ]; then
  left=$(( 540 - ($(date +%s) - t0) ))
  step ctest timeout $(( left > 60 ? left : 60 )) ctest --preset gpu
  # (ctest -V puts "NUMBER: " in front of each line of a test's output.)
  grep -E "^[0-9]+: \[  (PASSED|FAILED|SKIPPED) |tests passed|tests failed" $L/ctest.log | head -30
fi
if [ "$mode" = full ]; then
  for tool in memcheck racecheck; do
    step $tool timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool $tool --error-exitcode 9 \
      $B/tests/cuda/cuda_gpu_test \
      --gtest_filter='GemvGpu.EveryGrid*:GemvGpu.DependentChain*:GemvGpu.GroupedExperts*:GemvGpu.CapturedInAGraph:GemvGpu.AccumulateIntoY:GemvGpu.MoeStepChainWithPdl'
  done
fi
if [ "$mode" = decode ]; then
  step decode_tests timeout 200 $B/tests/cuda/cuda_engine_gpu_test --gtest_filter='CudaStepGraph.*'
  step synth_test timeout 60 $B/tests/cuda/cuda_ops_gpu_test --gtest_filter='*Synthetic*'
  step bench_decode timeout 560 bash tools/gpu/bench_decode.sh $B $L/decode ${CONTEXT:-8192}
  cat $L/bench_decode.log
fi
if [ "$mode" = multigpu ]; then
  nvidia-smi -L
  step ctest_gpu2 timeout 300 ctest --preset gpu2
  grep -E "tests passed|tests failed|\(Failed\)|Timeout" $L/ctest_gpu2.log | head -20
  bench="$B/src/cli/dsv4 bench --synthetic v4-flash --context 8192 --prompt-len 512 --max-chunk 512
         --repeats 1 --decode 24 --format ${FORMAT:-nvfp4}"
  # (--profile: the op table has the sum over the ranks, all_reduce_sum, beside the rest)
  step bench_gpus timeout 250 $bench --gpus ${GPUS:-2} --layers 43 --batch 1,32 --profile
  cat $L/bench_gpus.log
  step bench_one timeout 150 $bench --device cuda --batch 1
  cat $L/bench_one.log
fi
if [ "$mode" = engine ]; then
  step bench_engine timeout 330 bash tools/gpu/bench_engine.sh $B $L/engine
  cat $L/engine/engine_bench.md
  for t in ops numerics; do
    for tool in memcheck racecheck; do
      step ${tool}_$t timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool $tool \
        --error-exitcode 9 $B/tests/cuda/cuda_${t}_gpu_test
    done
  done
fi
exit $rc

#!/usr/bin/env bash
# A/B decode measurements on the GPU machine in one device call (device tool, `carry:
# [".devrun"]`), from the repo root: configures and builds the `gpu` preset against the debs of
# tools/gpu/deps.sh (tools/gpu/configure.sh), optionally runs GPU tests, then one `dsv4 bench`
# of the V4-Flash-size synthetic model per variant, in the order given, so that alternated
# variants share the run's conditions (docs/perf.md's "alternated in one run" tables).
#   VARIANTS  space-separated variants, each a '+'-joined list of VAR=VALUE set for that bench
#             only, e.g. "DSV4_CUDA_BRANCHES=1 DSV4_CUDA_BRANCHES=0 DSV4_CUDA_BRANCHES=1
#             DSV4_CUDA_BRANCHES=0" or "BATCH=8,32 FORMAT=release" (X=1: no change)
#   BATCH, FORMAT, EXTRA  the bench's --batch (default 1), --format (nvfp4) and more flags;
#             a variant may set them too
#   FILTER    a gtest filter run first on tests/cuda/$FBIN (default cuda_ops_gpu_test)
#   SKIPTEST  non-empty: no `ctest --preset gpu`
#   PRE       a command run (eval) after the tests, e.g. "build-gpu/bench/hc_bench"
#   BUDGET    seconds after which no further bench starts (default 480: the tool's 600 s limit)
#   BASE      a tarball of another commit's sources, made before the call, e.g.
#             `git archive -o .devrun/base.tar HEAD -- . ':!models' ':!tests/data'`: its dsv4 is
#             built beside the working tree's (/tmp/base), and a variant with SIDE=base benches
#             it (e.g. VARIANTS="X=1 SIDE=base X=1 SIDE=base": a change against its parent)
#   LOGS      the log folder (default /tmp/ab-logs; a PRE command may write there too), packed
#             into $OUT/ab-logs.tgz at exit: the device tool returns at most 8 files
# Logs: bench1.log, ... (in the tarball); prints each bench's table row.
set -o pipefail
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
export LOGS=${LOGS:-/tmp/ab-logs}
rm -rf "$LOGS" && mkdir -p "$LOGS"
trap 'tar czf "$OUT/ab-logs.tgz" -C "$LOGS" .' EXIT
export DSV4_EXPECT_GPU=1
jobs=16
if [ -n "${BASE:-}" ]; then  # the other commit's dsv4, built alongside (half the cores each)
  jobs=8
  root=$PWD
  rm -rf /tmp/base && mkdir -p /tmp/base && tar -xf "$BASE" -C /tmp/base
  ( cd /tmp/base && DEBS=$root/.devrun/debs bash tools/gpu/configure.sh gpu > "$LOGS/cfg-base.log" 2>&1 &&
      cmake --build --preset gpu --target dsv4 -j$jobs > "$LOGS/build-base.log" 2>&1 ) &
fi
bash tools/gpu/configure.sh gpu > "$LOGS/cfg.log" 2>&1 || { tail -20 "$LOGS/cfg.log"; exit 1; }
cmake --build --preset gpu -j$jobs > "$LOGS/build.log" 2>&1 || { grep -E "error" "$LOGS/build.log" | head -30; exit 1; }
if [ -n "${BASE:-}" ]; then
  wait $! || { tail -20 "$LOGS/cfg-base.log" "$LOGS/build-base.log"; exit 1; }
fi
echo "build done $(el)s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
if [ -n "${FILTER:-}" ]; then
  timeout 200 "build-gpu/tests/cuda/${FBIN:-cuda_ops_gpu_test}" --gtest_filter="$FILTER" > "$LOGS/filter.log" 2>&1
  echo "filter rc=$? $(el)s"
  grep -E "FAILED|PASSED|Failure" "$LOGS/filter.log" | head -20
fi
if [ -z "${SKIPTEST:-}" ]; then
  ctest --preset gpu --output-on-failure > "$LOGS/ctest.log" 2>&1
  echo "ctest rc=$? $(el)s"
  grep -E "tests passed|Failed|\(Failed\)|Timeout" "$LOGS/ctest.log" | head -20
fi
if [ -n "${PRE:-}" ]; then eval "$PRE"; echo "pre rc=$? $(el)s"; fi
i=0
for v in ${VARIANTS:-}; do
  i=$((i + 1))
  if [ "$(el)" -gt "${BUDGET:-480}" ]; then echo "skip $v (time)"; continue; fi
  (
    export $(echo "$v" | tr '+' ' ')
    bin=build-gpu/src/cli/dsv4
    [ "${SIDE:-}" = base ] && bin=/tmp/base/build-gpu/src/cli/dsv4
    timeout 200 $bin bench --device cuda --synthetic v4-flash --context 8192 \
      --prompt-len 512 --max-chunk 512 --repeats 1 --decode 24 --format "${FORMAT:-nvfp4}" \
      --batch "${BATCH:-1}" ${EXTRA:-} > "$LOGS/bench$i.log" 2>&1
  )
  echo "== $v rc=$? $(el)s"
  grep -E "^read|^\| [0-9]" "$LOGS/bench$i.log" | head -12
done

#!/usr/bin/env bash
# The whole test suite: set-up, then (1) ASan+UBSan build of the host code and its tests,
# (2) TSan on the thread pool and the forward passes that run on it, (3) each libFuzzer target
# for FUZZ_SECONDS (default 15: CI's 30 minutes on 2 cores are nearly full), (4) the release
# build, which also compiles the CUDA targets when nvcc exists (GPU tests skip without a GPU),
# and all tests. Compiling is most of the time on CI's 2 cores: every preset here is a unity
# build (8 files a translation unit, CMakePresets.json: each header's inline code generated
# once per batch instead of once per file; about half the compile time), and the sanitized and
# fuzz builds compile at -O1 (the CPU reference's loops at -O2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
jobs=$(nproc)
fuzz_seconds=${FUZZ_SECONDS:-15}
# CI's budget is 30 minutes on 2 cores: each stage prints the time so far.
stamp() { echo "   ($((SECONDS / 60)) min $((SECONDS % 60)) s so far)"; }

echo "== sanitized build (ASan + UBSan)"
cmake --preset asan >/dev/null
cmake --build --preset asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --preset asan -j"$jobs" --timeout 600

stamp
echo "== thread sanitizer (thread pool, chunked and golden forward passes)"
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j"$jobs"
ctest --preset tsan -j"$jobs" --timeout 600

stamp
echo "== fuzzers (${fuzz_seconds} s each)"
cmake --preset fuzz >/dev/null
fuzzers=$(ls fuzz/*_fuzz.cc | xargs -n1 basename | sed 's/\.cc$//')
cmake --build --preset fuzz -j"$jobs" --target $fuzzers
for f in $fuzzers; do
  corpus=$(mktemp -d)
  name=${f%_fuzz}
  [ -d "fuzz/corpus/$name" ] && cp -r "fuzz/corpus/$name/." "$corpus/"
  "build-fuzz/fuzz/$f" -max_total_time="$fuzz_seconds" -print_final_stats=0 "$corpus" 2>&1 | tail -n 2
  rm -rf "$corpus"
done

stamp
echo "== release build and tests"
cmake --preset release >/dev/null
cmake --build --preset release -j"$jobs"
ctest --preset release -j"$jobs" --timeout 600
stamp

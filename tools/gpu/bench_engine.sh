#!/usr/bin/env bash
# The whole model, CPU reference vs CUDA, through `dsv4 bench` (prefill of 128 tokens; decode
# of one request after them, only the sampled ids downloaded each step), on the GPU machine:
#   small-rates (the transformers fixture: dense f32, 3 layers, hidden 128),
#   a mid-size random model (tools/gpu/make_bench_model.py: V4-Flash attention shapes, hidden
#   2048, 32 experts, 4 layers) in bf16 and, after `dsv4 quantize --all`, NVFP4.
# Usage: tools/gpu/bench_engine.sh BUILD_DIR OUT_DIR. Writes OUT_DIR/engine_bench.md.
set -uo pipefail
B=$1
O=$2
mkdir -p "$O"
D=$B/src/cli/dsv4
M=/tmp/dsv4-bench-mid
rm -rf $M
PYTHONUNBUFFERED=1 timeout 120 python3 tools/gpu/make_bench_model.py $M/bf16 > "$O/make_model.log" 2>&1 ||
  echo "make_bench_model failed (see make_model.log)"
timeout 90 $D quantize --model $M/bf16 --out $M/nvfp4 --all --no-progress > "$O/quantize.log" 2>&1 ||
  echo "quantize failed (see quantize.log)"
T=$O/engine_bench.md
echo "| model | device | prefill 128 tokens/s | decode ms/token (32 tokens) |" > $T
echo "|---|---|---|---|" >> $T
row() {  # row NAME MODEL DEVICE TIMEOUT
  local log=$O/bench_$1_$3.log
  timeout "$4" $D bench --model "$2" --device "$3" --prompt-len 128 --decode 32 --repeats 2 > $log 2>&1
  local r=$?
  local pf dc
  pf=$(grep -o "[0-9.]* tokens/s" $log | head -1)
  dc=$(grep -E "^\| [0-9]+ \| 1 \|" $log | head -1 | awk -F'|' '{gsub(/ /, "", $4); print $4}')
  echo "| $1 | $3 | ${pf:-rc=$r} | ${dc:-rc=$r} |" >> $T
}
row small-rates tests/data/golden/small-rates cpu 40
row small-rates tests/data/golden/small-rates cuda 40
row mid-bf16 $M/bf16 cuda 60
row mid-nvfp4 $M/nvfp4 cuda 60
row mid-bf16 $M/bf16 cpu 120
cat $T

#!/usr/bin/env bash
# Decode at V4 sizes on the GPU machine (issue #12): `dsv4 bench --synthetic` (random weights
# with V4-Flash's shapes, drawn on the GPU, as many layers as fit) in NVFP4 and in the release
# format, batch 1 / 8 / 32 at the given context, with the step replayed as a CUDA graph and,
# for comparison, op by op (--no-graphs); then transformers' DeepseekV4ForCausalLM on the same
# shapes (tools/gpu/bench_transformers.py, bf16 eager, 4 layers: ~13 GB a layer in bf16). With
# --profile the NVFP4 run also prints the per-op device time of a batch-1 decode run op by op.
# Usage: tools/gpu/bench_decode.sh BUILD_DIR OUT_DIR [CONTEXT]. Writes OUT_DIR/*.log and
# OUT_DIR/perf_rows.md (the rows for docs/perf.md, tools/gpu/perf_rows.py).
set -uo pipefail
B=$1
O=$2
C=${3:-8192}
mkdir -p "$O"
D=$B/src/cli/dsv4
run() {  # run NAME TIMEOUT ARGS...
  local name=$1 t=$2
  shift 2
  echo "== $name: dsv4 bench $*"
  timeout "$t" $D bench --device cuda "$@" > "$O/$name.log" 2>&1
  echo "rc=$?"
  grep -E "^model|^prefill|^read|^context|^expert|^op profile|^  <|^\|" "$O/$name.log" | head -40
}
common=(--synthetic v4-flash --context "$C" --prompt-len 512 --max-chunk 512 --repeats 1)
run flash_nvfp4 200 "${common[@]}" --format nvfp4 --batch 1,8,32 --decode 24 --profile
run flash_release 200 "${common[@]}" --format release --batch 1,8,32 --decode 24
run flash_nvfp4_nographs 150 "${common[@]}" --format nvfp4 --batch 1 --decode 24 --no-graphs
# The graph runs as docs/perf.md's decode table.
python3 "$(dirname "$0")/perf_rows.py" "$O/flash_nvfp4.log" "$O/flash_release.log" |
  tee "$O/perf_rows.md"
# TRANSFORMERS= (empty) skips the peer.
if [ -n "${TRANSFORMERS-1}" ]; then
  echo "== transformers DeepseekV4ForCausalLM, 4 layers, bf16 eager"
  timeout 240 python3 tools/gpu/bench_transformers.py --model v4-flash --layers 4 \
    --context "$C" --decode 8 --warmup 2 --out "$O/transformers.jsonl" > "$O/transformers.log" 2>&1
  echo "rc=$?"
  tail -3 "$O/transformers.log"
fi

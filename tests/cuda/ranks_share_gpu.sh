#!/bin/sh
# Two ranks started by hand on one GPU (CUDA_VISIBLE_DEVICES=0 for both, so rank 1 takes GPU
# 1 mod 1 = 0): the rendezvous, NCCL's unique id over it and NCCL's join run as on two GPUs,
# and NCCL refuses two ranks on one GPU at the join. Both ranks must end with exit 1 and
# NCCL's error within the time limit: an error, never a hang.
# Usage: ranks_share_gpu.sh DSV4 MODEL_DIR
set -u
dsv4=$1
model=$2
# A port from the process id (the rendezvous needs a free one; 127.0.0.1 only).
port=$((20000 + $$ % 20000))
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export CUDA_VISIBLE_DEVICES=0
run() {
  timeout 120 "$dsv4" check --device cuda --ranks 2 --rank "$1" \
    --rendezvous "127.0.0.1:$port" --model "$model" > "$dir/rank$1" 2>&1
}
run 1 &
pid1=$!
run 0
rc0=$?
wait $pid1
rc1=$?
for r in 0 1; do echo "--- rank $r"; cat "$dir/rank$r"; done
echo "exit codes: rank 0 $rc0, rank 1 $rc1"
[ "$rc0" = 1 ] && [ "$rc1" = 1 ] && grep -q "NCCL" "$dir/rank0" && grep -q "NCCL" "$dir/rank1"

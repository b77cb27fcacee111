#!/bin/sh
# Two ranks started by hand, rank 1 without a GPU (CUDA_VISIBLE_DEVICES empty): rank 1 fails
# making its device, before NCCL's join. Rank 0 must end with exit 1 and an error naming rank 1
# within the time limit (the sum over the rendezvous before the join fails, instead of the
# join waiting for rank 1 forever). Usage: rank_lost_before_join.sh DSV4 MODEL_DIR
set -u
dsv4=$1
model=$2
# A port from the process id (the rendezvous needs a free one; 127.0.0.1 only).
port=$((20000 + ($$ + 7919) % 20000))
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() {
  timeout 120 "$dsv4" check --device cuda --ranks 2 --rank "$1" \
    --rendezvous "127.0.0.1:$port" --model "$model" > "$dir/rank$1" 2>&1
}
CUDA_VISIBLE_DEVICES= run 1 &
pid1=$!
CUDA_VISIBLE_DEVICES=0 run 0
rc0=$?
wait $pid1
rc1=$?
for r in 0 1; do echo "--- rank $r"; cat "$dir/rank$r"; done
echo "exit codes: rank 0 $rc0, rank 1 $rc1"
[ "$rc0" = 1 ] && [ "$rc1" = 1 ] && grep -q "rank 0: the sum with rank 1" "$dir/rank0"

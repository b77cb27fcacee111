#!/usr/bin/env bash
# README command 1: set-up, release build of the CLI, then the main job on the model shipped in
# the repo (models/kjv-tiny, trained on the King James Bible): generate text from a prompt, then
# verify the engine against transformers' outputs for that model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)" --target dsv4
model=models/kjv-tiny
echo "== dsv4 generate --model $model --prompt \"In the beginning\""
build/src/cli/dsv4 generate --model "$model" --prompt "In the beginning" --max-tokens 60 \
  --temperature 0.8 --top-k 40 --seed 1
echo "== dsv4 check --model $model"
build/src/cli/dsv4 check --model "$model"

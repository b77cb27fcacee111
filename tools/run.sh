#!/usr/bin/env bash
# Set-up, release build, then the main job on the model shipped in the repo (a small random
# DeepSeek-V4 fixture until a trained model lands): generate a continuation, then verify the
# engine against transformers' outputs for that model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)" --target dsv4
model=tests/data/golden/small-rates
echo "== dsv4 generate --model $model"
build/src/cli/dsv4 generate --model "$model" --prompt-ids 0,17,42,99,256,311 --max-tokens 24
echo "== dsv4 check --model $model"
build/src/cli/dsv4 check --model "$model"

#!/usr/bin/env bash
# dsv4 perplexity on the shipped model's held-out text equals transformers' value (recorded in
# models/kjv-tiny/perplexity.json by tools/train/perplexity_hf.py) within 1e-3 relative.
set -eu
cli=$1
cd "$(dirname "$0")/.."
model=models/kjv-tiny
want=$(sed -n 's/^ *"perplexity": *\([0-9.]*\).*/\1/p' $model/perplexity.json)
got=$("$cli" perplexity --model $model --text $model/heldout.txt --context 512 --stride 256 \
        --no-progress | sed -n 's/^perplexity \([0-9.]*\) .*/\1/p')
echo "dsv4 $got, transformers $want"
awk -v g="$got" -v w="$want" 'BEGIN { d = (g - w) / w; if (d < 0) d = -d;
  printf "relative difference %.2e\n", d; exit !(g != "" && d <= 1e-3) }'

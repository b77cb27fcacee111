#!/usr/bin/env bash
# The whole GPU run for models/kjv-tiny: tokenizer, a smoke test of the scripts, training,
# held-out perplexity, golden fixture, samples. Run it from a folder that holds tools/train,
# tools/fixtures/golden.py and data/ (make_corpus.py's output; the GPU machine has no network):
#
#   bash tools/train/run_all.sh OUTDIR [TRAIN_SECONDS | --steps N]
#
# OUTDIR/result.tar.* get the model folder, the tokenizer and the logs, also when a later step
# fails. TRAIN_SECONDS (default 270) lets train.py time a few steps and pick --steps to fit;
# `--steps N` reproduces a given run.
set -uo pipefail
OUTD=${1:?usage: run_all.sh OUTDIR [TRAIN_SECONDS | --steps N]}
shift
if [ "${1:-}" = "--steps" ]; then TRAIN_ARGS="--steps ${2:?}"; else TRAIN_ARGS="--time-budget ${1:-270} --hard-limit $(( ${1:-270} + 60 ))"; fi
NAME=kjv-tiny
W=work
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
mkdir -p "$W/logs" "$OUTD"
# Files come back at most 16 MiB each: one tar, cut in 15 MiB parts (cat result.tar.* | tar x).
pack() { rm -f "$OUTD"/result.tar.*; tar cf - -C "$W" --exclude=./smoke . | split -b 15m - "$OUTD/result.tar."; ls -la "$OUTD"; }
trap pack EXIT
t0=$(date +%s)
stamp() { echo "=== $1 ($(( $(date +%s) - t0 )) s)"; }

python3 -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")' | tee "$W/logs/versions.txt"

stamp tokenizer
python3 tools/train/train_tokenizer.py --train data/train.txt --vocab-size 4096 --out "$W/tokenizer.json" \
  2>&1 | tee "$W/logs/tokenizer.log" || exit 1

stamp smoke
python3 tools/train/train.py --tokenizer "$W/tokenizer.json" --data data --out "$W/smoke" --smoke \
  --steps 3 --batch 2 --seq 128 2>&1 | tee "$W/logs/smoke_train.log" || exit 1
python3 tools/train/perplexity_hf.py --model "$W/smoke" --text data/heldout.txt --max-length 128 --stride 64 \
  --limit-tokens 700 2>&1 | tee "$W/logs/smoke_ppl.log" || echo "SMOKE: perplexity failed"
python3 tools/train/make_golden.py --model "$W/smoke" --text data/heldout.txt --seq 64 --chunks 13,9 --gen 20,8 \
  --tries 3 2>&1 | tail -n 30 | tee "$W/logs/smoke_golden.log" || echo "SMOKE: golden failed"
python3 tools/train/sample_hf.py --model "$W/smoke" --prompt "In the beginning" --max-new 8 \
  2>&1 | tee "$W/logs/smoke_sample.log" || echo "SMOKE: sample failed"

stamp train
# shellcheck disable=SC2086
python3 tools/train/train.py --tokenizer "$W/tokenizer.json" --data data --out "$W/$NAME" $TRAIN_ARGS \
  2>&1 | tee "$W/logs/train.log" || exit 1
pack

stamp perplexity
python3 tools/train/perplexity_hf.py --model "$W/$NAME" --text data/heldout.txt --max-length 512 --stride 256 \
  --json "$W/$NAME/perplexity.json" 2>&1 | tee "$W/logs/ppl_heldout.log"
python3 tools/train/perplexity_hf.py --model "$W/$NAME" --text data/valid.txt --max-length 512 --stride 256 \
  --json "$W/logs/ppl_valid.json" 2>&1 | tee "$W/logs/ppl_valid.log"
python3 tools/train/perplexity_hf.py --model "$W/$NAME" --text data/heldout.txt --max-length 512 --stride 512 \
  --json "$W/logs/ppl_heldout_stride512.json" 2>&1 | tee "$W/logs/ppl_heldout_s512.log"

stamp golden
python3 tools/train/make_golden.py --model "$W/$NAME" --text data/heldout.txt 2>&1 | tee "$W/logs/golden.log"

stamp samples
python3 tools/train/sample_hf.py --model "$W/$NAME" 2>"$W/logs/samples.err" | tee "$W/$NAME/samples.txt"
stamp done

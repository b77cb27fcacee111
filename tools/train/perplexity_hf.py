#!/usr/bin/env python3
"""Sliding-window perplexity of a model folder on a text file, with transformers.

    python3 tools/train/perplexity_hf.py --model models/kjv-tiny --text models/kjv-tiny/heldout.txt \
        --max-length 512 --stride 256 [--json OUT.json]

The method of transformers' "Perplexity of fixed-length models" guide: the whole text is one
token stream (BOS first, then the text encoded without special tokens); windows of max_length
tokens start every `stride` tokens; in each window only the tokens not scored by the previous
window are targets (the overlap's labels are -100), so every token after the first is scored
once, with up to max_length - stride tokens of extra context. The model's loss (mean over the
window's shifted targets) times the number of targets, summed, over the total number of
targets, is the mean negative log-likelihood; perplexity = exp of it. Float32 weights
(the BF16 checkpoint upcast exactly), TF32 off, eager attention.
"""
import argparse
import json
import math
import os

import torch

from common import BOS_TOKEN, load_model


@torch.no_grad()
def sliding_window_nll(model, ids, max_length, stride, device):
    """ids: [1, n] int64. Returns (sum of NLL, number of scored tokens, windows)."""
    seq_len = ids.size(1)
    nll_sum, n_tokens, windows = 0.0, 0, 0
    prev_end_loc = 0
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length, seq_len)
        trg_len = end_loc - prev_end_loc  # may differ from stride on the last window
        input_ids = ids[:, begin_loc:end_loc].to(device)
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        outputs = model(input_ids, labels=target_ids, use_cache=False)
        # outputs.loss is the mean over the valid labels; the model shifts labels left by one,
        # so each row has one target fewer than it has valid labels.
        num_valid_tokens = (target_ids != -100).sum().item()
        num_loss_tokens = num_valid_tokens - target_ids.size(0)
        nll_sum += float(outputs.loss) * num_loss_tokens
        n_tokens += num_loss_tokens
        windows += 1
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    return nll_sum, n_tokens, windows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--tokenizer", help="default: MODEL/tokenizer.json")
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--stride", type=int, default=256)
    ap.add_argument("--limit-tokens", type=int, default=0, help="only the first N tokens (testing)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", help="write the result here too")
    args = ap.parse_args()
    from tokenizers import Tokenizer

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tok = Tokenizer.from_file(args.tokenizer or os.path.join(args.model, "tokenizer.json"))
    text = open(args.text, encoding="utf-8").read()
    bos = tok.token_to_id(BOS_TOKEN)
    ids = [bos] + tok.encode(text, add_special_tokens=False).ids
    if args.limit_tokens:
        ids = ids[:args.limit_tokens]
    ids = torch.tensor([ids], dtype=torch.long)
    model = load_model(args.model, args.device)
    nll, n, windows = sliding_window_nll(model, ids, args.max_length, args.stride, args.device)
    res = {"text": os.path.basename(args.text), "text_bytes": len(text.encode()),
           "tokens": ids.size(1), "scored_tokens": n, "max_length": args.max_length,
           "stride": args.stride, "windows": windows, "mean_nll": nll / n, "perplexity": math.exp(nll / n),
           "bits_per_byte": nll / math.log(2) / len(text.encode()), "device": args.device,
           "dtype": "float32 (checkpoint upcast), TF32 off"}
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()

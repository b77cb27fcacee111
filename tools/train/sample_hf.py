#!/usr/bin/env python3
"""Sample text from a model folder with transformers (seeded; temperature + top-k).

    python3 tools/train/sample_hf.py --model models/kjv-tiny --prompt "In the beginning" --max-new 60

Each prompt is BOS + the prompt text; the loop feeds one token at a time through DynamicCache
and stops at EOS or --max-new tokens.
"""
import argparse
import os

import torch

from common import BOS_TOKEN, EOS_TOKEN, load_model

PROMPTS = ["In the beginning", "And Jesus said unto them,", "The LORD is my shepherd;",
           "Blessed are the", "And it came to pass, when"]


@torch.no_grad()
def sample(model, cfg, ids, max_new, temperature, top_k, gen, eos):
    from transformers import DynamicCache
    cache = DynamicCache(config=cfg)
    o = model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    out = []
    for _ in range(max_new):
        logits = o.logits[0, -1].float()
        if temperature <= 0:
            t = int(logits.argmax())
        else:
            logits = logits / temperature
            if top_k > 0:
                kth = torch.topk(logits, top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            t = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=gen))
        if t == eos:
            break
        out.append(t)
        o = model(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", action="append", help="repeatable; default: a few KJV openings")
    ap.add_argument("--max-new", type=int, default=60)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    model = load_model(args.model)
    bos = tok.token_to_id(BOS_TOKEN)
    eos = tok.token_to_id(EOS_TOKEN)
    gen = torch.Generator().manual_seed(args.seed)
    for p in args.prompt or PROMPTS:
        for temp in ([args.temperature] if args.temperature > 0 else [0.0]):
            ids = [bos] + tok.encode(p, add_special_tokens=False).ids
            out = sample(model, model.config, ids, args.max_new, temp, args.top_k, gen, eos)
            print(f"--- prompt {p!r}, temperature {temp}, top_k {args.top_k}, seed {args.seed}")
            print(p + tok.decode(out, skip_special_tokens=False))
        ids = [bos] + tok.encode(p, add_special_tokens=False).ids
        out = sample(model, model.config, ids, args.max_new, 0.0, 0, gen, eos)
        print(f"--- prompt {p!r}, greedy")
        print(p + tok.decode(out, skip_special_tokens=False))


if __name__ == "__main__":
    main()

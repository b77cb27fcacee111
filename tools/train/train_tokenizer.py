#!/usr/bin/env python3
"""Byte-level BPE in DeepSeek's tokenizer.json style, trained on the training text.

    python3 tools/train/train_tokenizer.py --train DATA/train.txt --vocab-size 4096 --out tokenizer.json

Same pieces as DeepSeek-V3/V4's tokenizer.json (FORMATS.md §4.1): empty normalizer Sequence;
pre-tokenizer = Split \\p{N}{1,3} / Split CJK+kana runs / Split main pattern (all Isolated), then
ByteLevel(add_prefix_space=false, trim_offsets=true, use_regex=false); ByteLevel decoder and
post-processor (no BOS is added by the tokenizer: callers put BOS in front, as DeepSeek's chat
encoding does); BPE without byte fallback.
Added tokens: DeepSeek-V4's table (src/tokenizer/deepseek_v4_tokens.cc) without the 799
`<｜place▁holder▁no▁K｜>` entries, renumbered from 0 so the vocabulary stays small: BOS 0, EOS 1,
pad 2 (the V4 ids), then <｜System｜> .. <｜read_url｜> in V4's order, <｜end_of_query｜>,
<｜image｜>. Flags as in V4: BOS/EOS/pad/<|EOT|>/end_of_query/image are `special`; roles, think,
DSML, tool and task markers are not (normalized, so they match even with special-token
splitting off). Then the 256 byte symbols, then the learned merges. Needs HF `tokenizers`.
"""
import argparse
import json

SPECIAL = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<|EOT|>",
           "<｜end_of_query｜>", "<｜image｜>"}
ADDED = [
    "<｜begin▁of▁sentence｜>",  # 0 (V4: 0)
    "<｜end▁of▁sentence｜>",    # 1 (V4: 1)
    "<｜▁pad▁｜>",              # 2 (V4: 2)
    # V4 128799 .. 128845, in order
    "<｜System｜>", "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<｜User｜>", "<｜Assistant｜>",
    "<|EOT|>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>", "<｜tool▁sep｜>", "<｜begin▁of▁repo▁name｜>",
    "<｜end▁of▁repo▁name｜>", "<｜begin▁of▁file▁name｜>", "<｜end▁of▁file▁name｜>",
    "<｜begin▁of▁file｜>", "<｜end▁of▁file｜>", "<think>", "</think>", "<｜place▁holder▁for▁copy｜>",
    "<｜place▁holder▁for▁pointer▁replace｜>", "｜DSML｜", "<｜begin▁sys｜>", "<｜end▁sys｜>",
    "<｜latest_reminder｜>", "<｜action｜>", "<｜query｜>", "<｜authority｜>", "<｜domain｜>",
    "<｜task｜>", "<｜political｜>", "<｜entity｜>", "<｜title｜>", "<｜safety｜>", "<｜answer｜>",
    "<｜search｜>", "<dsml:", "</dsml:", "<｜search▁begin｜>", "<｜search▁end｜>",
    "<｜extracted_url｜>", "<｜read_url｜>",
    "<｜end_of_query｜>",  # V4: 128846
    "<｜image｜>",         # V4: 129279
]

NORMALIZER = {"type": "Sequence", "normalizers": []}
PRE_TOKENIZER = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[一-龥぀-ゟ゠-ヿ]+"}, "behavior": "Isolated",
         "invert": False},
        {"type": "Split", "pattern": {"Regex":
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
            " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ],
}
POST_PROCESSOR = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
DECODER = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}


def skeleton():
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": NORMALIZER, "pre_tokenizer": PRE_TOKENIZER,
            "post_processor": POST_PROCESSOR, "decoder": DECODER,
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {}, "merges": []}}


def added_token_entries():
    out = []
    for i, content in enumerate(ADDED):
        special = content in SPECIAL
        normalized = content == "<|EOT|>" or not special
        out.append({"id": i, "content": content, "single_word": False, "lstrip": False,
                    "rstrip": False, "normalized": normalized, "special": special})
    return out


def train(train_path, vocab_size, min_frequency=2):
    from tokenizers import AddedToken, Tokenizer, pre_tokenizers, trainers
    tok = Tokenizer.from_str(json.dumps(skeleton()))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
        special_tokens=[AddedToken(c, special=True, normalized=False) for c in ADDED],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([train_path], trainer)
    d = json.loads(tok.to_str())
    # The trainer put the added tokens at ids 0..len(ADDED)-1 of the vocab; give them V4's flags
    # and make sure the rest of the file is exactly DeepSeek's layout.
    for i, c in enumerate(ADDED):
        assert d["model"]["vocab"][c] == i, (c, d["model"]["vocab"].get(c))
    d["added_tokens"] = added_token_entries()
    d["normalizer"], d["pre_tokenizer"] = NORMALIZER, PRE_TOKENIZER
    d["post_processor"], d["decoder"] = POST_PROCESSOR, DECODER
    d["model"]["byte_fallback"] = False
    final = Tokenizer.from_str(json.dumps(d, ensure_ascii=False))
    return d, final


def self_check(tok):
    text = "In the beginning God created the heaven and the earth.\nAnd God said, Let there be light: 1611 & 42!"
    enc = tok.encode(text, add_special_tokens=False)
    assert tok.decode(enc.ids, skip_special_tokens=False) == text, tok.decode(enc.ids)
    chat = "<｜begin▁of▁sentence｜><｜User｜>Who made the earth?<｜Assistant｜></think>God.<｜end▁of▁sentence｜>"
    ids = tok.encode(chat, add_special_tokens=False).ids
    for c in ["<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "</think>", "<｜end▁of▁sentence｜>"]:
        assert ADDED.index(c) in ids, (c, ids)
    return {"example_text": text, "example_ids": enc.ids, "example_tokens": enc.tokens,
            "chat_ids": ids}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--min-frequency", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    d, tok = train(args.train, args.vocab_size, args.min_frequency)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False, indent=1)
        f.write("\n")
    info = self_check(tok)
    text = open(args.train, encoding="utf-8").read()
    n = len(tok.encode(text, add_special_tokens=False).ids)
    print(json.dumps({"vocab_size": tok.get_vocab_size(with_added_tokens=True),
                      "merges": len(d["model"]["merges"]), "added_tokens": len(ADDED),
                      "train_tokens": n, "train_bytes": len(text),
                      "bytes_per_token": round(len(text) / n, 3), **info}, ensure_ascii=False))


if __name__ == "__main__":
    main()

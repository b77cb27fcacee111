#!/usr/bin/env python3
"""Writes tests/data/server/tokenizer.json: a byte-level BPE tokenizer (no merges) whose ids fit
a small test model's vocabulary (512), with DeepSeek-V4's added tokens (read from
src/tokenizer/deepseek_v4_tokens.cc, place holders left out) at small ids: BOS 0, EOS 1, pad 2,
the 256 bytes at 3..258, then the markers in V4's order. The server tests pair it with the
random small-rates weights; text quality is not the point, the protocol is."""
import json
import os
import re

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
src = open(os.path.join(root, "src/tokenizer/deepseek_v4_tokens.cc"), encoding="utf-8").read()


def byte_alphabet():  # GPT-2's bytes_to_unicode, as HF's ByteLevel uses it
    bs = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


specials = re.findall(r'special\((\d+), "([^"]+)"\)', src)  # BOS, EOS, pad
marker_block = src[src.index("markers[] = {"):src.index("};", src.index("markers[] = {"))]
markers = re.findall(r'^\s*(?:"([^"]*)"|nullptr),', marker_block, re.M)
markers = [m if m else "<|EOT|>" for m in markers]

added = []
for ident, content in specials[:3]:
    added.append({"id": int(ident), "content": content, "special": True, "normalized": False})
alphabet = byte_alphabet()
vocab = {alphabet[b]: 3 + b for b in range(256)}
next_id = 259
for content in markers + [c for _, c in specials[3:]]:  # <｜image｜> last, as in V4
    special = content == "<|EOT|>" or content == "<｜image｜>"
    added.append({"id": next_id, "content": content, "special": special, "normalized": not special})
    next_id += 1
assert next_id <= 512, next_id
for t in added:
    t.update({"single_word": False, "lstrip": False, "rstrip": False})

tokenizer = {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
    "normalizer": {"type": "Sequence", "normalizers": []},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
              "vocab": vocab, "merges": []},
}
out = os.path.join(root, "tests/data/server/tokenizer.json")
with open(out, "w", encoding="utf-8") as f:
    json.dump(tokenizer, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(out, "ids <", next_id, "added", len(added))

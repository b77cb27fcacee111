#!/usr/bin/env python3
"""Plain-text King James Bible from Debian's `bible-kjv-text`, split three ways.

    apt-get install bible-kjv-text      # also pulls in `bible-kjv`, whose `bible` reads the data
    python3 tools/train/make_corpus.py --out DIR

Writes DIR/train.txt, DIR/valid.txt, DIR/heldout.txt and DIR/corpus.json. The split is by book,
so it is deterministic and no verse is in two files:
  train   Genesis .. James        (59 books, for the tokenizer and the model)
  valid   1 Peter .. Jude         (6 books, to pick the best checkpoint during training)
  heldout Revelation              (the last book, ~1.3% of the verses: the reported perplexity)
Text layout: for every chapter a heading line "Book N", a blank line, one verse per line
(verse numbers dropped), a blank line. Pure ASCII, as the package ships it.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess

VALID_BOOKS = ["1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude"]
HELDOUT_BOOKS = ["Revelation"]


def read_bible():
    # Pretty-printed output (book/chapter headings) with an effectively infinite line width,
    # so every verse is one line: "  N text".
    out = subprocess.run(["bible", "-l", "1000000", "Gen1:1-Rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    chapters = []  # (book, chapter, [verses])
    for line in out.splitlines():
        if not line.strip():
            continue
        m = re.fullmatch(r"(.+) (\d+)", line)
        if m and not line.startswith(" "):
            chapters.append((m.group(1), int(m.group(2)), []))
            continue
        v = re.fullmatch(r"\s+(\d+) (.*\S)\s*", line)
        if not v or not chapters:
            raise SystemExit("unexpected line from bible: %r" % line)
        if int(v.group(1)) != len(chapters[-1][2]) + 1:
            raise SystemExit("verse numbers out of order at %r" % line)
        chapters[-1][2].append(v.group(2))
    return chapters


def render(chapters):
    return "".join("%s %d\n\n%s\n\n" % (book, ch, "\n".join(verses)) for book, ch, verses in chapters)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    chapters = read_bible()
    books = []
    for book, _, _ in chapters:
        if not books or books[-1] != book:
            books.append(book)
    if len(books) != 66 or books[-1] != "Revelation":
        raise SystemExit("expected the 66 books of the KJV, got %d" % len(books))
    parts = {
        "train": [c for c in chapters if c[0] not in VALID_BOOKS + HELDOUT_BOOKS],
        "valid": [c for c in chapters if c[0] in VALID_BOOKS],
        "heldout": [c for c in chapters if c[0] in HELDOUT_BOOKS],
    }
    os.makedirs(args.out, exist_ok=True)
    info = {"source": "Debian package bible-kjv-text (King James Version, public domain), "
                      "read with `bible -l 1000000 Gen1:1-Rev22:21` from bible-kjv",
            "layout": "per chapter: 'Book N' heading, blank line, one verse per line, blank line"}
    total_verses = sum(len(c[2]) for c in chapters)
    for name, chs in parts.items():
        text = render(chs)
        path = os.path.join(args.out, name + ".txt")
        with open(path, "w", encoding="ascii", newline="\n") as f:
            f.write(text)
        part_books = []
        for c in chs:
            if not part_books or part_books[-1] != c[0]:
                part_books.append(c[0])
        nverses = sum(len(c[2]) for c in chs)
        info[name] = {"books": [part_books[0], part_books[-1]], "n_books": len(part_books),
                      "chapters": len(chs), "verses": nverses,
                      "verse_fraction": round(nverses / total_verses, 4), "bytes": len(text),
                      "sha256": hashlib.sha256(text.encode()).hexdigest()}
    with open(os.path.join(args.out, "corpus.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()

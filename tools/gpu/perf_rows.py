#!/usr/bin/env python3
"""Turns `dsv4 bench --synthetic ...` logs into the decode table of docs/perf.md.

Usage: perf_rows.py LOG [LOG ...]   (tools/gpu/bench_decode.sh calls it on its runs)

Prints one markdown table: a row per (log, context, batch) with the format and the layer count
that fit, the read bandwidth measured in that run, ms/step, tokens/s, GB read per step, GB/s and
the fraction of the roofline, as the bench printed them. A log without a decode table (a run
that failed) is named on stderr and skipped.
"""
import re
import sys


def rows_of(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    model = re.search(r"^model synthetic (\S+) \((\w+)\), (\d+) layers", text, re.M)
    read = re.search(r"^read bandwidth[^:]*: (\d+) GB/s", text, re.M)
    table = re.findall(r"^\| (\d+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) [^|]*\| [^|]*\| "
                       r"(\d+) \| ([\d.]+%) \|$", text, re.M)
    if not model or not table:
        print(f"{path}: no decode table", file=sys.stderr)
        return []
    label = f"{model.group(1)} {model.group(2)}, {model.group(3)} layers"
    if read:
        label += f" (read {int(read.group(1)):,} GB/s)"
    out = []
    for i, (ctx, batch, ms, tps, gb, gbs, roof) in enumerate(table):
        out.append(f"| {label if i == 0 else ''} | {ctx} | {batch} | {ms} | {tps} | {gb} | {gbs} "
                   f"| {roof} |")
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rows = [r for path in sys.argv[1:] for r in rows_of(path)]
    if not rows:
        return 1
    print("| model | context | batch | ms/step | tokens/s | GB read/step | GB/s | roofline |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Summarises Nsight Compute's warp-stall samples of one kernel launch, instruction by instruction:
where in the kernel its warps wait, and on what.

Usage: ncu_stalls.py SOURCE.csv [--min PCT]
  SOURCE.csv  `ncu --import REPORT --page source --csv --print-source sass` of a report taken
              with `--section WarpStateStats --section SourceCounters` (run.sh prof writes it)
  --min       list the instructions holding at least PCT percent of the samples (default 1)

Prints the samples by stall reason, then the hot instructions in program order with each one's
share, the share of everything up to and including it ("to here": SASS order is roughly the
kernel's phases, so the running share reads as how far into the launch the warps are), and its
main reasons. Then the samples on barriers and fences (MEMBAR, ERRBAR, cluster barriers,
BAR.SYNC, mbarrier waits) whatever their share: a cluster barrier's release fence shows as
MEMBAR.ALL.GPU plus ERRBAR (docs/perf.md, session 34). A sample is charged to the instruction
the warp was about to issue, so a wait on a load or a barrier shows on the instruction after it.
"""
import argparse
import csv
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
SYNC = re.compile(r"\b(MEMBAR\S*|ERRBAR|CGAERRBAR|UCGABAR_\w+|BAR\.SYNC\S*|SYNCS\.\S+|DEPBAR\S*)")


def read(path):
    """The kernel's name, the stall-reason columns and the instruction rows of the CSV."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    kernel = ""
    for i, row in enumerate(rows):
        if row and row[0] == "Kernel Name" and len(row) > 1:
            kernel = row[1]
        if row and row[0] == "Address":
            header = row
            body = [r for r in rows[i + 1:] if len(r) == len(header)]
            break
    else:
        raise ValueError(f"{path}: no 'Address' header row: not an ncu source-page CSV")
    if SAMPLES not in header or "Source" not in header:
        raise ValueError(f"{path}: no '{SAMPLES}' column: take the report with SourceCounters")
    col = {h: j for j, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
    insts = []
    for r in body:
        def num(h):
            try:
                return int(float(r[col[h]] or 0))
            except ValueError:
                return 0
        insts.append((r[col["Source"]].strip(), num(SAMPLES), {h[6:]: num(h) for h in reasons}))
    return kernel, insts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--min", type=float, default=1.0)
    args = ap.parse_args()
    try:
        kernel, insts = read(args.csv)
    except (OSError, ValueError) as e:
        print(f"ncu_stalls: {e}", file=sys.stderr)
        return 1
    total = sum(s for _, s, _ in insts)
    if total == 0:
        print("ncu_stalls: no samples in the CSV", file=sys.stderr)
        return 1
    by_reason = {}
    for _, _, why in insts:
        for k, v in why.items():
            by_reason[k] = by_reason.get(k, 0) + v
    print(f"{kernel}\n\n{total} samples, {len(insts)} instructions\n")
    print("| reason | samples | share |\n|---|---|---|")
    for k, v in sorted(by_reason.items(), key=lambda kv: -kv[1]):
        if v:
            print(f"| {k} | {v} | {100 * v / total:.1f}% |")

    def top(why):
        first = sorted(((v, k) for k, v in why.items() if v), reverse=True)[:3]
        return ", ".join(f"{k} {v}" for v, k in first)

    print(f"\nInstructions with at least {args.min:g}% of the samples, in program order:\n")
    print("| # | samples | share | to here | reasons | instruction |\n|---|---|---|---|---|---|")
    run = 0
    for i, (src, s, why) in enumerate(insts):
        run += s
        if 100 * s >= args.min * total:
            print(f"| {i} | {s} | {100 * s / total:.1f}% | {100 * run / total:.1f}% | {top(why)} "
                  f"| `{src}` |")
    print("\nBarriers and fences with samples (and the instruction after each):\n")
    print("| # | samples | to here | instruction | next: samples, instruction |\n|---|---|---|---|---|")
    run = 0
    for i, (src, s, _) in enumerate(insts):
        run += s
        if SYNC.search(src):
            nsrc, ns = (insts[i + 1][0], insts[i + 1][1]) if i + 1 < len(insts) else ("", 0)
            if s or ns:
                print(f"| {i} | {s} | {100 * run / total:.1f}% | `{src}` | {ns}, `{nsrc}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

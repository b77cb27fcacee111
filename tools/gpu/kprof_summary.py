#!/usr/bin/env python3
"""Summarises `tools/gpu/run.sh kprof` output (Nsight Compute CSV, gpu__time_duration per kernel).

Usage: kprof_summary.py KPROF_LOG [STEPS]   (STEPS: decode steps in the capture range, default 3)

Only the last STEPS steps count (each starts with its embed kernel; bench --profile captures a
prefill op by op before them). Prints the kernel time per step by part of the layer (the kernels
in the order the engine launches them: GEMVs between the router and the next hc_pre / hc_post
are the MoE's, everything from gather_rows to the next embed is the head) and per kernel name
(calls per step, us per call).
"""
import collections
import csv
import sys


def main():
    path = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    with open(path) as f:
        rows = csv.reader([line for line in f if line.startswith('"')])
        hdr = next(rows)
        ki, vi, ui = (hdr.index(k) for k in ("Kernel Name", "Metric Value", "Metric Unit"))
        seq = []
        for r in rows:
            v = float(r[vi].replace(",", ""))
            v = v / 1000 if r[ui] in ("nsecond", "ns") else v * 1000 if r[ui] == "msecond" else v
            seq.append((r[ki].split("(")[0], v))
    # Each decode step starts with its embed; anything before the last `steps` of them (bench
    # --profile also profiles a prefill op by op, in the same capture range) is left out.
    starts = [i for i, (n, _) in enumerate(seq) if "embed" in n]
    if len(starts) >= steps:
        seq = seq[starts[-steps]:]
    part = collections.Counter()
    name_t, name_n = collections.Counter(), collections.Counter()
    in_moe = in_head = False
    for n, v in seq:
        name_t[n] += v
        name_n[n] += 1
        if "embed" in n:
            in_head = False
            part["embed + head"] += v
            continue
        if "gather_rows" in n:
            in_head = True
        if in_head:
            part["embed + head"] += v
            continue
        if "route" in n:
            in_moe = True
        if "hc_post" in n or "hc_pre" in n:  # (the FFN's post is fused into the next pre)
            in_moe = False
        if "hc_" in n:
            part["mHC"] += v
        elif "gemv" in n:
            part["MoE" if in_moe else "projections (GEMVs outside MoE and head)"] += v
        elif "rms_norm" in n:
            part["RMSNorm"] += v
        elif "rope" in n:
            part["RoPE"] += v
        elif "attention" in n or "ring_write" in n:
            part["attention + ring write"] += v
        elif "indexer" in n or "compress" in n or "scale" in n:
            part["compressors + indexer"] += v
        elif in_moe:
            part["MoE"] += v
        else:
            part["other"] += v
    print(f"kernel time per step: {sum(part.values()) / steps:.1f} us, "
          f"{len(seq) / steps:.0f} kernels")
    for k, v in part.most_common():
        print(f"{v / steps:9.1f} us  {k}")
    print()
    for k, v in name_t.most_common():
        print(f"{v / steps:9.1f} us/step {name_n[k] / steps:6.1f} calls {v / name_n[k]:8.2f} us/call  {k}")


if __name__ == "__main__":
    main()

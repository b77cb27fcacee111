#!/usr/bin/env bash
# Weight-GEMV benchmark on the GPU machine: bench/gemv_bench (our kernels), then
# tools/bench_torch_linear.py (bf16 cuBLAS baseline) in the same run, merged into one markdown
# table (docs/perf.md has the format and the latest results).
# Usage: tools/bench_gemv.sh [--quick] [BIN_DIR (default build-gpu/bench)] [OUT_DIR (default $OUT
# or /tmp/bench_gemv)]
set -euo pipefail
cd "$(dirname "$0")/.."
quick=""
if [ "${1:-}" = "--quick" ]; then quick="--quick"; shift; fi
bin=${1:-build-gpu/bench}
out=${2:-${OUT:-/tmp/bench_gemv}}
mkdir -p "$out"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw \
  --format=csv > "$out/gpu.txt" 2>&1 || true
cat "$out/gpu.txt"
"$bin/gemv_bench" $quick > "$out/gemv_bench.log"
PYTHONUNBUFFERED=1 python3 tools/bench_torch_linear.py $quick > "$out/torch.log"

python3 - "$out" <<'PY'
import collections, datetime, sys
out = sys.argv[1]
meta, ours, torch, moe = {}, [], collections.defaultdict(dict), {}
for line in open(f"{out}/gemv_bench.log"):
    f = line.strip().split(",")
    if f[0] != "csv":
        continue
    if f[1] == "meta":
        meta[f[2]] = float(f[3])
    elif f[1] == "moe":
        moe[f[2]] = (float(f[3]), float(f[4]))
    elif f[1] == "gemv":
        ours.append(dict(shape=f[2], fmt=f[3], m=int(f[4]), variant=f"{f[5]},{f[6]}",
                         us=float(f[7]), wbytes=float(f[8]), abytes=float(f[9])))
torch_ver = ""
for line in open(f"{out}/torch.log"):
    f = line.strip().split(",")
    if f[0] == "csv" and f[1] == "torch":
        torch[(f[2], int(f[3]))][f[4]] = float(f[5])
    elif f[0] == "csv" and f[1] == "meta":
        meta[f[2]] = float(f[3])
    elif line.startswith("torch "):
        torch_ver = line.strip()
# The denominator is the faster of the two pure reads of the run (our kernel, torch.sum).
read = max(meta["read_gbs"], meta.get("torch_read_gbs", 0.0))
gpu = open(f"{out}/gpu.txt").read().strip().splitlines()[-1]
lines = [f"Date {datetime.date.today()}; GPU: {gpu}; {torch_ver}",
         f"Pure-read bandwidth (sum over 4 GiB): {read:.0f} GB/s (gemv_bench's read_sum "
         f"{meta['read_gbs']:.0f}, torch.sum {meta.get('torch_read_gbs', float('nan')):.0f}; "
         f"the faster is the denominator). Empty kernel in a graph: "
         f"{meta['floor_pdl_us']:.2f} us with PDL, {meta['floor_us']:.2f} us without.",
         "",
         "| shape | fmt | M | us (PDL) | us (no PDL) | weights MB | GB/s | % of read | torch bf16 us | speed-up |",
         "|---|---|---|---|---|---|---|---|---|---|"]
by = collections.defaultdict(dict)
for r in ours:
    by[(r["shape"], r["fmt"], r["m"])][r["variant"]] = r
for (shape, fmt, m), v in by.items():
    main = v.get("pdl,main")
    if main is None:
        continue
    plain = v.get("no-pdl,main")
    gbs = (main["wbytes"] + main["abytes"]) / (main["us"] * 1e-6) / 1e9
    t = torch.get((shape, m), {})
    tbest = min(t.values()) if t else float("nan")
    lines.append(f"| {shape} | {fmt} | {m} | {main['us']:.2f} | "
                 f"{plain['us']:.2f} | " if plain else f"| {shape} | {fmt} | {m} | {main['us']:.2f} | - | ")
    lines[-1] += (f"{main['wbytes']/1e6:.1f} | {gbs:.0f} | {100*gbs/read:.1f}% | "
                  f"{tbest:.2f} | {tbest/main['us']:.2f}x |")
lines.append("")
knobs = sorted({k for v in by.values() for k in v if k.startswith("pdl,c")})
lines.append("Tuning at M=1 (NVFP4, PDL), us, cC = C CTAs per SM (c0: as many as fit), dD = D "
             "pipeline stages (d0: 2): " +
             " / ".join(k.split(",")[1] for k in knobs))
for (shape, fmt, m), v in by.items():
    if any(k in v for k in knobs):
        lines.append(f"- {shape}: " + " / ".join(f"{v[k]['us']:.2f}" if k in v else "-"
                                                  for k in knobs))
if moe:
    t13 = min(torch.get(("experts_w13", 1), {"": float("nan")}).values())
    t2 = min(torch.get(("experts_w2", 1), {"": float("nan")}).values())
    lines.append("")
    for mode, (us, nbytes) in moe.items():
        gbs = nbytes / (us * 1e-6) / 1e9
        lines.append(f"MoE chain per token, {mode} (router stand-in, w1|w3, w2; NVFP4 M=1): "
                     f"{us:.2f} us, {nbytes/1e6:.1f} MB, {gbs:.0f} GB/s = {100*gbs/read:.1f}% of "
                     f"read; torch bf16 w13 + w2 {t13 + t2:.2f} us ({(t13 + t2)/us:.2f}x)")
acc_rows = [(k, v["pdl,acc"], v.get("pdl,main")) for k, v in by.items() if "pdl,acc" in v]
if acc_rows:
    lines.append("")
    lines.append("Accumulate mode (y += by L2 adds, no split-K finish), PDL, us (vs the main row): " +
                 "; ".join(f"{s} {f} M={m}: {a['us']:.2f} ({p['us']:.2f})" for (s, f, m), a, p in acc_rows))
lines.append("")
lines.append("torch variants (us): " + "; ".join(
    f"{s} M={m}: " + ", ".join(f"{k} {x:.2f}" for k, x in d.items()) for (s, m), d in torch.items()))
text = "\n".join(lines)
open(f"{out}/table.md", "w").write(text + "\n")
print(text)
PY

#!/usr/bin/env python3
"""Bit-exact quantization test vectors for tests/quant, made by the oracle itself.

Imports quant_nvfp4, quant_mxfp4 and quant_fp8_block from ../shared/tools/formats.py (the code
that quantized the golden fmt-* fixtures; imported, never copied), feeds them matrices with
zeros, tiny values, exact rounding ties, clamped and saturating values, and writes inputs and
outputs to OUT/{nvfp4,mxfp4,fp8_block}.safetensors. Needs torch and safetensors (the GPU
machine has them; the quantizers run on torch's CPU path, as they did for the fixtures).

    python3 tools/make_quant_vectors.py [--formats-dir DIR] [--out DIR]

The device machine gets the repository but not ../shared: copy formats.py into a git-ignored
folder of the repo, carry it, and pass that folder as --formats-dir. The committed vectors were
made that way with torch 2.11.0 (the version is in each file's metadata).

Per case NAME a file holds NAME.x (F32 input) and the oracle's outputs as raw bytes:
  nvfp4:     NAME.packed U8 [r, c/2], NAME.scale U8 (E4M3 codes) [r, c/16],
             NAME.global F32 [1], NAME.deq F32 [r, c]
  mxfp4:     NAME.packed U8 [r, c/2], NAME.scale U8 (E8M0 codes) [r, c/32], NAME.deq F32 [r, c]
  fp8_block: NAME.q U8 (E4M3 codes) [r, c], NAME.scale U8 (E8M0 codes) [ceil(r/128), ceil(c/128)]
"""
import argparse
import importlib.util
import os
import sys
import types

import torch
from safetensors.torch import save_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIES = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]


def find_formats_dir(arg):
    shared = os.environ.get("DSV4_SHARED")
    candidates = [arg] if arg else []
    if shared:
        candidates.append(os.path.join(shared, "tools"))
    candidates += [os.path.join(REPO, "shared", "tools"),
                   os.path.join(REPO, "..", "shared", "tools")]
    for c in candidates:
        if os.path.isfile(os.path.join(c, "formats.py")):
            return c
    sys.exit("formats.py not found: pass --formats-dir (looked in %s)" % ", ".join(candidates))


def load_formats(directory):
    # formats.py imports golden (the transformers model builder) at module level; the three
    # quantizers never touch it, so an empty stand-in spares importing transformers.
    sys.modules.setdefault("golden", types.ModuleType("golden"))
    spec = importlib.util.spec_from_file_location("formats", os.path.join(directory, "formats.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def f32(values):
    return torch.tensor(values, dtype=torch.float64).to(torch.float32)


def nudge(x, ulps):
    """x moved by `ulps` float32 steps towards +inf (ulps >= 0)."""
    x = torch.tensor(x, dtype=torch.float32)
    for _ in range(ulps):
        x = torch.nextafter(x, torch.tensor(float("inf")))
    return float(x)


def e4m3_values():
    codes = torch.arange(0, 0x7F, dtype=torch.uint8)  # 0x7f is NaN
    return codes.view(torch.float8_e4m3fn).float()


def random_mixed(g, rows, cols, block):
    """Gaussian rows of very different magnitudes, with zero rows and blocks, tiny values,
    subnormal floats, negative zeros and a few outliers."""
    x = torch.randn(rows, cols, generator=g)
    x *= torch.pow(10.0, torch.empty(rows, 1).uniform_(-4, 3, generator=g))
    x[1] = 0.0
    x[2, :block] = 0.0
    x[3, block:2 * block] = -0.0
    x[4, ::5] = 1e-30
    x[5, 1::7] = 1e-42  # float32 subnormal
    x[6] *= 1e-12
    mask = torch.rand(rows, cols, generator=g) < 0.1
    x[mask] = 0.0
    x[7, 3] = 3.0e4
    x[8, 0] = -2.5e3
    return x.contiguous()


def nvfp4_ties(g, scales):
    """Global scale exactly 2^-4 (amax 168); block b of the matrix gets the E4M3 scale
    scales[b], so x / (scale * global) lands exactly on every E2M1 rounding tie."""
    glob = 2.0 ** -4
    blocks = []
    for s in scales:
        unit = s * glob
        vals = [6.0] + TIES + [-t for t in TIES] + [0.0]
        perm = torch.randperm(16, generator=g)
        blocks.append(torch.tensor([vals[i] * unit for i in perm.tolist()], dtype=torch.float64))
    x = torch.stack(blocks).to(torch.float32).view(-1)
    n = x.numel()
    cols = 128
    rows = (n + 16 + cols - 1) // cols
    out = torch.zeros(rows * cols, dtype=torch.float32)
    out[:n] = x
    out[n] = 168.0  # the tensor amax: 168 / 2688 = 2^-4 exactly
    return out.view(rows, cols).contiguous()


def nvfp4_near_ties(g):
    """Values a few ulps either side of every tie, and block scales whose E4M3 rounding goes
    down so that x / divisor exceeds 6 (saturation)."""
    rows = []
    glob = 2.0 ** -2  # amax 672
    for k in range(8):
        vals = [6.0]
        for t in TIES[:5]:
            vals += [t * (1 + 2.0 ** -20), t * (1 - 2.0 ** -20), -t * (1 + 2.0 ** -21)]
        row = torch.tensor(vals, dtype=torch.float64) * glob * (1.0 + k / 8.0)
        rows.append(row)
    # block amax / (6 * global) = 1.0625 - tiny: E4M3 rounds the scale to 1.0 (ulp 0.125 at 1)
    # while 6.37 / 1.0 saturates to code 7.
    sat = torch.tensor([6.0 * 1.0625 * (1 - 2.0 ** -12)] + [5.0 + i / 8.0 for i in range(15)],
                       dtype=torch.float64) * glob
    rows.append(sat)
    rows.append(-sat)
    x = torch.cat(rows).to(torch.float32)
    x = torch.cat([x, torch.zeros(16, dtype=torch.float32)])
    x[-1] = 672.0
    cols = 64
    pad = (-x.numel()) % cols
    return torch.cat([x, torch.zeros(pad)]).view(-1, cols).contiguous()


def nvfp4_cases(g):
    e4 = e4m3_values()
    scales = [1.0, 1.125, 0.75, 3.5, 448.0, 2.0 ** -9, 7 * 2.0 ** -9, 2.0 ** -6, 0.013671875, 240.0]
    scales += e4[torch.randint(1, 0x7F, (20,), generator=g)].tolist()
    tiny = torch.full((4, 64), 1e-6) * torch.rand(4, 64, generator=g)
    tiny[0, 0] = 1000.0  # global ~0.37: every other block scale clamps to 2^-9
    tiny[1, 16:32] = 1e-40
    tiny[2, 32:48] = 2.0 ** -9 * 6 * (1000.0 / 2688.0) * torch.tensor([0.5, 0.25, 0.75, 1.0] * 4)
    single = torch.zeros(1, 16)
    single[0, 5] = -0.3
    neg_small = torch.tensor([[-0.01, -0.04, 0.2, -1.0] * 4], dtype=torch.float32)
    outliers = torch.where(torch.rand(2, 4096, generator=g) < 0.01, torch.tensor(50.0),
                           torch.tensor(1.0))
    return {
        "rand_mixed": random_mixed(g, 32, 128, 16),
        "ties": nvfp4_ties(g, scales),
        "near_ties": nvfp4_near_ties(g),
        "clamp_tiny": tiny.contiguous(),
        "zeros": torch.tensor([[0.0] * 16 + [-0.0] * 16] * 2, dtype=torch.float32),
        "single": single,
        "neg_small": neg_small,
        "act": (torch.randn(2, 4096, generator=g) * outliers).contiguous(),
    }


def near_pow2_blocks(g, bound, block_len, ks, max_ulps):
    """One block per (k, j): block amax = nudge(bound * 2^k, j ulps), the other elements
    random, half of them on E2M1 / E4M3 rounding midpoints of the power-of-two grid."""
    blocks = []
    for k in ks:
        for j in range(max_ulps + 1):
            amax = nudge(bound * 2.0 ** k, j)
            b = torch.empty(block_len).uniform_(-1, 1, generator=g) * amax
            b[0] = amax if j % 2 == 0 else -amax
            blocks.append(b)
    return blocks


def mxfp4_cases(g):
    ties = []
    for k in range(-10, 10, 2):
        s = 2.0 ** k
        vals = [6.0] + TIES + [-t for t in TIES] + [0.0]
        vals = vals + [v * 0.5 for v in vals]
        perm = torch.randperm(32, generator=g).tolist()
        ties.append(torch.tensor([vals[i] * s for i in perm], dtype=torch.float64))
    ties = torch.cat(ties).to(torch.float32).view(-1, 64).contiguous()
    near = near_pow2_blocks(g, 6.0, 32, range(-14, 14, 3), 4)
    near = torch.cat(near).view(-1, 64).contiguous()
    tiny = torch.rand(4, 64, generator=g) * 1e-30
    tiny[1, :32] = 1e-41
    tiny[2, 32:] = 0.0
    return {
        "rand_mixed": random_mixed(g, 32, 128, 32),
        "ties": ties,
        "near_pow2": near,
        "tiny": tiny.contiguous(),
        "zeros": torch.zeros(2, 32),
    }


def fp8_cases(g):
    e4 = e4m3_values()
    mids = ((e4[1:] + e4[:-1]) / 2)  # exact midpoints between neighbouring E4M3 values
    # 3 rows x 24 blocks of 128 columns: each block one (k, j) pair, the rows partial.
    blocks = []
    ks = [-20, -9, -6, -3, 0, 3, 7, 12]
    for k in ks:
        for j in range(3):
            amax = nudge(448.0 * 2.0 ** k, j)
            pick = mids[torch.randint(0, mids.numel(), (3, 128), generator=g)]
            sign = torch.where(torch.rand(3, 128, generator=g) < 0.5, -1.0, 1.0)
            b = (pick * sign * 2.0 ** k).to(torch.float32)
            b[0, 0] = amax
            blocks.append(b)
    near = torch.cat(blocks, dim=1).contiguous()
    rand = random_mixed(g, 130, 260, 128)
    rand[128:, :128] = 0.0  # a zero (partial) block
    return {"rand_mixed": rand, "near_pow2": near, "zeros": torch.zeros(3, 5)}


def as_bytes(t):
    return t.contiguous().view(torch.uint8)


def save(tensors, path, meta):
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata=meta)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats-dir", help="folder holding formats.py (default: ../shared/tools)")
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "quant"))
    args = ap.parse_args()
    fm = load_formats(find_formats_dir(args.formats_dir))
    os.makedirs(args.out, exist_ok=True)
    g = torch.Generator().manual_seed(20260531)
    meta = {"generator": "tools/make_quant_vectors.py", "torch": torch.__version__}

    out = {}
    for name, x in nvfp4_cases(g).items():
        packed, bs, glob, deq = fm.quant_nvfp4(x.clone())
        out.update({name + ".x": x, name + ".packed": as_bytes(packed),
                    name + ".scale": as_bytes(bs), name + ".global": glob.reshape(1).float(),
                    name + ".deq": deq.float()})
    save(out, os.path.join(args.out, "nvfp4.safetensors"), meta)

    out = {}
    for name, x in mxfp4_cases(g).items():
        packed, sc, deq = fm.quant_mxfp4(x.clone())
        out.update({name + ".x": x, name + ".packed": as_bytes(packed),
                    name + ".scale": as_bytes(sc), name + ".deq": deq.float()})
    save(out, os.path.join(args.out, "mxfp4.safetensors"), meta)

    out = {}
    for name, x in fp8_cases(g).items():
        q, sc, _ = fm.quant_fp8_block(x.clone())
        out.update({name + ".x": x, name + ".q": as_bytes(q), name + ".scale": as_bytes(sc)})
    save(out, os.path.join(args.out, "fp8_block.safetensors"), meta)

    total = 0
    for f in ("nvfp4", "mxfp4", "fp8_block"):
        size = os.path.getsize(os.path.join(args.out, f + ".safetensors"))
        total += size
        print("%s.safetensors %d bytes" % (f, size))
    print("total %d bytes, torch %s" % (total, torch.__version__))


if __name__ == "__main__":
    main()

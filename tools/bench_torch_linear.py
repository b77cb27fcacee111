#!/usr/bin/env python3
"""bf16 torch F.linear (cuBLAS) on the V4-Flash decode shapes: the baseline of bench/gemv_bench.

Also prints the pure-read bandwidth of torch.sum over 4 GiB ('csv,meta,torch_read_gbs,<GB/s>'),
the second read measurement the merge script compares with gemv_bench's.

Each unit of work (one matrix, or the 7 selected experts, or wo_a's 8 groups) is captured R
times in one CUDA graph, with weights rotated through >= 600 MB of copies so L2 does not serve
them; time per unit = median graph replay / R. Grouped shapes are timed as a loop of F.linear
calls and as one batched torch.bmm, and (y +=, cuBLAS with beta = 1, what our accumulate mode
does) as addmm_ / baddbmm_ into a resident y; the fastest is the baseline. Prints rows
'csv,torch,<shape>,<m>,<variant>,<us>' that tools/bench_gemv.sh merges with the GEMV numbers.
"""
import statistics
import sys

import torch
import torch.nn.functional as F

POOL_BYTES = 600 << 20
REPLAYS = 15

# name, n, k, groups, grouped input (one x per group)
SHAPES = [
    ("experts_w13", 4096, 4096, 7, False),  # 7 x fused (w1 | w3)
    ("experts_w2", 4096, 2048, 7, True),
    ("wq_b", 32768, 1024, 1, False),
    ("wo_b", 4096, 8192, 1, False),
    ("head", 129280, 4096, 1, False),
    ("wq_a", 1024, 4096, 1, False),
    ("wkv", 512, 4096, 1, False),
    ("idx_wq_b", 8192, 1024, 1, False),
    ("wo_a", 1024, 4096, 8, True),
    ("wq_a|wkv", 1536, 4096, 1, False),
]


def event_ms(fn):
    """Milliseconds of one fn() on the current stream, between two CUDA events."""
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def graph_us(fn, launches):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for r in range(min(launches, 3)):  # warm-up: cuBLAS handles and workspaces
            fn(r)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for r in range(launches):
            fn(r)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    times = [event_ms(g.replay) for _ in range(REPLAYS)]
    return statistics.median(times) * 1000.0 / launches


def bench_shape(name, n, k, groups, grouped_x, ms):
    dev = "cuda"
    entry = n * k * 2 * groups
    entries = max(2, POOL_BYTES // entry + 1)
    w = torch.randn(entries * groups, n, k, device=dev, dtype=torch.bfloat16) * 0.02
    launches = min(entries, 256)
    rows = []
    for m in ms:
        xs = torch.randn(groups if grouped_x else 1, m, k, device=dev, dtype=torch.bfloat16)
        if groups == 1:
            rows.append((name, m, "linear", graph_us(lambda r: F.linear(xs[0], w[r % entries]),
                                                     launches)))
            y = torch.zeros(m, n, device=dev, dtype=torch.bfloat16)
            rows.append((name, m, "addmm", graph_us(
                lambda r: y.addmm_(xs[0], w[r % entries].t()), launches)))
            continue

        def loop(r):
            base = (r % entries) * groups
            for j in range(groups):
                F.linear(xs[j if grouped_x else 0], w[base + j])

        xb = xs if grouped_x else xs.expand(groups, m, k)

        def bmm(r):
            base = (r % entries) * groups
            torch.bmm(xb, w[base:base + groups].transpose(1, 2))

        yb = torch.zeros(groups, m, n, device=dev, dtype=torch.bfloat16)

        def baddbmm(r):
            base = (r % entries) * groups
            yb.baddbmm_(xb, w[base:base + groups].transpose(1, 2))

        rows.append((name, m, "loop", graph_us(loop, launches)))
        rows.append((name, m, "bmm", graph_us(bmm, launches)))
        rows.append((name, m, "baddbmm", graph_us(baddbmm, launches)))
    del w
    torch.cuda.empty_cache()
    return rows


def read_gbs():
    """Pure read the way PEERS.md section 8 measured it: torch.sum over 4 GiB, median of 10."""
    x = torch.ones((4 << 30) // 4, device="cuda", dtype=torch.float32)
    times = [event_ms(x.sum) for _ in range(13)][3:]
    del x
    torch.cuda.empty_cache()
    return (4 << 30) / (statistics.median(times) * 1e-3) / 1e9


def main():
    quick = "--quick" in sys.argv
    ms = [1] if quick else [1, 2, 4, 8]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    print(f"csv,meta,torch_read_gbs,{read_gbs():.1f}", flush=True)
    for name, n, k, groups, grouped_x in SHAPES:
        for (shape, m, variant, us) in bench_shape(name, n, k, groups, grouped_x, ms):
            print(f"csv,torch,{shape},{m},{variant},{us:.3f}", flush=True)


if __name__ == "__main__":
    main()

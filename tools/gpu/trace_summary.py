#!/usr/bin/env python3
"""Reads a kernel trace (bench/kernel_trace.cc's CSV) and shows where a decode step's graph spends
its time.

Usage: trace_summary.py TRACE.csv [STEPS] [--launches A-B]
  STEPS       the last launches of the most launched graph (default 8)
  --launches  also each launch's start and end of the kernels A..B (the first table's #, in us
              from the launch's start): what the means hide, such as the one step in four whose
              compressors complete an entry

A kernel's share of the step ("adds") is how far its end moves the step's frontier (the latest
end among the kernels that started before it): a chain of kernels launched programmatically
overlaps each launch with its predecessor, so a kernel adds its end minus its predecessor's end,
and a kernel on a branch that ends before the main line adds nothing. The shares sum to the
step's span. "early" is how long before that frontier the kernel's first block started (the
programmatic launch's head start). Prints every node of the graph in start order (the mean over
the steps), then what each kernel adds per layer kind (sliding, CSA, HCA: the mean over the
layers of that kind), then the sums by kernel name.
"""
import argparse
import collections
import csv
import statistics
import sys


def short_name(name):
    """The kernel's own name, without namespaces, template arguments and parameters."""
    name = name.replace("(anonymous namespace)::", "")
    if name.startswith("void "):
        name = name[5:]
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch == "<":
            if depth == 0:
                cut = min(cut, i)
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = min(cut, i)
            break
    return name[:cut].split("::")[-1]


def layer_table(order, mean, names):
    """Per layer kind, what each kernel adds (the mean over the layers of that kind): a layer
    starts at every other hc_pre (the attention's; the FFN's follows it) and the last one ends
    at the head's first kernel; CSA with an indexer top-k, HCA with a compressor only, sliding
    otherwise."""
    kernel = [names[n][0] for n in order]
    pres = [i for i, k in enumerate(kernel) if k.startswith("hc_pre")]
    if not pres:
        return
    head = next((i for i in range(pres[-1] + 1, len(order))
                 if kernel[i] in ("hc_post_kernel", "gather_rows_kernel", "hc_head_kernel")),
                len(order))
    bounds = pres[0::2] + [head]
    kinds = collections.defaultdict(list)
    for first, end in zip(bounds, bounds[1:]):
        kn = kernel[first:end]
        kind = ("CSA" if any(k.startswith("indexer_topk") for k in kn) else
                "HCA" if any(k.startswith("compress") for k in kn) else "sliding")
        kinds[kind].append(order[first:end])
    for kind, layers in sorted(kinds.items()):
        # Kernels matched across the layers by (name, grid, occurrence): a branch's kernels
        # may interleave with the main line's in a different order from layer to layer.
        rows = collections.defaultdict(list)
        for nodes in layers:
            seen = collections.Counter()
            for n in nodes:
                rows[names[n][:2] + (seen[names[n][:2]],)].append(mean[n]["adds"])
                seen[names[n][:2]] += 1
        total = sum(sum(v) for v in rows.values()) / len(layers)
        print(f"\n{kind} layers: {len(layers)}, {total:.1f} us a layer")
        print("| kernel | grid | adds us (mean over the layers) |")
        print("|---|---|---|")
        for key, adds in rows.items():  # (in the first layer's order)
            print(f"| {key[0]} | {key[1]} | {sum(adds) / len(layers):.2f} |")


def launch_table(order, per_node, names, first, last):
    """Each launch's start and end of the kernels order[first..last], one row a launch."""
    nodes = order[first:last + 1]
    print("\n| launch | " + " | ".join(f"#{first + i} {names[n][0]} ({names[n][1]})"
                                      for i, n in enumerate(nodes)) + " |")
    print("|---" * (len(nodes) + 1) + "|")
    for j in range(len(per_node[nodes[0]]["start"])):
        cells = []
        for n in nodes:
            start, dur = per_node[n]["start"][j] / 1e3, per_node[n]["dur"][j] / 1e3
            cells.append(f"{start:.1f}-{start + dur:.1f}")
        print(f"| {j} | " + " | ".join(cells) + " |")


def parse_range(text):
    first, _, last = text.partition("-")
    try:
        a, b = int(first), int(last or first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a range A-B of kernel numbers")
    if a < 0 or b < a:
        raise argparse.ArgumentTypeError(f"'{text}' is not a range A-B with 0 <= A <= B")
    return a, b


def main():
    ap = argparse.ArgumentParser(description="Where a decode step's graph spends its time.")
    ap.add_argument("trace")
    ap.add_argument("steps", nargs="?", type=int, default=8)
    ap.add_argument("--launches", type=parse_range, metavar="A-B")
    args = ap.parse_args()
    path, steps = args.trace, args.steps
    rows = []
    with open(path) as f:
        r = csv.reader(f)
        next(r)
        for row in r:
            start, end, stream, gid, node, corr, grid, block, cluster = (int(v) for v in row[:9])
            rows.append((start, end, stream, gid, node, corr, grid, block, cluster,
                         ",".join(row[9:])))
    graphed = [x for x in rows if x[3] != 0]
    if not graphed:
        sys.exit("no graph launches in the trace")
    launches = collections.defaultdict(list)  # (graph, correlation) -> kernels
    for x in graphed:
        launches[(x[3], x[5])].append(x)
    by_graph = collections.Counter(g for g, _ in launches)
    graph = by_graph.most_common(1)[0][0]
    keys = sorted((k for k in launches if k[0] == graph), key=lambda k: min(x[0] for x in launches[k]))
    keys = keys[-steps:]
    per_node = collections.defaultdict(lambda: collections.defaultdict(list))
    names = {}
    spans = []
    for k in keys:
        ks = sorted(launches[k], key=lambda x: (x[0], x[1]))
        t0 = ks[0][0]
        frontier = t0
        for x in ks:
            start, end, stream, _, node, _, grid, block, cluster, name = x
            d = per_node[node]
            d["start"].append(start - t0)
            d["dur"].append(end - start)
            d["adds"].append(max(0, end - frontier))
            d["early"].append(max(0, frontier - start))
            d["stream"].append(stream)
            names[node] = (short_name(name), grid, block, cluster)
            frontier = max(frontier, end)
        spans.append(frontier - t0)
    print(f"graph {graph}: {len(keys)} launches, {len(per_node)} kernels a launch, "
          f"span {statistics.mean(spans) / 1e3:.1f} us (min {min(spans) / 1e3:.1f}, "
          f"max {max(spans) / 1e3:.1f})")
    # Each node's means over the launches, in us.
    mean = {n: {k: statistics.mean(d[k]) / 1e3 for k in ("start", "dur", "early", "adds")}
            for n, d in per_node.items()}
    streams = sorted({s for d in per_node.values() for s in d["stream"]})
    print("\n| # | kernel | grid x block (cluster) | stream | start us | dur us | early us | adds us |")
    print("|---|---|---|---|---|---|---|---|")
    order = sorted(per_node, key=lambda n: mean[n]["start"])
    for i, n in enumerate(order):
        nm, grid, block, cluster = names[n]
        m = mean[n]
        cl = f" ({cluster})" if cluster > 1 else ""
        print(f"| {i} | {nm} | {grid} x {block}{cl} | {streams.index(per_node[n]['stream'][0])} | "
              f"{m['start']:.2f} | {m['dur']:.2f} | {m['early']:.2f} | {m['adds']:.2f} |")
    layer_table(order, mean, names)
    if args.launches is not None:
        first, last = args.launches
        if last >= len(order):
            sys.exit(f"--launches {first}-{last}: the step has kernels 0-{len(order) - 1}")
        launch_table(order, per_node, names, first, last)
    tot = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for n in order:
        t = tot[names[n][0]]
        t[0] += 1
        t[1] += mean[n]["dur"]
        t[2] += mean[n]["adds"]
    span = statistics.mean(spans) / 1e3
    print("\n| kernel | calls a step | dur us (sum) | adds us (sum) | of the span |")
    print("|---|---|---|---|---|")
    for nm, (c, dur, adds) in sorted(tot.items(), key=lambda kv: -kv[1][2]):
        print(f"| {nm} | {c} | {dur:.1f} | {adds:.1f} | {100 * adds / span:.1f}% |")


if __name__ == "__main__":
    main()

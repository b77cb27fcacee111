#!/usr/bin/env python3
"""Reads a kernel trace (bench/kernel_trace.cc's CSV) and shows where a decode step's graph spends
its time.

Usage: trace_summary.py TRACE.csv [STEPS]   (STEPS: the last launches of the most launched graph,
default 8)

A kernel's share of the step ("adds") is how far its end moves the step's frontier (the latest
end among the kernels that started before it): a chain of kernels launched programmatically
overlaps each launch with its predecessor, so a kernel adds its end minus its predecessor's end,
and a kernel on a branch that ends before the main line adds nothing. The shares sum to the
step's span. "early" is how long before that frontier the kernel's first block started (the
programmatic launch's head start). Prints every node of the graph in start order (the mean over
the steps), then what each kernel adds per layer kind (sliding, CSA, HCA: the mean over the
layers of that kind), then the sums by kernel name.
"""
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


def layer_table(order, per_node, names):
    """Per layer kind, what each kernel adds (the mean over the layers of that kind): a layer
    starts at every other hc_pre (the attention's; the FFN's follows it), and is CSA with an
    indexer top-k, HCA with a compressor only, sliding otherwise."""
    pres = [i for i, n in enumerate(order) if names[n][0].startswith("hc_pre")]
    starts = pres[0::2]
    if not starts:
        return
    kinds = collections.defaultdict(list)
    for j, first in enumerate(starts):
        end = starts[j + 1] if j + 1 < len(starts) else (pres[-1] + 1 + next(
            (k for k, n in enumerate(order[pres[-1] + 1:]) if names[n][0] in
             ("hc_post_kernel", "gather_rows_kernel", "hc_head_kernel")), len(order)))
        nodes = order[first:end]
        kn = [names[n][0] for n in nodes]
        kind = ("CSA" if any(k.startswith("indexer_topk") for k in kn) else
                "HCA" if any(k.startswith("compress") for k in kn) else "sliding")
        kinds[kind].append(nodes)
    for kind, layers in sorted(kinds.items()):
        # Kernels matched across the layers by (name, grid, occurrence): a branch's kernels
        # may interleave with the main line's in a different order from layer to layer.
        rows = collections.defaultdict(list)
        first_order = []
        for nodes in layers:
            seen = collections.Counter()
            for n in nodes:
                key = (names[n][0], names[n][1], seen[names[n][:2]])
                seen[names[n][:2]] += 1
                if key not in rows:
                    first_order.append(key)
                rows[key].append(statistics.mean(per_node[n]["adds"]) / 1e3)
        total = sum(sum(v) for v in rows.values()) / len(layers)
        print(f"\n{kind} layers: {len(layers)}, {total:.1f} us a layer")
        print("| kernel | grid | adds us (mean over the layers) |")
        print("|---|---|---|")
        for key in first_order:
            print(f"| {key[0]} | {key[1]} | {sum(rows[key]) / len(layers):.2f} |")


def main():
    path = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 8
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
    streams = sorted({s for d in per_node.values() for s in d["stream"]})
    print("\n| # | kernel | grid x block (cluster) | stream | start us | dur us | early us | adds us |")
    print("|---|---|---|---|---|---|---|---|")
    order = sorted(per_node, key=lambda n: statistics.mean(per_node[n]["start"]))
    for i, n in enumerate(order):
        d = per_node[n]
        nm, grid, block, cluster = names[n]
        m = lambda key: statistics.mean(d[key]) / 1e3  # noqa: E731
        cl = f" ({cluster})" if cluster > 1 else ""
        print(f"| {i} | {nm} | {grid} x {block}{cl} | {streams.index(d['stream'][0])} | "
              f"{m('start'):.2f} | {m('dur'):.2f} | {m('early'):.2f} | {m('adds'):.2f} |")
    layer_table(order, per_node, names)
    tot = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for n in order:
        d = per_node[n]
        t = tot[names[n][0]]
        t[0] += 1
        t[1] += statistics.mean(d["dur"]) / 1e3
        t[2] += statistics.mean(d["adds"]) / 1e3
    span = statistics.mean(spans) / 1e3
    print("\n| kernel | calls a step | dur us (sum) | adds us (sum) | of the span |")
    print("|---|---|---|---|---|")
    for nm, (c, dur, adds) in sorted(tot.items(), key=lambda kv: -kv[1][2]):
        print(f"| {nm} | {c} | {dur:.1f} | {adds:.1f} | {100 * adds / span:.1f}% |")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# tools/gpu/trace_summary.py on a made-up kernel trace (bench/kernel_trace.cc's CSV): a step
# graph launched three times (hc_pre, a GEMV starting before hc_pre ends, an indexer top-k on a
# branch that ends before the GEMV, hc_pre, GEMV), beside a kernel outside any graph and a graph
# launched once. What each kernel adds must sum to the step's span, a kernel that ends inside
# the span adds nothing, and the head start ("early") is measured from the latest end so far;
# --launches shows each launch's own start and end of a range of kernels.
set -u
name=trace_summary_test
. "$(dirname "$0")/tools_test_lib.sh"
pre='void dsv4::cuda::(anonymous namespace)::hc_pre_cluster_kernel<true>(dsv4::ops::HcPreArgs, dsv4::ops::HcPostArgs)'
gemv='void dsv4::cuda::gemv_sm90::gemv_kernel<(dsv4::cuda::GemvFormat)0, true, 1, false, 2, true>(dsv4::cuda::GemvArgs)'
topk='void dsv4::cuda::(anonymous namespace)::indexer_topk_v4_kernel<true, false>(dsv4::ops::IndexerTopkArgs, int)'
{
  echo "start_ns,end_ns,stream,graph_id,graph_node,correlation,grid,block,cluster,name"
  echo "100,900,13,0,0,1,1,256,1,void other_kernel(int)"
  echo "1000,2000,13,9,1,2,16,256,16,$pre"
  for i in 0 1 2; do
    b=$((100000 * (i + 1)))
    c=$((10 + i))
    echo "$b,$((b + 5000)),13,7,1,$c,16,256,16,$pre"
    echo "$((b + 4000)),$((b + 9000)),13,7,2,$c,528,128,1,$gemv"
    echo "$((b + 5000)),$((b + 8000)),16,7,3,$c,129,256,1,$topk"
    echo "$((b + 8500)),$((b + 12000)),13,7,4,$c,16,256,16,$pre"
    echo "$((b + 11000)),$((b + 20000)),13,7,5,$c,528,128,1,$gemv"
  done
} > "$t/trace.csv"
python3 tools/gpu/trace_summary.py "$t/trace.csv" > "$t/out.txt" 2>&1 || {
  cat "$t/out.txt"
  exit 1
}
expect "graph 7: 3 launches, 5 kernels a launch, span 20.0 us (min 20.0, max 20.0)"
expect "| 0 | hc_pre_cluster_kernel | 16 x 256 (16) | 0 | 0.00 | 5.00 | 0.00 | 5.00 |"
expect "| 1 | gemv_kernel | 528 x 128 | 0 | 4.00 | 5.00 | 1.00 | 4.00 |"
expect "| 2 | indexer_topk_v4_kernel | 129 x 256 | 1 | 5.00 | 3.00 | 4.00 | 0.00 |"
expect "| 3 | hc_pre_cluster_kernel | 16 x 256 (16) | 0 | 8.50 | 3.50 | 0.50 | 3.00 |"
expect "| 4 | gemv_kernel | 528 x 128 | 0 | 11.00 | 9.00 | 1.00 | 8.00 |"
expect "CSA layers: 1, 20.0 us a layer"
expect "| gemv_kernel | 2 | 14.0 | 12.0 | 60.0% |"
expect "| indexer_topk_v4_kernel | 1 | 3.0 | 0.0 | 0.0% |"
# Each launch's start and end of kernels 1-2, from the launch's start (launch i is 100 us later,
# the same offsets), then a range past the step's kernels refused.
python3 tools/gpu/trace_summary.py "$t/trace.csv" 8 --launches 1-2 > "$t/out.txt" 2>&1 || {
  cat "$t/out.txt"
  exit 1
}
expect "| launch | #1 gemv_kernel (528) | #2 indexer_topk_v4_kernel (129) |"
expect "| 0 | 4.0-9.0 | 5.0-8.0 |"
expect "| 2 | 4.0-9.0 | 5.0-8.0 |"
if python3 tools/gpu/trace_summary.py "$t/trace.csv" 8 --launches 3-5 > "$t/bad.txt" 2>&1 ||
  ! grep -qF -- "--launches 3-5: the step has kernels 0-4" "$t/bad.txt"; then
  echo "trace_summary_test: --launches past the step's kernels was not refused:"
  cat "$t/bad.txt"
  fail=1
fi
[ $fail -eq 0 ] || cat "$t/out.txt"
exit $fail

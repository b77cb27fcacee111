// parallel_for over an index range on a process-wide pool of worker threads. The CPU backend
// uses it for the loops that dominate time (matmul rows, attention heads, experts).
#pragma once

#include <cstdint>
#include <functional>

namespace dsv4 {

// Number of threads used (DSV4_THREADS, else the hardware concurrency).
int num_threads();
void set_num_threads(int n);

// Calls fn(begin, end) on disjoint sub-ranges covering [0, n); blocks until all are done.
// Ranges smaller than min_chunk run on the calling thread. Not reentrant: nested calls
// run serially.
void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace dsv4

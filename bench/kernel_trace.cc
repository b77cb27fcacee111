// A CUPTI injection library that records every kernel's GPU start and end, graph nodes included,
// so that a decode step's graph can be read as a timeline (tools/gpu/trace_summary.py): which
// kernel adds how much to the step, and how much programmatic launches overlap their
// predecessors. Nsight Compute times kernels one by one, without the graph's overlaps, and Nsight
// Systems is not installed on the GPU machine; CUPTI ships with the CUDA toolkit.
//
// Use: CUDA_INJECTION64_PATH=build-gpu/bench/libkernel_trace.so DSV4_TRACE_OUT=trace.csv CMD...
// The driver calls InitializeInjection when CMD first initialises CUDA; the records are written
// at exit as CSV: start_ns,end_ns,stream,graph_id,graph_node,correlation,grid,block,cluster,name
// (name demangled, last column, may hold commas).
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Record {
    uint64_t start, end;
    uint32_t stream, graph_id;
    uint64_t graph_node;
    uint32_t correlation;
    int grid, block, cluster;
    std::string name;
};

std::mutex g_mutex;
std::vector<Record>* g_records = nullptr;  // (leaked: read by the exit handler)
constexpr size_t kBufferBytes = 8u << 20;

void check(CUptiResult r, const char* what) {
    if (r == CUPTI_SUCCESS) return;
    const char* s = nullptr;
    cuptiGetResultString(r, &s);
    std::fprintf(stderr, "kernel_trace: %s: %s\n", what, s != nullptr ? s : "?");
}

std::string demangle(const char* name) {
    if (name == nullptr) return "?";
    int status = 0;
    char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string out = status == 0 && d != nullptr ? d : name;
    std::free(d);
    return out;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = kBufferBytes;
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CUpti_Activity* rec = nullptr;
    std::lock_guard<std::mutex> lock(g_mutex);
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        g_records->push_back(
            {k->start, k->end, k->streamId, k->graphId, k->graphNodeId, k->correlationId,
             k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ,
             static_cast<int>(k->clusterX * k->clusterY * k->clusterZ), demangle(k->name)});
    }
    std::free(buffer);
}

void write_records() {
    check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
    const char* path = std::getenv("DSV4_TRACE_OUT");
    if (path == nullptr) path = "kernel_trace.csv";
    std::FILE* f = std::fopen(path, "w");
    if (f == nullptr) {
        std::fprintf(stderr, "kernel_trace: cannot write %s\n", path);
        return;
    }
    std::lock_guard<std::mutex> lock(g_mutex);
    std::fprintf(
        f, "start_ns,end_ns,stream,graph_id,graph_node,correlation,grid,block,cluster,name\n");
    for (const Record& r : *g_records) {
        std::fprintf(f, "%llu,%llu,%u,%u,%llu,%u,%d,%d,%d,%s\n",
                     static_cast<unsigned long long>(r.start),
                     static_cast<unsigned long long>(r.end), r.stream, r.graph_id,
                     static_cast<unsigned long long>(r.graph_node), r.correlation, r.grid, r.block,
                     r.cluster, r.name.c_str());
    }
    std::fclose(f);
    std::fprintf(stderr, "kernel_trace: %zu kernels -> %s\n", g_records->size(), path);
}

}  // namespace

// Called by the CUDA driver (CUDA_INJECTION64_PATH) when the process initialises CUDA.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
    g_records = new std::vector<Record>();
    g_records->reserve(1 << 16);
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "callbacks");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
    std::atexit(write_records);
    return 1;
}

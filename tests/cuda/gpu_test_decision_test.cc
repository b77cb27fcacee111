// Host-only (in cuda_layout_test, so it runs in CPU CI): when a GPU test runs, skips or fails.
// The GPU machine sets DSV4_EXPECT_GPU=1, and there a missing or unusable GPU must fail the test
// instead of letting the whole GPU suite pass as skipped.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

namespace dsv4::cuda::test {
namespace {

TEST(GpuTestDecision, AUsableGpuRunsWhateverTheVariableSays) {
    for (const char* env : {static_cast<const char*>(nullptr), "", "0", "1", "yes"})
        EXPECT_EQ(gpu_test_decision(true, env), GpuTestDecision::kRun) << (env ? env : "unset");
}

TEST(GpuTestDecision, NoGpuSkipsWhenNoGpuIsExpected) {
    // CPU CI: the variable unset, or set to "" or "0" (off).
    for (const char* env : {static_cast<const char*>(nullptr), "", "0"})
        EXPECT_EQ(gpu_test_decision(false, env), GpuTestDecision::kSkip) << (env ? env : "unset");
}

TEST(GpuTestDecision, NoGpuFailsWhenAGpuIsExpected) {
    // "1" as tools/gpu/run.sh sets it; any other non-empty value but "0" counts too, so a
    // spelling such as "true" cannot turn the failures back into skips.
    for (const char* env : {"1", "true", "yes", "00"})
        EXPECT_EQ(gpu_test_decision(false, env), GpuTestDecision::kFail) << env;
}

TEST(GpuTestDecision, TheReasonIsEmptyExactlyWhenTheGpuIsUsable) {
    // On CPU CI the "no GPU" path, on the H200 the usable one; an empty reason would make
    // DSV4_REQUIRE_GPU run the test, so it must agree with query_device.
    const bool usable = gpu_available() && query_device(0).has_value();
    EXPECT_EQ(gpu_unusable_reason().empty(), usable) << gpu_unusable_reason();
}

}  // namespace
}  // namespace dsv4::cuda::test

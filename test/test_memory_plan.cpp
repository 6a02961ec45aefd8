// fit_batch (util/memory_plan.h): the micro-batch ./train -device cuda takes, from a memory plan and
// the free device memory; largest_fitting_batch: bench_gpu -plan -fit's answer. Plans here are
// made-up functions of B, so each case knows its answer.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "util/memory_plan.h"

namespace {

constexpr uint64_t GiB = uint64_t(1) << 30;

// 1 GiB fixed plus 2 GiB per sequence.
uint64_t two_gib_per_sequence(int B) { return GiB + 2 * GiB * (uint64_t)B; }

TEST(FitBatch, DefaultThatFitsIsKeptSilently) {
    testing::internal::CaptureStdout();
    EXPECT_EQ(fit_batch(32, false, 66 * GiB + DEVICE_MEMORY_RESERVE, two_gib_per_sequence), 32);  // 65 GiB needed
    EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

TEST(FitBatch, DefaultHalvesUntilItFitsAndSaysSo) {
    testing::internal::CaptureStdout();
    // 40 GiB free: B = 32 needs 65, 16 needs 33.
    EXPECT_EQ(fit_batch(32, false, 40 * GiB + DEVICE_MEMORY_RESERVE, two_gib_per_sequence), 16);
    const std::string out = testing::internal::GetCapturedStdout();
    EXPECT_NE(out.find("default B=32 lowered to 16"), std::string::npos) << out;
    EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line: " << out;
}

TEST(FitBatch, TheReserveIsKeptFree) {
    // Exactly the plan free: without the reserve B = 32 would fit.
    testing::internal::CaptureStdout();
    EXPECT_EQ(fit_batch(32, false, 65 * GiB, two_gib_per_sequence), 16);
    testing::internal::GetCapturedStdout();
}

TEST(FitBatch, GivenBatchThatFitsIsKept) {
    EXPECT_EQ(fit_batch(24, true, 50 * GiB + DEVICE_MEMORY_RESERVE, two_gib_per_sequence), 24);  // 49 GiB
}

TEST(FitBatch, GivenBatchThatDoesNotFitIsRefusedNamingAFittingOne) {
    try {
        fit_batch(32, true, 40 * GiB + DEVICE_MEMORY_RESERVE, two_gib_per_sequence);
        FAIL() << "no error";
    } catch (const InputError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("flag -B: B=32 needs 65.00 GiB"), std::string::npos) << what;
        EXPECT_NE(what.find("40.00 GiB is free"), std::string::npos) << what;
        EXPECT_NE(what.find("(B=16 fits)"), std::string::npos) << what;
    }
}

TEST(FitBatch, ModelThatFitsAtNoBatchIsRefused) {
    EXPECT_THROW(fit_batch(32, false, 2 * GiB, two_gib_per_sequence), InputError);
    try {
        fit_batch(4, true, 2 * GiB, two_gib_per_sequence);
        FAIL() << "no error";
    } catch (const InputError& e) {
        EXPECT_EQ(std::string(e.what()).find("fits)"), std::string::npos) << e.what();
    }
}

// bench_gpu -plan -fit's answer: the largest B, not only a power of two, with the reserve free.
TEST(LargestFittingBatch, KeepsTheReserveFreeAndFindsAnyB) {
    EXPECT_EQ(largest_fitting_batch(50 * GiB + DEVICE_MEMORY_RESERVE, two_gib_per_sequence), 24);  // 49 GiB, 25: 51
    EXPECT_EQ(largest_fitting_batch(49 * GiB + DEVICE_MEMORY_RESERVE, two_gib_per_sequence), 24);  // exactly
    EXPECT_EQ(largest_fitting_batch(49 * GiB + DEVICE_MEMORY_RESERVE - 1, two_gib_per_sequence), 23);
    EXPECT_EQ(largest_fitting_batch(49 * GiB, two_gib_per_sequence), 23);  // the reserve kept free
    EXPECT_EQ(largest_fitting_batch(3 * GiB + DEVICE_MEMORY_RESERVE, two_gib_per_sequence), 1);
    EXPECT_EQ(largest_fitting_batch(3 * GiB, two_gib_per_sequence), 0);
    EXPECT_EQ(largest_fitting_batch(GiB, [](int) { return uint64_t(0); }), 1 << 16);  // the cap
}

TEST(MemoryPlan, AddsByCategory) {
    MemoryPlan plan;
    plan.add(MemoryCategory::Activations, 10);
    plan.add(MemoryCategory::Scratch, 5);
    plan.add(MemoryCategory::Activations, 1);
    EXPECT_EQ(plan.of(MemoryCategory::Activations), 11u);
    EXPECT_EQ(plan.of(MemoryCategory::Parameters), 0u);
    EXPECT_EQ(plan.total(), 16u);
}

}  // namespace

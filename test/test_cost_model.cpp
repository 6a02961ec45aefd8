// The cost model's cards (bench/cost_model.h): the table of the cards it knows, found by the
// names a device reports; the H200's figures are the model's defaults, so `bench_gpu -model`
// without a card models an H200 as before; a launch bound by memory takes longer on the H100's
// slower HBM3, one bound by the tensor cores as long; and a device's own SMs, clock and SM
// resources replace the data sheet's. Every expected time is worked out here from the formulas
// of docs/cuda.md ("The cost model"), not read from the model. Plain C++: no CUDA needed.
#include <gtest/gtest.h>

#include "bench/cost_model.h"

namespace {

// A launch of one of the project's kernels: `bytes` read and as many written, `wavefronts` of
// shared memory, `instructions` warp instructions, blocks of 256 threads with 64 registers each.
Traffic kernel(double bytes, double instructions, double wavefronts) {
    Traffic t{"kernel", bytes, bytes, 0, 0};
    t.warp_instructions = instructions;
    t.shared_wavefronts = wavefronts;
    t.resources = {256, 64, 0};
    return t;
}

TEST(Cards, FoundByTheNamesADeviceReports) {
    const CardFigures* h100 = card_named("NVIDIA H100 80GB HBM3");
    ASSERT_NE(h100, nullptr);
    EXPECT_EQ(card_named("H100 80GB HBM3"), h100);
    EXPECT_EQ(card_named("H100"), h100);
    EXPECT_EQ(h100->bandwidth, 3.35e12);
    EXPECT_EQ(h100->bf16_matmul_flops, 989e12);
    EXPECT_EQ(h100->sms, 132);
    const CardFigures* h200 = card_named("NVIDIA H200");
    ASSERT_NE(h200, nullptr);
    EXPECT_EQ(card_named("H200"), h200);
    EXPECT_EQ(h200->bandwidth, 4.8e12);
    // Cards of other figures that share part of a name are not guessed at.
    for (const char* other : {"NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA A100-SXM4-80GB",
                              "SIMT emulator (CPU)", ""})
        EXPECT_EQ(card_named(other), nullptr) << other;
}

TEST(Cards, TheH200IsTheModelsDefault) {
    const DeviceModel h200 = device_model(*card_named("H200")), fallback;
    EXPECT_EQ(h200.card, fallback.card);
    EXPECT_EQ(h200.bandwidth, fallback.bandwidth);
    EXPECT_EQ(h200.bf16_matmul_flops, fallback.bf16_matmul_flops);
    EXPECT_EQ(h200.fp32_flops, fallback.fp32_flops);
    EXPECT_EQ(h200.sms, fallback.sms);
    EXPECT_EQ(h200.clock_hz, fallback.clock_hz);
}

TEST(Cards, MemoryBoundLaunchesFollowTheCardsBandwidth) {
    const DeviceModel h100 = device_model(*card_named("H100")), h200 = device_model(*card_named("H200"));
    EXPECT_EQ(h100.card, "H100 80GB HBM3");
    // 1 GB read and 1 GB written at 80% of the data sheet's bandwidth.
    const Traffic stream{"stream", 1e9, 1e9, 0, 0};
    EXPECT_DOUBLE_EQ(modelled_seconds(stream, true, h100), 2e9 / (3.35e12 * 0.8));
    EXPECT_DOUBLE_EQ(modelled_seconds(stream, true, h200), 2e9 / (4.8e12 * 0.8));
    // 10 TFLOP of bf16 products at 70% of the same tensor peak: as long on both.
    const Traffic product{"gemm", 1e6, 1e6, 0, 10e12};
    EXPECT_DOUBLE_EQ(modelled_seconds(product, true, h100), 10e12 / (989e12 * 0.7));
    EXPECT_DOUBLE_EQ(modelled_seconds(product, true, h100), modelled_seconds(product, true, h200));
}

TEST(Cards, TheDeviceGivesItsSmsClockAndSmResources) {
    const CardFigures& h100 = *card_named("H100");
    DeviceProperties p{"NVIDIA H100 80GB HBM3", 132, 1.98e9, 65536, 233472, 1024, 64, 32};
    const DeviceModel whole = device_model(h100, p);
    EXPECT_EQ(whole.card, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(whole.bf16_matmul_flops, 989e12);
    // 64 registers × 256 threads: 4 blocks, 32 warps per SM (8 per scheduler: full issue).
    const Traffic t = kernel(1e3, 4e8, 2e8);
    ASSERT_EQ(occupancy(t.resources, whole).warps_per_sm, 32);
    const ModelledTime m = modelled_time(t, true, whole);
    EXPECT_DOUBLE_EQ(m.issue, 4e8 / (132 * 4 * 1.98e9));
    EXPECT_DOUBLE_EQ(m.shared, 2e8 / (132 * 1.98e9));
    // Half the SMs at 1.5 GHz: issue and shared time grow by 2 · 1.98 / 1.5, and so does a
    // product's (the tensor peak is per SM and cycle); memory time is the card's.
    p.sms = 66;
    p.clock_hz = 1.5e9;
    const DeviceModel slice = device_model(h100, p);
    const ModelledTime s = modelled_time(t, true, slice);
    EXPECT_DOUBLE_EQ(s.issue, 4e8 / (66 * 4 * 1.5e9));
    EXPECT_DOUBLE_EQ(s.shared, 2e8 / (66 * 1.5e9));
    EXPECT_NEAR(slice.bf16_matmul_flops, 989e12 * 66 * 1.5 / (132 * 1.98), 1e3);
    const Traffic stream{"stream", 1e9, 1e9, 0, 0};
    EXPECT_DOUBLE_EQ(modelled_seconds(stream, true, slice), modelled_seconds(stream, true, whole));
    // An SM of half the registers holds half the blocks: 2 of 64 registers × 256 threads.
    p.registers_per_sm = 32768;
    EXPECT_EQ(occupancy(t.resources, device_model(h100, p)).blocks_per_sm, 2);
}

}  // namespace

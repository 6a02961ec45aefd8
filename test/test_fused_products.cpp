// The CUDA backend's choice between a fused cuBLASLt product and the plain product plus the
// project's kernel (cuda/fused_products.h): the rule that keeps plain unless fused is faster by
// more than the timing's spread, the kinds as -fused gives them, and the names config.json
// records. Host code: no device is needed (the timing itself runs in the emulated suites, cuda_test_kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/fused_products.h"

namespace {

constexpr double REFUSED = NAN;

TEST(FusedProducts, EachKindRunsTheFasterWayOverAllItsProducts) {
    const std::vector<ProductTiming> timings = {
        {Epilogue::Bias, "qkv", 1.0, 1.2, 0.02},      // bias: 2.5 fused against 2.6 plain over its three
        {Epilogue::Bias, "attproj", 0.5, 0.4, 0.03},  // layers, though attproj alone is faster plain,
        {Epilogue::Bias, "fcproj", 1.0, 1.0, 0.01},   // 0.1 faster where the spreads add up to 0.06
        {Epilogue::BiasGelu, "fc", 2.0, 1.5},         // plain is faster
        {Epilogue::GeluGrad, "fcproj", REFUSED, 1.0},
        {Epilogue::BiasGrad, "qkv", 1.0, 1.0},        // bias gradient: 1.9 fused against 2.0 plain,
        {Epilogue::BiasGrad, "fc", 0.9, 1.0, 0.15},   // faster by less than the spread: plain
    };
    const FusionChoice choice = faster_products(timings);
    EXPECT_TRUE(choice.kinds[Epilogue::Bias]);
    EXPECT_FALSE(choice.kinds[Epilogue::BiasGelu]);
    EXPECT_FALSE(choice.kinds[Epilogue::GeluGrad]);
    EXPECT_FALSE(choice.kinds[Epilogue::BiasGrad]);
    EXPECT_EQ(choice.line,
              "bias (-fused auto, timed at start-up: bias fused (2.500 ms fused, 2.600 plain, spread 0.060); "
              "bias + GELU plain (2.000 ms fused, 1.500 plain, spread 0.000); GELU' plain (cuBLASLt refused it); "
              "bias gradient plain (1.900 ms fused, 2.000 plain, spread 0.150))");
}

// Plain stays unless fused is faster by more than the spread: a tie is plain, a lead of the
// spread itself is plain, a lead beyond it fused.
TEST(FusedProducts, FusedMustBeFasterByMoreThanTheSpread) {
    EXPECT_FALSE(faster_products({{Epilogue::Bias, "qkv", 1.0, 1.0}}).kinds[Epilogue::Bias]);
    EXPECT_FALSE(faster_products({{Epilogue::Bias, "qkv", 1.0, 1.25, 0.25}}).kinds[Epilogue::Bias]);
    EXPECT_TRUE(faster_products({{Epilogue::Bias, "qkv", 1.0, 1.25, 0.24}}).kinds[Epilogue::Bias]);
    EXPECT_TRUE(faster_products({{Epilogue::Bias, "qkv", 1.0, 1.001}}).kinds[Epilogue::Bias]);
}

// One product of a kind refused makes the whole kind plain, however fast its other products are
// fused: the ops ask per kind, not per layer.
TEST(FusedProducts, OneRefusalMakesTheKindPlain) {
    const FusionChoice choice =
        faster_products({{Epilogue::BiasGrad, "qkv", REFUSED, 1.0}, {Epilogue::BiasGrad, "fc", 0.1, 5.0}});
    EXPECT_FALSE(choice.kinds[Epilogue::BiasGrad]);
    EXPECT_EQ(choice.line, "none (-fused auto, timed at start-up: bias gradient plain (cuBLASLt refused it))");
}

// A kind with nothing timed (the GELU kinds in fp32) runs plain and is not mentioned.
TEST(FusedProducts, AKindNotTimedIsPlain) {
    const FusionChoice choice = faster_products({{Epilogue::Bias, "qkv", 0.2, 0.3}});
    EXPECT_EQ(choice.kinds, (FusedKinds{{true, false, false, false}}));
    EXPECT_EQ(choice.line, "bias (-fused auto, timed at start-up: bias fused (0.200 ms fused, 0.300 plain, spread 0.000))");
    EXPECT_EQ(faster_products({}).line, "none (-fused auto, timed at start-up: nothing to time)");
}

TEST(FusedProducts, TheFlagsValues) {
    EXPECT_TRUE(fusion_request("auto").timed);
    EXPECT_FALSE(fusion_request("all").timed);
    EXPECT_EQ(fusion_request("all").kinds, EVERY_KIND_FUSED);
    EXPECT_FALSE(fusion_request("none").timed);
    EXPECT_EQ(fusion_request("none").kinds, NO_KIND_FUSED);
}

// Given kinds are used as given, but for GELU's two where GELU cannot be fused (fp32).
TEST(FusedProducts, GivenKindsLeaveOutGeluWhereItCannotBeFused) {
    const FusionChoice bf16 = given_fusion(fusion_request("all"), true);
    EXPECT_EQ(bf16.kinds, EVERY_KIND_FUSED);
    EXPECT_EQ(bf16.line, "bias, bias + GELU, GELU', bias gradient (-fused all)");
    const FusionChoice fp32 = given_fusion(fusion_request("all"), false);
    EXPECT_EQ(fp32.kinds, (FusedKinds{{true, false, false, true}}));
    EXPECT_EQ(fp32.line, "bias, bias gradient (-fused all)");
    EXPECT_EQ(given_fusion(fusion_request("none"), true).line, "none (-fused none)");
    const FusionChoice kept = given_fusion({false, {{false, true, false, false}}, "kept"}, true);
    EXPECT_EQ(kept.line, "bias + GELU (kept)");
}

// config.json records the names; a resumed run reads them back.
TEST(FusedProducts, EveryNameReadsBackAsItsKind) {
    for (Epilogue e : ALL_EPILOGUES) EXPECT_EQ(epilogue_named(epilogue_name(e)), (int)e) << epilogue_name(e);
    EXPECT_EQ(epilogue_named("GELU"), -1);
    EXPECT_EQ(epilogue_named(""), -1);
}

}  // namespace

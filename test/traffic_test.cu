// The traffic model (traffic.h) against what the kernels really touch: every launcher of the
// .cuh files runs at odd test sizes in the counting build of the SIMT layer (test/simt/
// counting.h), which records the distinct device bytes each launch reads and writes, and each
// launch must match its declaration in `*_traffic`: the same kernel, read and written bytes
// within 10%. Built only for the emulator (build/emu/count/traffic_test), in fp32 and bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adamw.cuh"
#include "attention.cuh"
#include "counting.h"
#include "cuda_common.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"
#include "loss.cuh"
#include "matmul.cuh"
#include "residual.cuh"
#include "traffic.h"

namespace {

// Odd sizes, as in cuda_test_kernels.cu: no block or warp is filled exactly.
constexpr int B = 3, Tn = 13, C = 48, NH = 4, V = 83, Vp = 96, maxT = 20;
constexpr int N = B * Tn;
constexpr cudaStream_t kStream = nullptr;
constexpr double kTolerance = 0.10;

// n device elements, all 0.5 (the values do not change which bytes a kernel touches).
template <typename U>
DeviceArray<U> filled(size_t n) {
    std::vector<U> host(n, from_float<U>(0.5f));
    DeviceArray<U> d(n);
    d.upload(host.data(), kStream);
    return d;
}
template <>
DeviceArray<int32_t> filled<int32_t>(size_t n) {
    std::vector<int32_t> host(n, 1);
    DeviceArray<int32_t> d(n);
    d.upload(host.data(), kStream);
    return d;
}

// The launches `run` makes, with the bytes each touched.
template <class F>
std::vector<simt::CountedLaunch> counted(F run) {
    simt::start_counting();
    run();
    return simt::stop_counting();
}

// Whether `a` is within kTolerance of the counted `b` (exactly 0 when b is).
bool close(double a, size_t b) { return b == 0 ? a == 0 : std::fabs(a - (double)b) <= kTolerance * (double)b; }

// Launch by launch: the declared kernel is the one launched (its name begins the launch
// expression), and the declared bytes are the counted ones within kTolerance.
::testing::AssertionResult agree(const Launches& declared, const std::vector<simt::CountedLaunch>& launches) {
    if (declared.size() != launches.size())
        return ::testing::AssertionFailure() << declared.size() << " launches declared, " << launches.size() << " made";
    for (size_t i = 0; i < declared.size(); i++) {
        const Traffic& d = declared[i];
        const simt::CountedLaunch& c = launches[i];
        if (c.kernel.rfind(d.kernel, 0) != 0)
            return ::testing::AssertionFailure() << "launch " << i << " is " << c.kernel << ", declared " << d.kernel;
        if (!close(d.bytes_read, c.bytes_read) || !close(d.bytes_written, c.bytes_written))
            return ::testing::AssertionFailure()
                   << "launch " << i << " (" << c.kernel << "): declared " << d.bytes_read << " bytes read, "
                   << d.bytes_written << " written; counted " << c.bytes_read << " and " << c.bytes_written;
    }
    return ::testing::AssertionSuccess();
}
::testing::AssertionResult agree(const Traffic& declared, const std::vector<simt::CountedLaunch>& launches) {
    return agree(Launches{declared}, launches);
}

template <typename T>
class TrafficTest : public ::testing::Test {
protected:
    std::unique_ptr<gpu::Blas> blas;
    void SetUp() override {
        ASSERT_TRUE(simt::counting_compiled()) << "not the counting build: the hooks are never called";
        blas = std::make_unique<gpu::Blas>(kStream);
    }
};
using ElementTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(TrafficTest, ElementTypes);

TYPED_TEST(TrafficTest, Convert) {
    using T = TypeParam;
    auto in = filled<float>(N * C);
    DeviceArray<T> out(N * C);
    for (size_t offset : {0, 1})  // packs, and one element off alignment
        EXPECT_TRUE(agree(convert_traffic<T, float>(N * C - offset), counted([&] {
                              convert(out.data() + offset, in.data() + offset, N * C - offset, kStream);
                          })))
            << "offset " << offset;
}

TYPED_TEST(TrafficTest, AddColumnPartials) {
    const int chunks = 5;
    auto partial = filled<float>(chunks * 2 * C);
    auto out = filled<float>(C);
    EXPECT_TRUE(agree(add_column_partials_traffic(chunks, C),
                      counted([&] { add_column_partials(out.data(), partial.data(), chunks, 2 * C, C, kStream); })));
}

TYPED_TEST(TrafficTest, Gemm) {
    using T = TypeParam;
    const int M = 7, Nn = 11, K = 5;
    auto a = filled<T>(M * K);
    auto b = filled<T>(K * Nn);
    auto c = filled<float>(M * Nn);
    for (float beta : {0.0f, 1.0f})
        EXPECT_TRUE(agree(gpu::gemm_traffic(M, Nn, K, beta != 0, sizeof(T), 4), counted([&] {
                              gpu::gemm(this->blas->cublas, false, true, M, Nn, K, 1.0f, a.data(), K, b.data(), K, beta,
                                        c.data(), Nn);
                          })))
            << "beta = " << beta;
}

TYPED_TEST(TrafficTest, MatmulForwardAndBackward) {
    using T = TypeParam;
    const int IC = C, OC = 3 * C;
    auto inp = filled<T>(N * IC), w = filled<T>(OC * IC), bias = filled<T>(OC), out = filled<T>(N * OC);
    auto dinp = filled<T>(N * IC);
    auto dw = filled<float>(OC * IC), dbias = filled<float>(OC), partial = filled<float>(MAX_ROW_CHUNKS * OC);
    for (bool with_bias : {false, true}) {
        EXPECT_TRUE(agree(gpu::matmul_forward_traffic<T>(N, IC, OC, with_bias), counted([&] {
                              gpu::matmul_forward(*this->blas, out.data(), inp.data(), w.data(),
                                                  with_bias ? bias.data() : nullptr, N, IC, OC, kStream);
                          })))
            << "bias " << with_bias;
        for (GradOut mode : {GradOut::Add, GradOut::Write})
            EXPECT_TRUE(agree(gpu::matmul_backward_traffic<T>(N, IC, OC, with_bias, mode), counted([&] {
                                  gpu::matmul_backward(*this->blas, dinp.data(), dw.data(),
                                                       with_bias ? dbias.data() : nullptr, out.data(), inp.data(),
                                                       w.data(), N, IC, OC, partial.data(), kStream, mode);
                              })))
                << "bias " << with_bias << (mode == GradOut::Add ? ", dinp added" : ", dinp written");
    }
}

TYPED_TEST(TrafficTest, AddBias) {
    using T = TypeParam;
    const int OC = 3 * C;
    auto out = filled<T>(N * OC + 1), bias = filled<T>(OC);
    for (int oc : {OC, OC - 3})  // packs of 16 bytes, and OC not a multiple of a pack
        for (size_t offset : {0, 1})  // out aligned, and one element off
            EXPECT_TRUE(agree(gpu::add_bias_traffic<T>(N, oc), counted([&] {
                                  gpu::add_bias(out.data() + offset, bias.data(), N, oc, kStream);
                              })))
                << "OC " << oc << ", offset " << offset;
}

TYPED_TEST(TrafficTest, GeluBackwardInplace) {
    using T = TypeParam;
    const int OC = 4 * C;
    auto pre = filled<T>(N * OC), d = filled<T>(N * OC + 1);
    for (int oc : {OC, OC - 3})  // packs of 16 bytes, and OC not a multiple of a pack
        for (size_t offset : {0, 1})  // d aligned, and one element off
            EXPECT_TRUE(agree(gpu::gelu_backward_inplace_traffic<T>(N, oc), counted([&] {
                                  gpu::gelu_backward_inplace(d.data() + offset, pre.data(), N, oc, kStream);
                              })))
                << "OC " << oc << ", offset " << offset;
}

// fcproj's backward with GELU's derivative: fused into the dpre product where IC is a multiple
// of 8 (4C), else the product and the pass (4C − 4: packs in fp32; 4C − 3: single elements).
TYPED_TEST(TrafficTest, MatmulGeluBackward) {
    using T = TypeParam;
    const int OC = C;
    for (int IC : {4 * C, 4 * C - 4, 4 * C - 3}) {
        auto inp = filled<T>(N * IC), pre = filled<T>(N * IC), w = filled<T>(OC * IC), dout = filled<T>(N * OC);
        auto dpre = filled<T>(N * IC);
        auto dw = filled<float>(OC * IC), dbias = filled<float>(OC), partial = filled<float>(MAX_ROW_CHUNKS * OC);
        EXPECT_TRUE(agree(gpu::matmul_gelu_backward_traffic<T>(N, IC, OC, true), counted([&] {
                              gpu::matmul_gelu_backward(*this->blas, dpre.data(), dw.data(), dbias.data(), dout.data(),
                                                        inp.data(), w.data(), pre.data(), N, IC, OC, partial.data(),
                                                        kStream);
                          })))
            << "IC " << IC;
    }
}

TYPED_TEST(TrafficTest, BiasGelu) {
    using T = TypeParam;
    const int OC = 4 * C;
    auto pre = filled<T>(N * OC + 1), out = filled<T>(N * OC), bias = filled<T>(OC);
    for (int oc : {OC, OC - 3})  // packs of 16 bytes, and OC not a multiple of a pack
        for (size_t offset : {0, 1})  // pre aligned, and one element off
            EXPECT_TRUE(agree(gpu::bias_gelu_forward_traffic<T>(N, oc), counted([&] {
                                  gpu::bias_gelu_forward(out.data(), pre.data() + offset, bias.data(), N, oc, kStream);
                              })))
                << "OC " << oc << ", offset " << offset;
}

// fc with bias and GELU: one fused product where OC is a multiple of 8 (4C), else the product
// and the bias + GELU pass (4C − 4).
TYPED_TEST(TrafficTest, MatmulBiasGelu) {
    using T = TypeParam;
    const int IC = C;
    for (int OC : {4 * C, 4 * C - 4}) {
        auto inp = filled<T>(N * IC), w = filled<T>(OC * IC), bias = filled<T>(OC);
        auto pre = filled<T>(N * OC), out = filled<T>(N * OC);
        EXPECT_TRUE(agree(gpu::matmul_bias_gelu_forward_traffic<T>(N, IC, OC), counted([&] {
                              gpu::matmul_bias_gelu_forward(*this->blas, out.data(), pre.data(), inp.data(), w.data(),
                                                            bias.data(), N, IC, OC, kStream);
                          })))
            << "OC " << OC;
    }
}

TYPED_TEST(TrafficTest, Residual) {
    using T = TypeParam;
    // Every pack whole, and the last one partial.
    for (const size_t n : {(size_t)N * C, (size_t)N * C - 3}) {
        // As the model calls it: the stream (x, out) fp32, f in T.
        auto x = filled<float>(n), out = filled<float>(n);
        auto f = filled<T>(n);
        EXPECT_TRUE(agree(gpu::residual_forward_traffic<float, T>(n),
                          counted([&] { gpu::residual_forward(out.data(), x.data(), f.data(), 0.3f, n, kStream); })))
            << n;
        // Its backward: the stream gradient fp32, df in T, written or added into.
        for (GradOut mode : {GradOut::Write, GradOut::Add})
            EXPECT_TRUE(agree(gpu::residual_backward_traffic<T, float>(n, mode), counted([&] {
                                  gpu::residual_backward(f.data(), x.data(), 0.3f, n, mode, kStream);
                              })))
                << n << (mode == GradOut::Add ? " adding" : " writing");
    }
}

TYPED_TEST(TrafficTest, LayerNorm) {
    using T = TypeParam;
    // As the model calls it on the stream: fp32 input and input gradient, output and weights in
    // T; in packs, and with x one element off alignment (single elements).
    auto x = filled<float>(N * C + 1), dx = filled<float>(N * C);
    auto out = filled<T>(N * C), w = filled<T>(C), b = filled<T>(C), df = filled<T>(N * C);
    auto mean = filled<float>(N), rstd = filled<float>(N), dw = filled<float>(C), db = filled<float>(C);
    auto partial = filled<float>(gpu::layernorm_backward_scratch(C));
    for (size_t offset : {0, 1}) {
        EXPECT_TRUE(agree(gpu::layernorm_forward_traffic<T, float, T>(N, C), counted([&] {
                              gpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data() + offset, w.data(),
                                                     b.data(), N, C, kStream);
                          })))
            << "offset " << offset;
        for (GradOut mode : {GradOut::Add, GradOut::Write})
            EXPECT_TRUE(agree(gpu::layernorm_backward_traffic<float, T, float, T>(N, C, mode), counted([&] {
                                  gpu::layernorm_backward(dx.data(), dw.data(), db.data(), out.data(), x.data() + offset,
                                                          w.data(), mean.data(), rstd.data(), N, C, partial.data(),
                                                          kStream, mode);
                              })))
                << (mode == GradOut::Add ? "added" : "written") << ", offset " << offset;
        EXPECT_TRUE(agree(gpu::layernorm_backward_residual_traffic<float, T, T, float, T>(N, C), counted([&] {
                              gpu::layernorm_backward_residual(dx.data(), df.data(), 0.3f, dw.data(), db.data(),
                                                               out.data(), x.data() + offset, w.data(), mean.data(),
                                                               rstd.data(), N, C, partial.data(), kStream);
                          })))
            << "with the residual gradient, offset " << offset;
    }
}

TYPED_TEST(TrafficTest, ResidualLayerNorm) {
    using T = TypeParam;
    // As the model calls it: the stream x and the sum fp32, f and the weights in T, the output
    // in T (the input norm of a module, the final norm) or fp32 (Post-LN's after-add norm).
    auto x = filled<float>(N * C), sum = filled<float>(N * C);
    auto f = filled<T>(N * C), w = filled<T>(C), b = filled<T>(C), out = filled<T>(N * C);
    auto out_stream = filled<float>(N * C), mean = filled<float>(N), rstd = filled<float>(N);
    EXPECT_TRUE(agree(gpu::residual_layernorm_forward_traffic<float, T, T, T>(N, C), counted([&] {
                          gpu::residual_layernorm_forward(sum.data(), out.data(), mean.data(), rstd.data(), x.data(),
                                                          f.data(), 0.3f, w.data(), b.data(), N, C, kStream);
                      })));
    EXPECT_TRUE(agree(gpu::residual_layernorm_forward_traffic<float, T, float, T>(N, C), counted([&] {
                          gpu::residual_layernorm_forward(sum.data(), out_stream.data(), mean.data(), rstd.data(),
                                                          x.data(), f.data(), 0.3f, w.data(), b.data(), N, C, kStream);
                      })));
}

TYPED_TEST(TrafficTest, CrossEntropy) {
    using T = TypeParam;
    auto logits = filled<T>(N * Vp + 1);
    auto targets = filled<int32_t>(N);
    auto losses = filled<float>(N);
    for (size_t offset : {0, 1}) {  // packs of 16 bytes (V mod 8 columns one by one), and one element off
        EXPECT_TRUE(agree(gpu::crossentropy_forward_traffic<T>(N, V, Vp), counted([&] {
                              gpu::crossentropy_forward(losses.data(), logits.data() + offset, targets.data(), N, V,
                                                        Vp, kStream);
                          })))
            << "offset " << offset;
        EXPECT_TRUE(agree(gpu::crossentropy_forward_backward_traffic<T>(N, V, Vp), counted([&] {
                              gpu::crossentropy_forward_backward(losses.data(), logits.data() + offset,
                                                                 targets.data(), 0.1f, N, V, Vp, kStream);
                          })))
            << "offset " << offset;
    }
}

TYPED_TEST(TrafficTest, AdamWAndSumOfSquares) {
    using T = TypeParam;
    const size_t n = 40001;  // several blocks of the sum of squares
    auto params = filled<float>(n), grads = filled<float>(n), m = filled<float>(n), v = filled<float>(n);
    auto copy = filled<T>(n);
    auto partial = filled<float>(gpu::SUMSQ_MAX_BLOCKS);
    const bool has_copy = !std::is_same<T, float>::value;
    const AdamWHyper h{1e-3, 0.9, 0.95, 1e-8, 0.1};
    gpu::AdamWTable table;
    table.count = 2, table.end[0] = n / 3, table.end[1] = n, table.decays[0] = true, table.decays[1] = false;
    for (size_t lo : {7, 8}) {  // a slice, as one ZeRO-1 rank updates: one at a time, and in packs
        const size_t hi = n - 5;
        EXPECT_TRUE(agree(gpu::adamw_update_traffic<T>(hi - lo, has_copy), counted([&] {
                              gpu::adamw_update(params.data(), has_copy ? copy.data() : nullptr, grads.data(),
                                                m.data(), v.data(), table, lo, hi, h, 3, 1.0, kStream);
                          })))
            << "lo " << lo;
    }
    EXPECT_TRUE(agree(gpu::sum_of_squares_traffic<T>(n),
                      counted([&] { gpu::sum_of_squares(copy.data(), n, partial.data(), kStream); })));
}

TYPED_TEST(TrafficTest, Encoder) {
    using T = TypeParam;
    // Forward: distinct tokens, so every position reads its own wte row, as declared.
    std::vector<int32_t> distinct(N), repeated(N);
    for (int i = 0; i < N; i++) distinct[i] = (7 * i) % V, repeated[i] = (i * i) % 10;
    DeviceArray<int32_t> tokens(N);
    tokens.upload(distinct.data(), kStream);
    // In packs of 4 (C = 48), with out one element off (single elements), and C = 50, not a
    // multiple of the pack (single elements).
    auto wte = filled<T>(Vp * 50), wpe = filled<T>(maxT * 50);
    auto out = filled<float>(N * 50 + 1);  // X_0, the fp32 stream
    for (int width : {C, 50})
        for (size_t offset : {0, 1})
            EXPECT_TRUE(agree(gpu::encoder_forward_traffic<float, T>(B, Tn, width), counted([&] {
                                  gpu::encoder_forward(out.data() + offset, tokens.data(), wte.data(), wpe.data(), B,
                                                       Tn, width, kStream);
                              })))
                << "C " << width << ", offset " << offset;
    // Backward: repeated tokens, i² mod 10 takes 6 distinct values.
    tokens.upload(repeated.data(), kStream);
    gpu::TokenOrder order(N);
    auto dwte = filled<float>(Vp * C), dwpe = filled<float>(maxT * C);
    EXPECT_TRUE(agree(gpu::encoder_backward_traffic<float>(B, Tn, C, 6), counted([&] {
                          gpu::encoder_backward(dwte.data(), dwpe.data(), out.data(), tokens.data(), order, B, Tn, C,
                                                kStream);
                      })));
    // A batch of 3·1500 positions: 8192 keys, four tiles, so the sort also makes its launches
    // over the whole array and its merges in the tiles.
    const int big_T = 1500, big_N = B * big_T;
    std::vector<int32_t> many(big_N);
    for (int i = 0; i < big_N; i++) many[i] = (i * i) % 10;
    DeviceArray<int32_t> big_tokens(big_N);
    big_tokens.upload(many.data(), kStream);
    gpu::TokenOrder big_order(big_N);
    auto big_dout = filled<float>((size_t)big_N * 8), big_dwpe = filled<float>(big_T * 8), big_dwte = filled<float>(10 * 8);
    EXPECT_TRUE(agree(gpu::encoder_backward_traffic<float>(B, big_T, 8, 6), counted([&] {
                          gpu::encoder_backward(big_dwte.data(), big_dwpe.data(), big_dout.data(), big_tokens.data(),
                                                big_order, B, big_T, 8, kStream);
                      })));
}

TYPED_TEST(TrafficTest, Attention) {
    using T = TypeParam;
    auto qkv = filled<T>(N * 3 * C), out = filled<T>(N * C), dout = filled<T>(N * C), dqkv = filled<T>(N * 3 * C);
    auto lse = filled<float>(gpu::attention_saved_size(B, Tn, NH)), delta = filled<float>(gpu::attention_saved_size(B, Tn, NH));
    EXPECT_TRUE(agree(gpu::attention_forward_traffic<T>(B, Tn, C, NH), counted([&] {
                          gpu::attention_forward(out.data(), lse.data(), qkv.data(), B, Tn, C, NH, kStream);
                      })));
    EXPECT_TRUE(agree(gpu::attention_backward_traffic<T>(B, Tn, C, NH), counted([&] {
                          gpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                                  delta.data(), B, Tn, C, NH, kStream);
                      })));
}

// The comparison can fail: the forward declared as if it read only one of its inputs, the
// forward declared with 15% fewer bytes read, and a launch left undeclared all disagree.
TYPED_TEST(TrafficTest, WrongDeclarationsDisagree) {
    using T = TypeParam;
    const size_t n = (size_t)N * 4 * C;
    auto x = filled<T>(n), f = filled<T>(n), out = filled<T>(n);
    const auto launches = counted([&] { gpu::residual_forward(out.data(), x.data(), f.data(), 0.5f, n, kStream); });
    Traffic wrong = gpu::residual_forward_traffic<T, T>(n);
    wrong.bytes_read = n * sizeof(T);
    EXPECT_FALSE(agree(wrong, launches));
    Traffic short_read = gpu::residual_forward_traffic<T, T>(n);
    short_read.bytes_read *= 0.85;
    EXPECT_FALSE(agree(short_read, launches));
    EXPECT_FALSE(agree(Launches{}, launches));  // a launch not declared at all
}

}  // namespace

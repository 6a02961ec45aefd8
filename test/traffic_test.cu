// The traffic and cost model (bench/traffic.h, bench/cost_model.h) and the kernels' declarations
// (bench/kernel_costs.h) against what the kernels really do:
//   * every op of the CUDA op set (cuda_ops.cuh) runs at odd test sizes in the counting build of
//     the SIMT layer (test/simt/counting.h), which records the distinct device bytes each launch
//     reads and writes, and each launch must match its declaration in `*_traffic`: the same kernel, read
//     and written bytes within 10%; where a kernel declares shared-memory wavefronts, they must
//     match the emulator's count of every warp's shared requests, bank conflicts included; where
//     it declares the resources of a block, the launch's threads per block exactly, and shared
//     bytes at least the launch's dynamic shared memory;
//   * the warp instructions a kernel declares per trip of its loop (per tile of the attention
//     kernels' walk) must match the loops of its sm_90 PTX, the rest the rest of the PTX, and
//     the registers and static shared memory every kernel declares ptxas's report, exactly
//     (build/ptx/, made by nvcc from test/ptx_kernels.cu, the CUDA backend; these checks skip
//     without nvcc);
//   * the model must rate the attention kernels the project had before its tensor-core ones
//     (their costs recorded below) at several times their roofline time.
// Built only for the emulator (build/emu/count/traffic_test), in fp32 and bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "adamw.cuh"
#include "cuda/async_copy.cuh"
#include "attention.cuh"
#include "bench/cost_model.h"
#include "counting.h"
#include "cuda/cuda_common.cuh"
#include "cuda_ops.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"
#include "loss.cuh"
#include "matmul.cuh"
#include "residual.cuh"
#include "bench/bench_gpu_backend.cu"  // cuda_step_traffic: the launches of one step, as its ops declare them
#include "bench/kernel_costs.h"
#include "cuda/tensor_cores.cuh"
#include "bench/traffic.h"

namespace {

// Odd sizes, as in cuda_test_kernels.cu: no block or warp is filled exactly.
constexpr int B = 3, Tn = 13, C = 48, NH = 4, V = 83, Vp = 96, maxT = 20;
constexpr int N = B * Tn;
constexpr cudaStream_t kStream = nullptr;
constexpr double kTolerance = 0.10;
// The shared-memory wavefronts a kernel declares against the emulator's count: within 20%, or
// 16 wavefronts where there are few (a block's reduction at a test size).
constexpr double kWavefrontTolerance = 0.20;

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
// expression), and the declared bytes are the counted ones within kTolerance; a declared block
// has the launch's threads and holds at least its dynamic shared memory.
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
        const double waves = (double)c.shared_wavefronts;
        if (d.warp_instructions > 0 && std::fabs(d.shared_wavefronts - waves) > std::max(16.0, kWavefrontTolerance * waves))
            return ::testing::AssertionFailure() << "launch " << i << " (" << c.kernel << "): declared "
                                                 << d.shared_wavefronts << " shared wavefronts, counted " << waves;
        const KernelResources& block = d.resources;
        if (block.threads_per_block > 0 && ((size_t)block.threads_per_block != c.threads_per_block ||
                                            (size_t)block.shared_bytes_per_block < c.dynamic_shared_bytes))
            return ::testing::AssertionFailure()
                   << "launch " << i << " (" << c.kernel << "): declared " << block.threads_per_block << " threads and "
                   << block.shared_bytes_per_block << " shared bytes a block; launched " << c.threads_per_block
                   << " threads with " << c.dynamic_shared_bytes << " dynamic shared bytes";
        if (d.round_trips > 0 && d.round_trips != (double)c.round_trips)
            return ::testing::AssertionFailure() << "launch " << i << " (" << c.kernel << "): declared " << d.round_trips
                                                 << " round trips to device memory, counted " << c.round_trips;
    }
    return ::testing::AssertionSuccess();
}
::testing::AssertionResult agree(const Traffic& declared, const std::vector<simt::CountedLaunch>& launches) {
    return agree(Launches{declared}, launches);
}

// A model of `channels` channels and NH heads whose CudaOps for (B, T) hold the scratch of a test.
ModelConfig config_of(int channels, int T) {
    ModelConfig cfg;
    cfg.maxT = T, cfg.V = 64, cfg.Vp = 64, cfg.L = 1, cfg.NH = NH, cfg.C = channels;
    return cfg;
}

template <typename T>
class TrafficTest : public ::testing::Test {
protected:
    std::unique_ptr<CudaOps<T>> ops;  // the ops (cuda_ops.cuh) of a model of C channels, for (B, Tn)
    void SetUp() override {
        ASSERT_TRUE(simt::counting_compiled()) << "not the counting build: the hooks are never called";
        ops = std::make_unique<CudaOps<T>>(config_of(C, Tn), B, Tn);
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
                              this->ops->convert(out.data() + offset, in.data() + offset, N * C - offset);
                          })))
            << "offset " << offset;
}

TYPED_TEST(TrafficTest, MatmulForwardAndBackward) {
    using T = TypeParam;
    const int IC = C, OC = 3 * C;
    auto inp = filled<T>(N * IC), w = filled<T>(OC * IC), bias = filled<T>(OC), out = filled<T>(N * OC);
    auto dinp = filled<T>(N * IC);
    auto dw = filled<float>(OC * IC), dbias = filled<float>(OC);
    for (const FusedKinds& fused : {EVERY_KIND_FUSED, NO_KIND_FUSED}) {
        this->ops->fused = fused;
        for (bool with_bias : {false, true}) {
            EXPECT_TRUE(agree(gpu::matmul_forward_traffic<T>(N, IC, OC, with_bias, fused), counted([&] {
                                  this->ops->matmul_forward(out.data(), inp.data(), w.data(),
                                                            with_bias ? bias.data() : nullptr, N, IC, OC);
                              })))
                << "bias " << with_bias << ", fused: " << kind_list(fused);
            for (GradOut mode : {GradOut::Add, GradOut::Write})
                EXPECT_TRUE(agree(gpu::matmul_backward_traffic<T>(N, IC, OC, with_bias, mode, fused), counted([&] {
                                      this->ops->matmul_backward(dinp.data(), dw.data(),
                                                                 with_bias ? dbias.data() : nullptr, out.data(),
                                                                 inp.data(), w.data(), N, IC, OC, mode);
                                  })))
                    << "bias " << with_bias << (mode == GradOut::Add ? ", dinp added" : ", dinp written")
                    << ", fused: " << kind_list(fused);
        }
    }
}

// The plain bias gradient over several chunks of rows (200 rows, where the fixture's 39 make one):
// stage 1 writes a row of partial sums per chunk, stage 2 adds every row of them.
TYPED_TEST(TrafficTest, PlainBiasGradientOverSeveralChunks) {
    using T = TypeParam;
    const int rows = 200, IC = C, OC = 3 * C;
    ASSERT_GT(row_chunks(rows), 1);
    this->ops->fused = NO_KIND_FUSED;
    auto inp = filled<T>(rows * IC), w = filled<T>(OC * IC), dout = filled<T>(rows * OC), dinp = filled<T>(rows * IC);
    auto dw = filled<float>(OC * IC), dbias = filled<float>(OC);
    EXPECT_TRUE(agree(gpu::matmul_backward_traffic<T>(rows, IC, OC, true, GradOut::Write, NO_KIND_FUSED), counted([&] {
                          this->ops->matmul_backward(dinp.data(), dw.data(), dbias.data(), dout.data(), inp.data(),
                                                     w.data(), rows, IC, OC, GradOut::Write);
                      })));
}

// The bias pass of a plain forward (add_bias_kernel) at the widths and alignments of its paths.
TYPED_TEST(TrafficTest, AddBias) {
    using T = TypeParam;
    const int IC = C, OC = 3 * C;
    this->ops->fused = NO_KIND_FUSED;
    auto out = filled<T>(N * OC + 1), inp = filled<T>(N * IC), w = filled<T>(OC * IC), bias = filled<T>(OC);
    for (int oc : {OC, OC - 3})  // packs of 16 bytes, and OC not a multiple of a pack
        for (size_t offset : {0, 1})  // out aligned, and one element off
            EXPECT_TRUE(agree(gpu::matmul_forward_traffic<T>(N, IC, oc, true, NO_KIND_FUSED), counted([&] {
                                  this->ops->matmul_forward(out.data() + offset, inp.data(), w.data(), bias.data(), N,
                                                            IC, oc);
                              })))
                << "OC " << oc << ", offset " << offset;
}

// GELU's backward pass of a plain fcproj backward (gelu_backward_inplace_kernel) at the widths and
// alignments of its paths.
TYPED_TEST(TrafficTest, GeluBackwardInplace) {
    using T = TypeParam;
    const int IC = 4 * C, OC = C;
    this->ops->fused = NO_KIND_FUSED;
    auto pre = filled<T>(N * IC), d = filled<T>(N * IC + 1), inp = filled<T>(N * IC), w = filled<T>(OC * IC);
    auto dout = filled<T>(N * OC), dw = filled<float>(OC * IC), dbias = filled<float>(OC);
    for (int ic : {IC, IC - 3})  // packs of 16 bytes, and a row not a multiple of a pack
        for (size_t offset : {0, 1})  // d aligned, and one element off
            EXPECT_TRUE(agree(gpu::matmul_gelu_backward_traffic<T>(N, ic, OC, true, NO_KIND_FUSED), counted([&] {
                                  this->ops->matmul_gelu_backward(d.data() + offset, dw.data(), dbias.data(),
                                                                  dout.data(), inp.data(), w.data(), pre.data(), N, ic,
                                                                  OC);
                              })))
                << "IC " << ic << ", offset " << offset;
}

// fcproj's backward with GELU's derivative: fused into the dpre product where the kind is fused
// and IC a multiple of 8 (4C), else the product and the pass (4C − 4: packs in fp32; 4C − 3:
// single elements); the bias gradient fused or in its own two stages.
TYPED_TEST(TrafficTest, MatmulGeluBackward) {
    using T = TypeParam;
    const int OC = C;
    for (const FusedKinds& fused : {EVERY_KIND_FUSED, NO_KIND_FUSED})
        for (int IC : {4 * C, 4 * C - 4, 4 * C - 3}) {
            this->ops->fused = fused;
            auto inp = filled<T>(N * IC), pre = filled<T>(N * IC), w = filled<T>(OC * IC), dout = filled<T>(N * OC);
            auto dpre = filled<T>(N * IC);
            auto dw = filled<float>(OC * IC), dbias = filled<float>(OC);
            EXPECT_TRUE(agree(gpu::matmul_gelu_backward_traffic<T>(N, IC, OC, true, fused), counted([&] {
                                  this->ops->matmul_gelu_backward(dpre.data(), dw.data(), dbias.data(), dout.data(),
                                                                  inp.data(), w.data(), pre.data(), N, IC, OC);
                              })))
                << "IC " << IC << ", fused: " << kind_list(fused);
        }
}

// The bias + GELU pass of a plain fc forward (bias_gelu_forward_kernel) at the widths and
// alignments of its paths.
TYPED_TEST(TrafficTest, BiasGelu) {
    using T = TypeParam;
    const int IC = C, OC = 4 * C;
    this->ops->fused = NO_KIND_FUSED;
    auto pre = filled<T>(N * OC + 1), out = filled<T>(N * OC), bias = filled<T>(OC);
    auto inp = filled<T>(N * IC), w = filled<T>(OC * IC);
    for (int oc : {OC, OC - 3})  // packs of 16 bytes, and OC not a multiple of a pack
        for (size_t offset : {0, 1})  // pre aligned, and one element off
            EXPECT_TRUE(agree(gpu::matmul_gelu_forward_traffic<T>(N, IC, oc, NO_KIND_FUSED), counted([&] {
                                  this->ops->matmul_gelu_forward(out.data(), pre.data() + offset, inp.data(), w.data(),
                                                                 bias.data(), N, IC, oc);
                              })))
                << "OC " << oc << ", offset " << offset;
}

// fc with bias and GELU: one fused product where the kind is fused and OC a multiple of 8 (4C),
// else the product and the bias + GELU pass (4C − 4).
TYPED_TEST(TrafficTest, MatmulBiasGelu) {
    using T = TypeParam;
    const int IC = C;
    for (const FusedKinds& fused : {EVERY_KIND_FUSED, NO_KIND_FUSED})
        for (int OC : {4 * C, 4 * C - 4}) {
            this->ops->fused = fused;
            auto inp = filled<T>(N * IC), w = filled<T>(OC * IC), bias = filled<T>(OC);
            auto pre = filled<T>(N * OC), out = filled<T>(N * OC);
            EXPECT_TRUE(agree(gpu::matmul_gelu_forward_traffic<T>(N, IC, OC, fused), counted([&] {
                                  this->ops->matmul_gelu_forward(out.data(), pre.data(), inp.data(), w.data(),
                                                                 bias.data(), N, IC, OC);
                              })))
                << "OC " << OC << ", fused: " << kind_list(fused);
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
                          counted([&] { this->ops->residual_forward(out.data(), x.data(), f.data(), 0.3f, n); })))
            << n;
    }
}

TYPED_TEST(TrafficTest, LayerNorm) {
    using T = TypeParam;
    // As the model calls it on the stream: fp32 input and input gradient, output and weights in
    // T; in packs, and with x one element off alignment (single elements).
    auto x = filled<float>(N * C + 1), dx = filled<float>(N * C);
    auto out = filled<T>(N * C), w = filled<T>(C), b = filled<T>(C), df = filled<T>(N * C);
    auto mean = filled<float>(N), rstd = filled<float>(N), dw = filled<float>(C), db = filled<float>(C);
    for (size_t offset : {0, 1}) {
        EXPECT_TRUE(agree(gpu::layernorm_forward_traffic<T, float, T>(N, C), counted([&] {
                              this->ops->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data() + offset,
                                                           w.data(), b.data(), N, C);
                          })))
            << "offset " << offset;
        for (GradOut mode : {GradOut::Add, GradOut::Write})
            EXPECT_TRUE(agree(gpu::layernorm_backward_traffic<float, T, float, T>(N, C, mode), counted([&] {
                                  this->ops->layernorm_backward(dx.data(), dw.data(), db.data(), out.data(),
                                                                x.data() + offset, w.data(), mean.data(), rstd.data(),
                                                                N, C, mode);
                              })))
                << (mode == GradOut::Add ? "added" : "written") << ", offset " << offset;
        EXPECT_TRUE(agree(gpu::layernorm_backward_residual_traffic<float, T, T, float, T>(N, C), counted([&] {
                              this->ops->layernorm_backward_residual(dx.data(), df.data(), 0.3f, dw.data(), db.data(),
                                                                     out.data(), x.data() + offset, w.data(),
                                                                     mean.data(), rstd.data(), N, C, GradOut::Add);
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
                          this->ops->residual_layernorm_forward(sum.data(), out.data(), mean.data(), rstd.data(),
                                                                x.data(), f.data(), 0.3f, w.data(), b.data(), N, C);
                      })));
    EXPECT_TRUE(agree(gpu::residual_layernorm_forward_traffic<float, T, float, T>(N, C), counted([&] {
                          this->ops->residual_layernorm_forward(sum.data(), out_stream.data(), mean.data(), rstd.data(),
                                                                x.data(), f.data(), 0.3f, w.data(), b.data(), N, C);
                      })));
}

TYPED_TEST(TrafficTest, CrossEntropy) {
    using T = TypeParam;
    auto logits = filled<T>(N * Vp + 1);
    auto targets = filled<int32_t>(N);
    auto losses = filled<float>(N);
    for (size_t offset : {0, 1}) {  // packs of 16 bytes (V mod 8 columns one by one), and one element off
        EXPECT_TRUE(agree(gpu::crossentropy_forward_traffic<T>(N, V, Vp), counted([&] {
                              this->ops->crossentropy_forward(losses.data(), logits.data() + offset, targets.data(),
                                                              N, V, Vp);
                          })))
            << "offset " << offset;
        EXPECT_TRUE(agree(gpu::crossentropy_forward_backward_traffic<T>(N, V, Vp), counted([&] {
                              this->ops->crossentropy_forward_backward(losses.data(), logits.data() + offset,
                                                                       targets.data(), 0.1f, N, V, Vp);
                          })))
            << "offset " << offset;
    }
}

TYPED_TEST(TrafficTest, AdamWAndSumOfSquares) {
    using T = TypeParam;
    const size_t n = 40001;  // several blocks of the sum of squares
    auto params = filled<float>(n), grads = filled<float>(n), m = filled<float>(n), v = filled<float>(n);
    auto copy = filled<T>(n);
    const bool has_copy = !std::is_same<T, float>::value;
    const AdamWHyper h{1e-3, 0.9, 0.95, 1e-8, 0.1};
    gpu::AdamWTable& table = this->ops->adamw_segments;
    table.count = 2, table.end[0] = n / 3, table.end[1] = n, table.decays[0] = true, table.decays[1] = false;
    for (size_t lo : {7, 8}) {  // a slice, as one ZeRO-1 rank updates: one at a time, and in packs
        const size_t hi = n - 5;
        EXPECT_TRUE(agree(gpu::adamw_update_traffic<T>(hi - lo, has_copy), counted([&] {
                              this->ops->adamw_update(params.data(), has_copy ? copy.data() : nullptr, grads.data(),
                                                      m.data(), v.data(), lo, hi, h, 3, 1.0);
                          })))
            << "lo " << lo;
    }
    EXPECT_TRUE(agree(gpu::sum_of_squares_traffic<T>(n),
                      counted([&] { this->ops->sum_of_squares(copy.data(), n); })));
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
                                  this->ops->encoder_forward(out.data() + offset, tokens.data(), wte.data(), wpe.data(),
                                                             B, Tn, width);
                              })))
                << "C " << width << ", offset " << offset;
    // Backward: repeated tokens, i² mod 10 takes 6 distinct values.
    tokens.upload(repeated.data(), kStream);
    auto dwte = filled<float>(Vp * C), dwpe = filled<float>(maxT * C);
    EXPECT_TRUE(agree(gpu::encoder_backward_traffic<float>(B, Tn, C, gpu::token_runs(repeated.data(), N)), counted([&] {
                          this->ops->encoder_backward(dwte.data(), dwpe.data(), out.data(), tokens.data(), B, Tn, C);
                      })));
    // A batch of 3·1500 positions: 8192 keys, four tiles, so the sort also makes its launches
    // over the whole array and its merges in the tiles; 6 tokens, so every run crosses chunks.
    const int big_T = 1500, big_N = B * big_T;
    std::vector<int32_t> many(big_N);
    for (int i = 0; i < big_N; i++) many[i] = (i * i) % 10;
    DeviceArray<int32_t> big_tokens(big_N);
    big_tokens.upload(many.data(), kStream);
    CudaOps<T> big_ops(config_of(8, big_T), B, big_T);
    auto big_dout = filled<float>((size_t)big_N * 8), big_dwpe = filled<float>(big_T * 8), big_dwte = filled<float>(10 * 8);
    EXPECT_TRUE(agree(gpu::encoder_backward_traffic<float>(B, big_T, 8, gpu::token_runs(many.data(), big_N)), counted([&] {
                          big_ops.encoder_backward(big_dwte.data(), big_dwpe.data(), big_dout.data(), big_tokens.data(),
                                                   B, big_T, 8);
                      })));
}

TYPED_TEST(TrafficTest, Attention) {
    using T = TypeParam;
    auto qkv = filled<T>(N * 3 * C), out = filled<T>(N * C), dout = filled<T>(N * C), dqkv = filled<T>(N * 3 * C);
    auto lse = filled<float>(gpu::attention_saved_size(B, Tn, NH));
    EXPECT_TRUE(agree(gpu::attention_forward_traffic<T>(B, Tn, C, NH), counted([&] {
                          this->ops->attention_forward(out.data(), lse.data(), qkv.data(), B, Tn, C, NH);
                      })));
    EXPECT_TRUE(agree(gpu::attention_backward_traffic<T>(B, Tn, C, NH), counted([&] {
                          this->ops->attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B,
                                                        Tn, C, NH);
                      })));
}

// ---- shared memory --------------------------------------------------------------------------

// Whether the declared shared-memory wavefronts are the counted ones within 15% (the structural
// estimate of attention.cuh), and the launch free of bank conflicts.
::testing::AssertionResult shared_agrees(const Traffic& declared, const simt::CountedLaunch& c) {
    const double counted = (double)c.shared_wavefronts;
    std::printf("  %-50.50s shared wavefronts: declared %.0f, counted %zu (%zu without conflicts)\n", c.kernel.c_str(),
                declared.shared_wavefronts, c.shared_wavefronts, c.shared_ideal_wavefronts);
    if (c.shared_wavefronts != c.shared_ideal_wavefronts)
        return ::testing::AssertionFailure() << c.kernel << ": " << c.shared_wavefronts << " wavefronts for "
                                             << c.shared_ideal_wavefronts << " phases: bank conflicts";
    if (std::fabs(declared.shared_wavefronts - counted) > 0.15 * counted)
        return ::testing::AssertionFailure() << c.kernel << ": declared " << declared.shared_wavefronts
                                             << " shared wavefronts, counted " << counted;
    return ::testing::AssertionSuccess();
}

// One warp reads a 32×32 float tile of shared memory: along a row (32 banks, one wavefront),
// down a column (all 32 words in one bank: 32 wavefronts), one word for all lanes (a broadcast:
// one), and 16-byte rows of a padded and an unpadded 8-row ldmatrix tile.
__global__ void shared_patterns_kernel(float* out, int pattern) {
    __shared__ float tile[32 * 32];
    __shared__ __align__(16) bf16 rows[8 * 72];
    const int lane = threadIdx.x;
    for (int i = 0; i < 32; i++) tile[i * 32 + lane] = (float)i;
    for (int i = lane; i < 8 * 72; i += 32) rows[i] = bf16{};
    __syncwarp();
    uint32_t r[1];
    switch (pattern) {
        case 0: out[lane] = tile[lane]; break;
        case 1: out[lane] = tile[lane * 32]; break;
        case 2: out[lane] = tile[5]; break;
        case 3: ldmatrix<1>(r, rows + (lane % 8) * 72), out[lane] = (float)r[0]; break;  // 144-byte rows
        default: ldmatrix<1>(r, rows + (lane % 8) * 64), out[lane] = (float)r[0];       // 128-byte rows
    }
}

TEST(SharedMemory, CountsBankConflicts) {
    ASSERT_TRUE(simt::counting_compiled());
    DeviceArray<float> out(32);
    const size_t setup = 32 + 18;  // the tile's 32 row stores and the rows' 18 zeroing stores, no conflicts
    const size_t want[] = {1, 32, 1, 1, 8};
    for (int pattern = 0; pattern < 5; pattern++) {
        const auto launches = counted([&] { shared_patterns_kernel<<<1, 32>>>(out.data(), pattern); });
        ASSERT_EQ(launches.size(), 1u);
        EXPECT_EQ(launches[0].shared_wavefronts, setup + want[pattern]) << "pattern " << pattern;
        EXPECT_EQ(launches[0].shared_ideal_wavefronts, setup + 1) << "pattern " << pattern;
    }
}

// The tensor-core attention kernels at GPT-2's head size 64: the shared wavefronts their
// structure implies against the emulator's count (ldmatrix reads and tile stores), with no bank
// conflicts at all, at one tile (T = 13: the diagonal alone) and at three (T = 150: tiles below
// the diagonal too). (At the tests' head sizes 8, 12 and 16 the padded rows are 48 bytes apart,
// and the tile stores meet 2-way in a few banks.)
TEST(SharedMemory, AttentionKernelsAsDeclaredWithoutConflicts) {
    ASSERT_TRUE(simt::counting_compiled());
    struct Shape {
        int B, Tn, C, NH;
    };
    for (const Shape& s : {Shape{2, 13, 128, 2}, Shape{1, 150, 128, 2}}) {
        SCOPED_TRACE("T = " + std::to_string(s.Tn) + ", hs = " + std::to_string(s.C / s.NH));
        const size_t n = (size_t)s.B * s.Tn, rows = gpu::attention_saved_size(s.B, s.Tn, s.NH);
        auto qkv = filled<bf16>(n * 3 * s.C), out = filled<bf16>(n * s.C), dout = filled<bf16>(n * s.C);
        auto dqkv = filled<bf16>(n * 3 * s.C);
        auto lse = filled<float>(rows);
        ModelConfig cfg = config_of(s.C, s.Tn);
        cfg.NH = s.NH;
        CudaOps<bf16> ops(cfg, s.B, s.Tn);
        const auto forward = counted([&] { ops.attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.Tn, s.C, s.NH); });
        const auto backward = counted([&] {
            ops.attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.Tn, s.C, s.NH);
        });
        const Launches declared_forward = gpu::attention_forward_traffic<bf16>(s.B, s.Tn, s.C, s.NH);
        const Launches declared_backward = gpu::attention_backward_traffic<bf16>(s.B, s.Tn, s.C, s.NH);
        ASSERT_EQ(forward.size(), 1u);
        ASSERT_EQ(backward.size(), 3u);
        EXPECT_TRUE(shared_agrees(declared_forward[0], forward[0]));
        EXPECT_TRUE(shared_agrees(declared_backward[1], backward[1]));
        EXPECT_TRUE(shared_agrees(declared_backward[2], backward[2]));
        // One round trip a block (its own rows and first tile); the later tiles' copies overlap work.
        const double blocks = (double)s.B * s.NH * ceil_div(s.Tn, gpu::ATTENTION_ROWS);
        EXPECT_EQ(forward[0].round_trips, blocks);
        EXPECT_EQ(backward[1].round_trips, blocks);
        EXPECT_EQ(backward[2].round_trips, blocks);
        EXPECT_EQ(declared_forward[0].round_trips, blocks);
        EXPECT_EQ(declared_backward[1].round_trips, blocks);
        EXPECT_EQ(declared_backward[2].round_trips, blocks);
    }
}

// A tile loaded with plain loads and then a barrier is a round trip the block waits for; the same
// copied with cp.async a tile ahead, with work between, is not: the emulator's count of both.
__global__ void tile_walk_kernel(float* out, const float* in, int tiles, bool ahead) {
    __shared__ __align__(16) float tile[2][128];
    const int t = threadIdx.x;
    float sum = 0.0f;
    if (ahead) {
        cp_async<4>(&tile[0][t], in + t);
        cp_async_commit();
    }
    for (int j = 0; j < tiles; j++) {
        if (ahead) {
            cp_async_wait<0>();
            __syncthreads();
            if (j + 1 < tiles) {
                cp_async<4>(&tile[(j + 1) % 2][t], in + 128 * (j + 1) + t);
                cp_async_commit();
            }
        } else {
            __syncthreads();
            tile[j % 2][t] = in[128 * j + t];
            __syncthreads();
        }
        sum += __shfl_xor_sync(0xffffffff, tile[j % 2][127 - t], 1);
    }
    out[t] = sum;
}

TEST(Latency, RoundTripsCounted) {
    ASSERT_TRUE(simt::counting_compiled());
    const int tiles = 5, blocks = 3;
    auto in = filled<float>(128 * tiles);
    DeviceArray<float> out(128);
    const auto plain = counted([&] { tile_walk_kernel<<<blocks, 128>>>(out.data(), in.data(), tiles, false); });
    const auto ahead = counted([&] { tile_walk_kernel<<<blocks, 128>>>(out.data(), in.data(), tiles, true); });
    ASSERT_EQ(plain.size(), 1u);
    ASSERT_EQ(ahead.size(), 1u);
    EXPECT_EQ(plain[0].round_trips, (size_t)(blocks * tiles));
    EXPECT_EQ(ahead[0].round_trips, (size_t)blocks);  // the first tile only
    EXPECT_EQ(plain[0].bytes_read, ahead[0].bytes_read);
}

// The latency term by hand: blocks of 4 warps with 160 registers, 3 resident per SM; a block alone
// issues one warp instruction a cycle (each of the 4 schedulers has one warp, a quarter of the 4
// it needs to issue every cycle); its waits add 800 cycles each, and bound the kernel. With 16
// blocks resident the same waits hide behind the other blocks' issue.
TEST(Latency, TermAddsEachBlocksWaitsToItsOwnIssue) {
    Traffic t{"kernel", 1e6, 1e6, 0, 0};
    t.warp_instructions = 4e7;
    t.resources = {128, 160, 20000};
    ASSERT_EQ(occupancy(t.resources).blocks_per_sm, 3);
    EXPECT_EQ(modelled_time(t, true).latency, 0.0) << "no round trips declared";
    t.round_trips = 3e4;
    const ModelledTime m = modelled_time(t, true);
    const double slots = 132.0 * 3;
    EXPECT_NEAR(m.latency, (4e7 + 3e4 * 800) / (slots * 1.98e9), 1e-12);
    EXPECT_NEAR(m.issue, 4e7 / (132 * 4 * 1.98e9 * 0.75), 1e-12);
    EXPECT_EQ(m.total, m.latency);
    // 16 resident blocks of 32 registers (64 warps, full issue): the other blocks hide the waits.
    t.resources = {128, 32, 0};
    ASSERT_EQ(occupancy(t.resources).blocks_per_sm, 16);
    const ModelledTime full = modelled_time(t, true);
    EXPECT_NEAR(full.latency, (4e7 + 3e4 * 800) / (132.0 * 16 * 1.98e9), 1e-12);
    EXPECT_EQ(full.total, full.issue);
}

// attention at d12 (C = 768, 12 heads), B = 16, T = 1024, bf16, as the model rates it: each kernel
// with its one round trip a block, and the same kernels as if every tile were loaded before a
// barrier (a round trip per tile walked, plus the block's own rows), as they were before their
// tiles were double-buffered.
TEST(Latency, AttentionAtD12) {
    const int B = 16, Tn = 1024, C = 768, NH = 12;
    Launches all = gpu::attention_forward_traffic<bf16>(B, Tn, C, NH);
    append(all, gpu::attention_backward_traffic<bf16>(B, Tn, C, NH));
    const double tiles = Tn / gpu::ATTENTION_ROWS, blocks = (double)B * NH * tiles;
    const double walked = (double)B * NH * tiles * (tiles + 1) / 2;
    double total = 0, total_unbuffered = 0;
    for (const Traffic& t : all) {
        const ModelledTime m = modelled_time(t, true);
        Traffic unbuffered = t;
        if (t.round_trips > 0) unbuffered.round_trips = walked + blocks;
        const ModelledTime u = modelled_time(unbuffered, true);
        std::printf("  %-34s modelled %.3f ms (issue %.3f, latency %.3f); a round trip a tile: %.3f ms\n", t.kernel,
                    m.total * 1e3, m.issue * 1e3, m.latency * 1e3, u.total * 1e3);
        total += m.total, total_unbuffered += u.total;
        if (t.round_trips > 0) {
            EXPECT_EQ(t.round_trips, blocks) << t.kernel;
            EXPECT_GT(u.latency, m.latency) << t.kernel;
        }
    }
    std::printf("  attention per layer: %.3f ms; with a round trip a tile %.3f ms (x 12 layers: %.2f, %.2f ms)\n",
                total * 1e3, total_unbuffered * 1e3, 12 * total * 1e3, 12 * total_unbuffered * 1e3);
}

// ---- PTX and ptxas ----------------------------------------------------------------------------

// The PTX and ptxas parsing below uses C strings and stdio only: iostreams and <regex> would
// bring atomics into this ThreadSanitizer-instrumented file, whose hooks the SIMT layer does
// not define.

// The instructions of one kernel (entry) of a PTX file, one per statement, with the positions
// of its labels; inline-asm braces, comments and directives left out.
struct PtxFunction {
    std::vector<std::string> instructions;
    std::map<std::string, size_t> labels;
};

std::string read_file(const char* path) {
    std::string text;
    if (FILE* file = std::fopen(path, "rb")) {
        char buffer[65536];
        for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;) text.append(buffer, n);
        std::fclose(file);
    }
    return text;
}

// `text` without the spaces, tabs and braces at its two ends.
std::string trimmed(const std::string& text) {
    const size_t first = text.find_first_not_of(" \t{}"), last = text.find_last_not_of(" \t{}");
    return first == std::string::npos ? "" : text.substr(first, last - first + 1);
}

// The entry whose name contains `name` (the first such one).
PtxFunction ptx_function(const std::string& ptx, const std::string& name) {
    PtxFunction f;
    size_t at = ptx.find(".entry ");
    while (at != std::string::npos && ptx.substr(at, ptx.find('\n', at) - at).find(name) == std::string::npos)
        at = ptx.find(".entry ", at + 1);
    if (at == std::string::npos) return f;
    const size_t body = ptx.find("\n{", at), end = ptx.find("\n}", body + 1);
    for (size_t line_start = body + 2; line_start < end;) {
        size_t line_end = ptx.find('\n', line_start);
        std::string line = ptx.substr(line_start, line_end - line_start);
        line_start = line_end + 1;
        line = line.substr(0, line.find("//"));
        const std::string word = trimmed(line);
        if (!word.empty() && word.back() == ':' && word.find_first_of(" \t") == std::string::npos) {
            f.labels[word.substr(0, word.size() - 1)] = f.instructions.size();
            continue;
        }
        for (size_t from = 0; from < line.size();) {
            const size_t semicolon = std::min(line.find(';', from), line.size());
            const std::string statement = trimmed(line.substr(from, semicolon - from));
            if (!statement.empty() && statement[0] != '.') f.instructions.push_back(statement);
            from = semicolon + 1;
        }
    }
    return f;
}

// The label a branch instruction jumps to ("@%p1 bra $L__BB0_2", "bra.uni $L__BB0_5"), or "".
std::string branch_target(const std::string& instruction) {
    size_t at = instruction.find("bra");
    if (at == std::string::npos || (at > 0 && instruction[at - 1] != ' ' && instruction[at - 1] != '\t')) return "";
    at = instruction.find_first_of(" \t", at);
    return at == std::string::npos ? "" : trimmed(instruction.substr(at));
}

// The instructions of the kernel's main loop (the loop closed by a backward branch that holds
// the most mma instructions) and of the whole kernel.
struct LoopCount {
    size_t loop = 0, mma = 0, total = 0;
};
LoopCount main_loop(const PtxFunction& f) {
    LoopCount best{0, 0, f.instructions.size()};
    for (size_t i = 0; i < f.instructions.size(); i++) {
        const auto target = f.labels.find(branch_target(f.instructions[i]));
        if (target == f.labels.end() || target->second > i) continue;
        size_t mma = 0;
        for (size_t j = target->second; j <= i; j++) mma += f.instructions[j].rfind("mma.sync", 0) == 0;
        if (mma > best.mma) best = {i - target->second + 1, mma, f.instructions.size()};
    }
    return best;
}

// The number just before `unit` in `line` ("159 registers" → 159), or 0.
int number_before(const std::string& line, const char* unit) {
    const size_t at = line.find(unit);
    if (at == std::string::npos || at < 2) return 0;
    const size_t start = line.find_last_not_of("0123456789", at - 2) + 1;
    return std::atoi(line.substr(start, at - 1 - start).c_str());
}

// ptxas's registers and shared bytes of the entry whose name contains `name`.
KernelResources ptxas_resources(const std::string& report, const std::string& name) {
    KernelResources r;
    size_t at = report.find("Compiling entry function '");
    while (at != std::string::npos && report.substr(at, report.find('\n', at) - at).find(name) == std::string::npos)
        at = report.find("Compiling entry function '", at + 1);
    if (at == std::string::npos) return r;
    const size_t used = report.find("Used ", at);
    const std::string line = report.substr(used, report.find('\n', used) - used);
    r.registers_per_thread = number_before(line, "registers");
    r.shared_bytes_per_block = number_before(line, "bytes smem");
    return r;
}

const char* kPtx = "build/ptx/kernels_sm90.ptx";
const char* kPtxas = "build/ptx/kernels_sm90.ptxas";

// Every tensor-core attention kernel at every head size compiled: the declared instructions of a
// tile off the diagonal against the main loop of its PTX (within 15%), and its registers and
// shared memory against ptxas; at GPT-2's head size 64 also the declared once-per-block rest
// (the diagonal tile, loading the block's own rows, storing the results) against the rest of
// the PTX (within 25%; it is about a ninth of a block's work at T = 1024).
TEST(Ptx, AttentionKernelsAsDeclared) {
    const std::string ptx = read_file(kPtx), report = read_file(kPtxas);
    if (ptx.empty() || report.empty()) GTEST_SKIP() << kPtx << " or " << kPtxas << " not built (no nvcc)";
    const std::pair<gpu::AttentionKernel, const char*> kernels[] = {
        {gpu::AttentionKernel::Forward, "attention_forward_mma_kernelILi"},
        {gpu::AttentionKernel::BackwardDq, "attention_backward_dq_mma_kernelILi"},
        {gpu::AttentionKernel::BackwardDkDv, "attention_backward_dkdv_mma_kernelILi"}};
    for (const auto& [kernel, name] : kernels)
        for (int hs : {8, 12, 16, 64}) {
            const std::string entry = name + std::to_string(hs) + "E";
            SCOPED_TRACE(entry);
            const PtxFunction f = ptx_function(ptx, entry);
            ASSERT_FALSE(f.instructions.empty()) << "not in " << kPtx;
            const LoopCount count = main_loop(f);
            const gpu::MmaTileCosts declared = gpu::mma_attention_costs(kernel, hs);
            std::printf("  %-40s hs %2d: loop %4zu instructions (%zu mma, %.1f per mma), declared %4.0f; rest %4zu, declared %4.0f\n",
                        name, hs, count.loop, count.mma, (double)count.loop / count.mma, declared.loop_instructions,
                        count.total - count.loop, declared.rest_instructions);
            EXPECT_NEAR(declared.loop_instructions, count.loop, 0.15 * count.loop);
            if (hs == 64) {
                EXPECT_NEAR(declared.rest_instructions, count.total - count.loop, 0.25 * (count.total - count.loop));
            }
            const KernelResources ptxas = ptxas_resources(report, entry);
            EXPECT_EQ(declared.resources.registers_per_thread, ptxas.registers_per_thread);
            EXPECT_EQ(declared.resources.shared_bytes_per_block, ptxas.shared_bytes_per_block);
        }
}

// The loops of a kernel's PTX, in the order their backward branches close them: where each
// begins, its instructions and its memory accesses (loads and stores of device, shared or
// generic memory; not of parameters).
struct PtxLoop {
    size_t first, length, accesses;
};
std::vector<PtxLoop> ptx_loops(const PtxFunction& f) {
    std::vector<PtxLoop> loops;
    for (size_t i = 0; i < f.instructions.size(); i++) {
        const auto target = f.labels.find(branch_target(f.instructions[i]));
        if (target == f.labels.end() || target->second > i) continue;
        size_t accesses = 0;
        for (size_t j = target->second; j <= i; j++) {
            const std::string& s = f.instructions[j];
            accesses += (s.rfind("ld.", 0) == 0 || s.rfind("st.", 0) == 0) && s.rfind("ld.param", 0) != 0;
        }
        loops.push_back({target->second, i - target->second + 1, accesses});
    }
    return loops;
}

// A kernel of the training step against its PTX: its declared WarpWork, the PTX loops (by their
// place in ptx_loops) that make up one trip, each with the accesses one trip makes there (so a
// loop nvcc unrolled by 4 counts a quarter), and the loops that run what the unrolling leaves
// over or the columns past the packs; the rest of the PTX is what the warp does around its
// trips.
struct StepKernel {
    const char* entry;
    WarpWork declared;
    std::vector<std::pair<size_t, double>> trip;  // loop, accesses per trip
    std::vector<size_t> leftover;
};

// Every kernel the d12 training step launches in bf16 (Pre-LN), its GELU passes in fp32, and the bf16 copy of the
// weights (convert), except wte_chunk_sums (its PTX
// unrolls the chunk's positions with a copy of the piece's end in each), in the instantiation
// the step uses: the declared instructions of a trip against the PTX loops of one trip (within
// 20%), the declared instructions around the trips (per row and once) against the rest of the
// PTX (within 35%: it holds paths a warp does not take, such as the tails of rows that are not
// whole packs). Loop-free kernels: the whole kernel (AdamW's but its loop over single elements,
// for the parameters past the last pack).
TEST(Ptx, StepKernelsAsDeclared) {
    const std::string ptx = read_file(kPtx);
    if (ptx.empty()) GTEST_SKIP() << kPtx << " not built (no nvcc)";
    const StepKernel kernels[] = {
        {"_ZN3gpu22encoder_forward_kernelILi4Ef13__nv_bfloat16jEE", gpu::encoder_forward_work<float, bf16>(), {}, {}},
        {"_ZN3gpu24layernorm_forward_kernelILb1ELi4E13__nv_bfloat16fS1_S1_EE",
         gpu::layernorm_forward_work<true, 4, bf16, float, bf16, bf16>(), {{1, 3}, {3, 2}, {5, 5}}, {0, 2, 4}},
        {"_ZN3gpu24layernorm_forward_kernelILb0ELi4E13__nv_bfloat16ffS1_EE",
         gpu::layernorm_forward_work<false, 4, bf16, float, float, bf16>(), {{1, 1}, {3, 1}, {5, 4}}, {0, 2, 4}},
        {"_ZN3gpu25layernorm_backward_kernelILi4Ef13__nv_bfloat16fS1_S1_EE",
         gpu::layernorm_backward_work<4, float, bf16, float, bf16, bf16>(768, true), {{2, 3}, {3, 10}}, {}},
        {"_ZN3gpu33layernorm_weight_gradients_kernel", COLUMN_PARTIALS_WORK, {{1, 1}}, {0}},
        {"_Z26add_column_partials_kernel", COLUMN_PARTIALS_WORK, {{1, 1}}, {0}},
        {"_ZN3gpu36crossentropy_forward_backward_kernelILi8E13__nv_bfloat16", gpu::crossentropy_forward_backward_work<bf16>(),
         {{0, 2}, {4, 1}, {6, 2}}, {1, 2, 3, 5, 7, 8}},
        {"_ZN3gpu22attention_delta_kernelI13__nv_bfloat16", gpu::attention_delta_work<bf16>(), {{1, 2}}, {0}},
        {"_ZN3gpu19wpe_backward_kernelIfE", gpu::WPE_BACKWARD_WORK, {{0, 1}}, {1}},
        {"_ZN3gpu23sort_token_tiles_kernel", gpu::bitonic_tile_work(true), {{0, 4}}, {}},
        {"_ZN3gpu24merge_token_tiles_kernel", gpu::bitonic_tile_work(false), {{0, 4}}, {}},
        {"_ZN3gpu19bitonic_step_kernel", gpu::BITONIC_STEP_WORK, {}, {}},
        {"_ZN3gpu19wte_run_sums_kernel", gpu::WTE_RUN_SUMS_WORK, {{0, 2}}, {}},
        {"_ZN3gpu21sum_of_squares_kernelIfE", gpu::sum_of_squares_work<float>(), {{0, 1}}, {}},
        {"_ZN3gpu12adamw_kernelI13__nv_bfloat16jEE", gpu::adamw_work(true), {}, {4}},  // 4: one by one
        {"_Z14convert_kernelI13__nv_bfloat16fjEvPT_PKT0_T1_", convert_work<bf16, float>(), {}, {0, 1}},
        // the GELU passes of the fp32 step (in bf16 the products' epilogues do their work)
        {"_ZN3gpu24bias_gelu_forward_kernelILi4EfjEE", gpu::bias_gelu_forward_work<float>(), {}, {}},
        {"_ZN3gpu28gelu_backward_inplace_kernelILi4EfjEE", gpu::gelu_backward_inplace_work<float>(), {}, {}},
    };
    for (const StepKernel& k : kernels) {
        SCOPED_TRACE(k.entry);
        const PtxFunction f = ptx_function(ptx, k.entry);
        ASSERT_FALSE(f.instructions.empty()) << "not in " << kPtx;
        const std::vector<PtxLoop> loops = ptx_loops(f);
        double trip = 0, rest = (double)f.instructions.size();
        for (const auto& [loop, accesses] : k.trip) {
            ASSERT_LT(loop, loops.size());
            ASSERT_GT(loops[loop].accesses, 0u);
            trip += loops[loop].length * accesses / loops[loop].accesses;
            rest -= loops[loop].length;
        }
        for (size_t loop : k.leftover) {
            ASSERT_LT(loop, loops.size());
            rest -= loops[loop].length;
        }
        const double declared_rest = k.declared.per_row + k.declared.once;
        std::printf("  %-60.60s trip %5.1f (declared %5.1f), rest %4.0f (declared %4.0f)\n", k.entry, trip,
                    k.declared.per_trip, rest, declared_rest);
        EXPECT_NEAR(k.declared.per_trip, trip, 0.2 * trip);
        EXPECT_NEAR(declared_rest, rest, 0.35 * rest);
    }
}

// A kernel's declared block against ptxas: the entry (the instantiation whose registers the
// declaration gives), the declared resources, and the dynamic shared bytes among them.
struct DeclaredBlock {
    const char* entry;
    KernelResources declared;
    size_t dynamic_shared_bytes;
};

// Every kernel that declares the resources of its blocks (but the tensor-core attention kernels,
// checked above at every head size), in each instantiation of the step with its own count:
// the declared registers are ptxas's, and the declared shared bytes less the dynamic ones are
// the kernel's static shared memory in ptxas's report. (agree() checks the threads and the
// dynamic shared memory against each launch.)
TEST(Ptx, DeclaredResourcesAsPtxas) {
    const std::string report = read_file(kPtxas);
    if (report.empty()) GTEST_SKIP() << kPtxas << " not built (no nvcc)";
    const int C = 768;  // d12's channels: the layer norm backward's block depends on them
    const size_t ln_dynamic = gpu::layernorm_backward_shared_bytes(C);
    const DeclaredBlock blocks[] = {
        {"_Z14convert_kernelI13__nv_bfloat16fjE", CONVERT_RESOURCES, 0},
        {"_Z26add_column_partials_kernel", ADD_COLUMN_PARTIALS_RESOURCES, 0},
        {"_ZN3gpu22encoder_forward_kernelILi4EffjEE", gpu::ENCODER_FORWARD_RESOURCES, 0},
        {"_ZN3gpu22encoder_forward_kernelILi4Ef13__nv_bfloat16jEE", gpu::ENCODER_FORWARD_RESOURCES, 0},
        {"_ZN3gpu19wpe_backward_kernelIfE", gpu::WPE_BACKWARD_RESOURCES, 0},
        {"_ZN3gpu23sort_token_tiles_kernel", gpu::sort_tile_resources(gpu::SORT_TILE, true), 0},
        {"_ZN3gpu24merge_token_tiles_kernel", gpu::sort_tile_resources(gpu::SORT_TILE, false), 0},
        {"_ZN3gpu19bitonic_step_kernel", gpu::BITONIC_STEP_RESOURCES, 0},
        {"_ZN3gpu21wte_chunk_sums_kernelIfE", gpu::WTE_CHUNK_SUMS_RESOURCES, 0},
        {"_ZN3gpu19wte_run_sums_kernel", gpu::WTE_RUN_SUMS_RESOURCES, 0},
        {"_ZN3gpu24layernorm_forward_kernelILb0ELi4EffffEE", gpu::layernorm_forward_resources<false, float, float, float>(), 0},
        {"_ZN3gpu24layernorm_forward_kernelILb1ELi4EffffEE", gpu::layernorm_forward_resources<true, float, float, float>(), 0},
        {"_ZN3gpu24layernorm_forward_kernelILb1ELi4Eff13__nv_bfloat16S1_EE",
         gpu::layernorm_forward_resources<true, float, float, bf16>(), 0},
        {"_ZN3gpu24layernorm_forward_kernelILb0ELi4E13__nv_bfloat16ffS1_EE",
         gpu::layernorm_forward_resources<false, bf16, float, float>(), 0},
        {"_ZN3gpu24layernorm_forward_kernelILb1ELi4E13__nv_bfloat16fS1_S1_EE",
         gpu::layernorm_forward_resources<true, bf16, float, bf16>(), 0},
        {"_ZN3gpu25layernorm_backward_kernelILi4EfffffEE", gpu::layernorm_backward_resources<float, float, float>(C),
         ln_dynamic},
        {"_ZN3gpu25layernorm_backward_kernelILi4Ef13__nv_bfloat16fS1_S1_EE",
         gpu::layernorm_backward_resources<float, bf16, float>(C), ln_dynamic},
        {"_ZN3gpu25layernorm_backward_kernelILi8E13__nv_bfloat16S1_S1_S1_S1_EE",
         gpu::layernorm_backward_resources<bf16, bf16, bf16>(C), ln_dynamic},
        {"_ZN3gpu33layernorm_weight_gradients_kernel", gpu::LAYERNORM_WEIGHT_GRADIENTS_RESOURCES, 0},
        {"_ZN3gpu22attention_delta_kernelIfE", gpu::ATTENTION_DELTA_RESOURCES, 0},
        {"_ZN3gpu22attention_delta_kernelI13__nv_bfloat16E", gpu::ATTENTION_DELTA_RESOURCES, 0},
        {"_ZN3gpu24bias_gelu_forward_kernelILi4EfjEE", gpu::gelu_pass_resources<float>(), 0},
        {"_ZN3gpu28gelu_backward_inplace_kernelILi4EfjEE", gpu::gelu_pass_resources<float>(), 0},
        {"_ZN3gpu24bias_gelu_forward_kernelILi8E13__nv_bfloat16jEE", gpu::gelu_pass_resources<bf16>(), 0},
        {"_ZN3gpu28gelu_backward_inplace_kernelILi8E13__nv_bfloat16jEE", gpu::gelu_pass_resources<bf16>(), 0},
        {"_ZN3gpu36crossentropy_forward_backward_kernelILi4EfEE", gpu::crossentropy_forward_backward_resources(0), 0},
        {"_ZN3gpu36crossentropy_forward_backward_kernelILi8E13__nv_bfloat16EE",
         gpu::crossentropy_forward_backward_resources(0), 0},
        {"_ZN3gpu21sum_of_squares_kernelIfEE", gpu::sum_of_squares_resources<float>(), 0},
        {"_ZN3gpu21sum_of_squares_kernelI13__nv_bfloat16EE", gpu::sum_of_squares_resources<bf16>(), 0},
        {"_ZN3gpu12adamw_kernelIfjEE", gpu::ADAMW_RESOURCES, 0},
        {"_ZN3gpu12adamw_kernelI13__nv_bfloat16jEE", gpu::ADAMW_RESOURCES, 0},
    };
    for (const DeclaredBlock& b : blocks) {
        SCOPED_TRACE(b.entry);
        const KernelResources ptxas = ptxas_resources(report, b.entry);
        ASSERT_GT(ptxas.registers_per_thread, 0) << "not in " << kPtxas;
        EXPECT_EQ(b.declared.registers_per_thread, ptxas.registers_per_thread);
        EXPECT_EQ(b.declared.shared_bytes_per_block - (int)b.dynamic_shared_bytes, ptxas.shared_bytes_per_block);
    }
}

// Every launch of a training step (d12's widths at a short T, bf16 and fp32, each placement, every
// kind of product fused) that is not a cuBLAS product, a memset or a copy is a kernel of the
// project, and each declares its warp instructions and the resources of its blocks: none is
// rated by its roofline alone, but for the exact attention kernels (fp32, and head sizes without
// a tensor-core kernel), which are not meant to be fast (docs/cost_model.md, "The cost model"). With
// every kind fused, the plain kinds' kernels (add_bias_kernel, bias_backward_kernel, which declare
// their bytes alone) do not run; the GELU passes, which run in fp32, are checked.
TEST(CostModel, EveryKernelOfTheStepDeclaresItsIssue) {
    ModelConfig cfg;
    ASSERT_TRUE(named_model_size("d12", &cfg));
    const int B = 2, Tn = 64;
    std::vector<int32_t> tokens(B * Tn);
    for (int i = 0; i < B * Tn; i++) tokens[i] = (i * i) % 97;
    for (Placement placement : {Placement::Pre, Placement::Post, Placement::Peri}) {
        cfg.placement = placement;
        for (bool bf16 : {true, false})
            for (const OpTraffic& op : cuda_step_traffic(cfg, B, Tn, bf16, tokens.data(), EVERY_KIND_FUSED))
                for (const Traffic& t : op.launches) {
                    const std::string kernel = t.kernel;
                    if (kernel == "gemm" || kernel == "memset" || kernel == "copy") continue;
                    if (kernel.find("_rows_kernel") != std::string::npos) continue;
                    EXPECT_GT(t.warp_instructions, 0) << op.op << ": " << kernel << (bf16 ? ", bf16" : ", fp32");
                    EXPECT_GT(t.resources.threads_per_block, 0) << op.op << ": " << kernel;
                    EXPECT_GT(t.resources.registers_per_thread, 0) << op.op << ": " << kernel;
                }
    }
}

// ---- the attention kernels before the tensor cores ---------------------------------------------

// The WMMA tile kernels of attention.cuh before FlashAttention-2's tiling replaced them (commit
// 3b8fddc): one warp per block of 16 rows, 16×16 tiles, at head size 64 in bf16. Their costs as
// recorded from that commit's sm_90 PTX and ptxas report (docs/cost_model.md, "The cost model"): per
// 16×16 tile pair, the warp instructions of the tile loop (its inner loops counted as often as
// they run: each load of a 16-row tile is 8 passes of a 96-instruction loop, the softmax loop one
// pass of 635 on 16 lanes, ...), and the shared-memory wavefronts counted by hand from the same
// structure: the 2-byte tile stores (one wavefront each), the forward softmax's 16 lanes reading
// rows of 16 floats (8-way) and storing p (4-way), WMMA's tiles of 16 rows 128 bytes apart read
// as ldmatrix does (8-way: 32 wavefronts a tile) and its fp32 accumulators 256 bytes apart read
// and stored 8 bytes a lane (4-way: 32), the element-wise passes (conflict-free, one wavefront per
// access); 72 registers and 19.6 KiB of shared memory per one-warp block.
struct OldAttentionKernel {
    const char* name;
    double instructions_per_tile_pair, wavefronts_per_tile_pair, products;
    double read_per_row, written_per_row;  // bytes per position at C = 768
};

TEST(CostModel, RatesTheOldAttentionKernelsAtSeveralTimesTheirRoofline) {
    const int B = 16, Tn = 1024, C = 768, NH = 12, hs = C / NH;
    const double tiles = Tn / 16, pairs = (double)B * NH * tiles * (tiles + 1) / 2, n = (double)B * Tn;
    const OldAttentionKernel old[] = {{"forward", 2811, 1170, 2, 3 * C * 2, C * 2 + NH * 4},
                                      {"backward dq", 2545, 1090, 3, 4 * C * 2 + NH * 8, C * 2},
                                      {"backward dk/dv", 2797, 1510, 4, 4 * C * 2 + NH * 8, 2 * C * 2}};
    for (const OldAttentionKernel& k : old) {
        Traffic t{k.name, n * k.read_per_row, n * k.written_per_row, pairs * 6.0 * 256, pairs * k.products * 2.0 * 256 * hs};
        t.warp_instructions = pairs * k.instructions_per_tile_pair;
        t.shared_wavefronts = pairs * k.wavefronts_per_tile_pair;
        t.resources = {32, 72, 20096};
        t.mma_sync = true;
        const ModelledTime m = modelled_time(t, true);
        const double roofline = roofline_seconds(t, true);
        std::printf("  old attention %-15s modelled %.2f ms (issue %.2f, shared %.2f), roofline %.2f ms: %.1f×\n",
                    k.name, m.total * 1e3, m.issue * 1e3, m.shared * 1e3, roofline * 1e3, m.total / roofline);
        EXPECT_GT(m.total, 2.5 * roofline) << k.name;
    }
}

// The comparison can fail: the forward declared as if it read only one of its inputs, the
// forward declared with 15% fewer bytes read, a launch left undeclared, and a conversion whose
// declared block has half the threads launched all disagree.
TYPED_TEST(TrafficTest, WrongDeclarationsDisagree) {
    using T = TypeParam;
    const size_t n = (size_t)N * 4 * C;
    auto f = filled<T>(n);
    auto x_stream = filled<float>(n), out_stream = filled<float>(n);
    const auto launches =
        counted([&] { this->ops->residual_forward(out_stream.data(), x_stream.data(), f.data(), 0.5f, n); });
    Traffic wrong = gpu::residual_forward_traffic<float, T>(n);
    wrong.bytes_read = n * sizeof(T);
    EXPECT_FALSE(agree(wrong, launches));
    Traffic short_read = gpu::residual_forward_traffic<float, T>(n);
    short_read.bytes_read *= 0.85;
    EXPECT_FALSE(agree(short_read, launches));
    EXPECT_FALSE(agree(Launches{}, launches));  // a launch not declared at all
    auto in = filled<float>(n);
    DeviceArray<T> converted(n);
    const auto conversion = counted([&] { this->ops->convert(converted.data(), in.data(), n); });
    Traffic half_block = convert_traffic<T, float>(n);
    half_block.resources.threads_per_block /= 2;
    EXPECT_TRUE(agree(convert_traffic<T, float>(n), conversion));
    EXPECT_FALSE(agree(half_block, conversion));
}

}  // namespace

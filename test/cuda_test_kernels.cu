// Every kernel of the CUDA backend against the CPU reference (cpu_ops.h), in fp32 and in bf16,
// on fresh random inputs (never zeros) at tiny sizes.
//
// Each output is poisoned with NaN bytes before the run, and every element must come back
// finite, i.e. written. Outputs that a backward op adds into (+=) start from random values
// instead, as gradients do, so the accumulation is checked too. The CPU reference runs in fp32
// on exactly the inputs the GPU sees (rounded to bf16 in bf16 mode). Pass: the norm-wise
// relative error ‖gpu − cpu‖/‖cpu‖ is below 1e-5 in fp32 and 1e-2 in bf16.
// Set CUDA_TEST_REPORT=1 to print the error each comparison reached.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <type_traits>
#include <vector>

#include "adamw.cuh"
#include "attention.cuh"
#include "cpu_ops.h"
#include "cuda_common.cuh"
#include "cuda_test_util.h"
#include "encoder.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"
#include "loss.cuh"
#include "residual.cuh"
#include "matmul.cuh"
#include "rng.h"
#include "stats.cuh"

namespace {

// Sizes: small enough for the emulated run, with heads, padding and repeated tokens, and odd on
// purpose: N = 39 rows and N·C = 1872 elements fill no 256-thread block or 8-warp block exactly,
// C = 48 is not a multiple of the 32 lanes of a warp, and the head size is 12, so every kernel's
// tail (the last, partly idle block or warp) is exercised. (cuda_test_model.cu runs the whole
// step at power-of-two sizes.)
constexpr int B = 3, Tn = 13, C = 48, NH = 4, V = 83, Vp = 96, maxT = 20;
constexpr int N = B * Tn;
constexpr cudaStream_t kStream = nullptr;

template <typename T>
double tolerance() {
    return std::is_same<T, float>::value ? 1e-5 : 1e-2;
}

// ---- host data ------------------------------------------------------------------------------

// n samples of offset + scale·N(0, 1).
std::vector<float> random_vector(Rng& rng, size_t n, float scale = 1.0f, float offset = 0.0f) {
    std::vector<float> x(n);
    for (float& v : x) v = offset + scale * (float)rng.normal();
    return x;
}

std::vector<int32_t> random_tokens(Rng& rng, size_t n, int below) {
    std::vector<int32_t> t(n);
    for (int32_t& v : t) v = (int32_t)rng.below(below);
    return t;
}

// x rounded to T's precision, so the CPU reference sees the values the GPU stores.
template <typename T>
std::vector<float> rounded(std::vector<float> x) {
    for (float& v : x) v = to_float(from_float<T>(v));
    return x;
}

// ---- device data ----------------------------------------------------------------------------

template <typename T>
DeviceArray<T> to_device(const std::vector<float>& host) {
    std::vector<T> converted(host.size());
    for (size_t i = 0; i < host.size(); i++) converted[i] = from_float<T>(host[i]);
    DeviceArray<T> d(host.size());
    d.upload(converted.data(), kStream);
    return d;
}

DeviceArray<int32_t> to_device(const std::vector<int32_t>& host) {
    DeviceArray<int32_t> d(host.size());
    d.upload(host.data(), kStream);
    return d;
}

template <typename T>
std::vector<float> to_host(const DeviceArray<T>& d) {
    std::vector<T> raw(d.size());
    d.download(raw.data(), kStream);
    std::vector<float> out(d.size());
    for (size_t i = 0; i < d.size(); i++) out[i] = to_float(raw[i]);
    return out;
}

// An output buffer of n elements filled with 0xff bytes: NaN in fp32 and in bf16.
template <typename T>
DeviceArray<T> poisoned(size_t n) {
    DeviceArray<T> d(n);
    cudaCheck(cudaMemset(d.data(), 0xff, n * sizeof(T)));
    return d;
}

// ---- comparison -----------------------------------------------------------------------------

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
    double diff = 0, ref = 0;
    for (size_t i = 0; i < want.size(); i++) {
        diff += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        ref += (double)want[i] * want[i];
    }
    return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

// Every element written (finite) and the relative error below tol.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    size_t unwritten = 0;
    for (float v : got) unwritten += !std::isfinite(v);
    EXPECT_EQ(unwritten, 0u) << what << ": elements not written (still NaN) or not finite";
    const double err = relative_error(got, want);
    EXPECT_LT(err, tol) << what;
    if (std::getenv("CUDA_TEST_REPORT"))
        std::printf("  %-40s relative error %.2e (tolerance %.0e)\n", what.c_str(), err, tol);
}

template <typename T>
void expect_close(const DeviceArray<T>& got, const std::vector<float>& want, double tol, const std::string& what) {
    expect_close(to_host(got), want, tol, what);
}

// A cuBLAS handle for one test.
struct Cublas {
    cublasHandle_t handle = nullptr;
    Cublas() { cublasCheck(cublasCreate(&handle)); }
    ~Cublas() { cublasDestroy(handle); }
};

// ---- the tests, once per element type ---------------------------------------------------------

template <typename T>
class Kernel : public ::testing::Test {};

struct PrecisionName {
    template <typename T>
    static std::string GetName(int) {
        return precision_name<T>();
    }
};

using Precisions = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(Kernel, Precisions, PrecisionName);

TYPED_TEST(Kernel, EncoderForward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(1);
    const std::vector<int32_t> tokens = random_tokens(rng, N, V);
    const std::vector<float> wte = rounded<T>(random_vector(rng, (size_t)Vp * C));
    const std::vector<float> wpe = rounded<T>(random_vector(rng, (size_t)maxT * C));
    std::vector<float> want((size_t)N * C);
    ::encoder_forward(want.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);

    auto out = poisoned<T>((size_t)N * C);
    gpu::encoder_forward(out.data(), to_device(tokens).data(), to_device<T>(wte).data(), to_device<T>(wpe).data(), B,
                         Tn, C, kStream);
    expect_close(out, want, tolerance<T>(), "encoder out");
}

TYPED_TEST(Kernel, EncoderBackward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(2);
    std::vector<int32_t> tokens = random_tokens(rng, N, V);
    tokens[3] = tokens[N - 1] = tokens[N / 2];  // a token seen three times, across both rows
    const std::vector<float> dout = rounded<T>(random_vector(rng, (size_t)N * C));
    std::vector<float> dwte = random_vector(rng, (size_t)Vp * C), dwpe = random_vector(rng, (size_t)maxT * C);
    auto d_dwte = to_device<float>(dwte), d_dwpe = to_device<float>(dwpe);
    ::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, Tn, C);

    DeviceArray<int32_t> d_tokens(N);
    d_tokens.upload(tokens.data(), kStream);
    gpu::TokenOrder order(N);  // N = 39: the sort pads to 64 keys
    gpu::encoder_backward(d_dwte.data(), d_dwpe.data(), to_device<T>(dout).data(), d_tokens.data(), order, B, Tn, C,
                          kStream);
    expect_close(d_dwte, dwte, tolerance<T>(), "encoder dwte");
    expect_close(d_dwpe, dwpe, tolerance<T>(), "encoder dwpe");

    // The device sort: every position once, by token and then by position, padding last.
    std::vector<unsigned long long> keys(order.padded), want(order.padded, ~0ull);
    order.keys.download(keys.data(), kStream);
    for (int i = 0; i < N; i++) want[i] = (unsigned long long)tokens[i] << 32 | (unsigned)i;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(keys, want);
}

// LayerNorm inputs: spread 1.5 around 0.3, and spread 1e-3 around 0 (variance 1e-6, below
// ε = 1e-5, so that ε matters at first order: a kernel with another ε, or ε outside the square
// root, fails). The small spread is centred on 0: around 0.3, x − mean would lose digits to
// cancellation in float, and the two sides would differ by that rounding, not by a bug.
struct LayerNormInputs {
    float spread, offset;
};
constexpr LayerNormInputs kLayerNormInputs[] = {{1.5f, 0.3f}, {1e-3f, 0.0f}};

TYPED_TEST(Kernel, LayerNormForward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(3);
    for (const LayerNormInputs& in : kLayerNormInputs) {
        SCOPED_TRACE("input spread " + std::to_string(in.spread));
        const std::vector<float> x = rounded<T>(random_vector(rng, (size_t)N * C, in.spread, in.offset));
        const std::vector<float> w = rounded<T>(random_vector(rng, C, 0.2f, 1.0f));
        const std::vector<float> b = rounded<T>(random_vector(rng, C, 0.2f));
        std::vector<float> want((size_t)N * C), want_mean(N), want_rstd(N);
        ::layernorm_forward(want.data(), want_mean.data(), want_rstd.data(), x.data(), w.data(), b.data(), N, C);

        auto out = poisoned<T>((size_t)N * C);
        auto mean = poisoned<float>(N), rstd = poisoned<float>(N);
        gpu::layernorm_forward(out.data(), mean.data(), rstd.data(), to_device<T>(x).data(), to_device<T>(w).data(),
                               to_device<T>(b).data(), N, C, kStream);
        expect_close(out, want, tolerance<T>(), "layernorm out");
        expect_close(mean, want_mean, tolerance<T>(), "layernorm mean");
        expect_close(rstd, want_rstd, tolerance<T>(), "layernorm rstd");
    }
}

TYPED_TEST(Kernel, LayerNormBackward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(4);
    for (const LayerNormInputs& in : kLayerNormInputs) {
        SCOPED_TRACE("input spread " + std::to_string(in.spread));
        const std::vector<float> x = rounded<T>(random_vector(rng, (size_t)N * C, in.spread, in.offset));
        const std::vector<float> w = rounded<T>(random_vector(rng, C, 0.2f, 1.0f));
        const std::vector<float> b = rounded<T>(random_vector(rng, C, 0.2f));
        const std::vector<float> dout = rounded<T>(random_vector(rng, (size_t)N * C));
        std::vector<float> y((size_t)N * C), mean(N), rstd(N);
        ::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
        // dinp added into random values, or written over NaN (GradOut::Write: not read).
        for (GradOut mode : {GradOut::Add, GradOut::Write}) {
            const bool add = mode == GradOut::Add;
            SCOPED_TRACE(add ? "add" : "write");
            std::vector<float> dinp = rounded<T>(random_vector(rng, (size_t)N * C));
            std::vector<float> dw = random_vector(rng, C), db = random_vector(rng, C);
            auto d_dinp = add ? to_device<T>(dinp) : poisoned<T>((size_t)N * C);
            auto d_dw = to_device<float>(dw), d_db = to_device<float>(db);
            ::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                                 rstd.data(), N, C, mode);

            DeviceArray<float> partial((size_t)MAX_ROW_CHUNKS * 2 * C);
            gpu::layernorm_backward(d_dinp.data(), d_dw.data(), d_db.data(), to_device<T>(dout).data(),
                                    to_device<T>(x).data(), to_device<T>(w).data(), to_device<float>(mean).data(),
                                    to_device<float>(rstd).data(), N, C, partial.data(), kStream, mode);
            expect_close(d_dinp, dinp, tolerance<T>(), "layernorm dinp");
            expect_close(d_dw, dw, tolerance<T>(), "layernorm dw");
            expect_close(d_db, db, tolerance<T>(), "layernorm db");
        }
    }
}

// host on the device, `shift` elements past the start of an allocation of shift + n
// (shift 1 misaligns the buffer for every pack); and back, without the shift.
template <typename U>
DeviceArray<U> to_device_shifted(const std::vector<float>& host, int shift) {
    std::vector<float> padded(shift, 0.0f);
    padded.insert(padded.end(), host.begin(), host.end());
    return to_device<U>(padded);
}
template <typename U>
std::vector<float> to_host_shifted(const DeviceArray<U>& d, int shift) {
    const std::vector<float> all = to_host(d);
    return std::vector<float>(all.begin() + shift, all.end());
}

// The packed path of residual.cuh runs only where every buffer is aligned to its pack: 16 bytes
// for the stream's fp32 pointers, 4 elements' worth for the module's (8 bytes in bf16).
TEST(ResidualPacks, AlignmentDecidesThePath) {
    alignas(16) static float s[8];
    alignas(16) static bf16 f[8];
    EXPECT_EQ((gpu::residual_pack_size<float, bf16>()), 4);
    EXPECT_EQ((gpu::residual_pack_size<float, float>()), 4);
    EXPECT_TRUE((gpu::residual_aligned<float, bf16>({s, s + 4}, {f, f + 4})));
    EXPECT_FALSE((gpu::residual_aligned<float, bf16>({s, s + 1}, {f})));
    EXPECT_FALSE((gpu::residual_aligned<float, bf16>({s}, {f + 2})));
    EXPECT_TRUE(gpu::residual_index32((size_t(1) << 31) - 1));
    EXPECT_FALSE(gpu::residual_index32(size_t(1) << 31));
}

// As the model calls them: the stream (x, out, dout) fp32, the module's f and df in T. At n a
// multiple of the pack (every pack whole), n − 3 (the last thread's pack partial), and with the
// stream's buffers, or only f and df, one element off alignment (one thread per element).
TYPED_TEST(Kernel, ResidualForwardAndBackward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(5);
    const float dt = 0.1f;
    struct Case {
        size_t n;
        int stream_shift, f_shift;
    };
    const size_t nc = (size_t)N * C;
    for (const Case& k : {Case{nc, 0, 0}, Case{nc - 3, 0, 0}, Case{nc - 3, 1, 1}, Case{nc, 0, 1}}) {
        SCOPED_TRACE("n = " + std::to_string(k.n) + ", shifts " + std::to_string(k.stream_shift) + " and " +
                     std::to_string(k.f_shift));
        const size_t n = k.n;
        const int ss = k.stream_shift, fs = k.f_shift;
        const std::vector<float> x = random_vector(rng, n), f = rounded<T>(random_vector(rng, n));
        const std::vector<float> dout = random_vector(rng, n);
        std::vector<float> want(n);
        ::residual_forward(want.data(), x.data(), f.data(), dt, n);
        auto out = poisoned<float>(ss + n);
        gpu::residual_forward(out.data() + ss, to_device_shifted<float>(x, ss).data() + ss,
                              to_device_shifted<T>(f, fs).data() + fs, dt, n, kStream);
        expect_close(to_host_shifted(out, ss), want, tolerance<float>(), "residual out");

        // Adding into random gradients, and writing over NaN (GradOut::Write: nothing read).
        for (GradOut mode : {GradOut::Add, GradOut::Write}) {
            const bool add = mode == GradOut::Add;
            SCOPED_TRACE(add ? "add" : "write");
            std::vector<float> df = rounded<T>(random_vector(rng, n));
            auto d_df = add ? to_device_shifted<T>(df, fs) : poisoned<T>(fs + n);
            ::residual_backward(df.data(), dout.data(), dt, n, mode);
            gpu::residual_backward(d_df.data() + fs, to_device_shifted<float>(dout, ss).data() + ss, dt, n, kStream,
                                   mode);
            expect_close(to_host_shifted(d_df, fs), df, tolerance<T>(), "residual df");
        }
    }
}

TYPED_TEST(Kernel, MatmulForward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(6);
    const int IC = C, OC = 3 * C;
    const std::vector<float> inp = rounded<T>(random_vector(rng, (size_t)N * IC));
    const std::vector<float> w = rounded<T>(random_vector(rng, (size_t)OC * IC, 0.1f));
    const std::vector<float> bias = rounded<T>(random_vector(rng, OC));
    Cublas cublas;
    for (bool with_bias : {true, false}) {
        std::vector<float> want((size_t)N * OC);
        ::matmul_forward(want.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, IC, OC);
        auto out = poisoned<T>((size_t)N * OC);
        auto d_bias = to_device<T>(bias);
        gpu::matmul_forward(cublas.handle, out.data(), to_device<T>(inp).data(), to_device<T>(w).data(),
                            with_bias ? d_bias.data() : nullptr, N, IC, OC, kStream);
        expect_close(out, want, tolerance<T>(), with_bias ? "matmul out (bias)" : "matmul out (no bias)");
    }
}

TYPED_TEST(Kernel, MatmulBackward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(7);
    const int IC = 4 * C, OC = C;
    const std::vector<float> inp = rounded<T>(random_vector(rng, (size_t)N * IC));
    const std::vector<float> w = rounded<T>(random_vector(rng, (size_t)OC * IC, 0.1f));
    const std::vector<float> dout = rounded<T>(random_vector(rng, (size_t)N * OC));
    Cublas cublas;
    DeviceArray<float> partial((size_t)MAX_ROW_CHUNKS * OC);
    // dinp added into random values, or written over NaN (GradOut::Write: beta = 0, not read);
    // the weight gradients add in both.
    for (GradOut mode : {GradOut::Add, GradOut::Write}) {
        const bool add = mode == GradOut::Add;
        SCOPED_TRACE(add ? "add" : "write");
        std::vector<float> dinp = rounded<T>(random_vector(rng, (size_t)N * IC));
        std::vector<float> dw = random_vector(rng, (size_t)OC * IC), dbias = random_vector(rng, OC);
        auto d_dinp = add ? to_device<T>(dinp) : poisoned<T>((size_t)N * IC);
        auto d_dw = to_device<float>(dw), d_dbias = to_device<float>(dbias);
        ::matmul_backward(dinp.data(), dw.data(), dbias.data(), dout.data(), inp.data(), w.data(), N, IC, OC, mode);
        gpu::matmul_backward(cublas.handle, d_dinp.data(), d_dw.data(), d_dbias.data(), to_device<T>(dout).data(),
                             to_device<T>(inp).data(), to_device<T>(w).data(), N, IC, OC, partial.data(), kStream,
                             mode);
        expect_close(d_dinp, dinp, tolerance<T>(), "matmul dinp");
        expect_close(d_dw, dw, tolerance<T>(), "matmul dw");
        expect_close(d_dbias, dbias, tolerance<T>(), "matmul dbias");
    }
}

// Attention shapes (B, T, C, NH): T = 1, 17 and 33 leave the last 16-row tile partly or mostly
// empty, head sizes 12 (padded to one 16-wide tile) and 64 (four tiles), several heads and
// sequences so that head and batch offsets into qkv are exercised.
struct AttentionShape {
    int B, Tn, C, NH;
};
constexpr AttentionShape kAttentionShapes[] = {{2, 1, 24, 2}, {2, 17, 48, 4}, {1, 33, 24, 2}, {1, 17, 64, 1},
                                               {2, 33, 128, 2}};

std::string describe(const AttentionShape& s) {
    return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.Tn) + " hs=" + std::to_string(s.C / s.NH) +
           " NH=" + std::to_string(s.NH);
}

TYPED_TEST(Kernel, AttentionForward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    for (const AttentionShape& s : kAttentionShapes) {
        SCOPED_TRACE(describe(s));
        Rng rng(8);
        const size_t rows = (size_t)s.B * s.Tn;
        const std::vector<float> qkv = rounded<T>(random_vector(rng, rows * 3 * s.C));
        std::vector<float> want(rows * s.C), att((size_t)s.B * s.NH * s.Tn * s.Tn);
        ::attention_forward(want.data(), att.data(), qkv.data(), s.B, s.Tn, s.C, s.NH);
        // The log-sum-exp the backward needs, from the reference's scores in double.
        std::vector<float> want_lse(gpu::attention_saved_size(s.B, s.Tn, s.NH));
        const int hs = s.C / s.NH;
        for (int b = 0; b < s.B; b++)
            for (int h = 0; h < s.NH; h++)
                for (int t = 0; t < s.Tn; t++) {
                    double sum = 0;
                    for (int t2 = 0; t2 <= t; t2++) {
                        double dot = 0;
                        for (int i = 0; i < hs; i++)
                            dot += (double)qkv[((size_t)b * s.Tn + t) * 3 * s.C + h * hs + i] *
                                   qkv[((size_t)b * s.Tn + t2) * 3 * s.C + s.C + h * hs + i];
                        sum += std::exp(dot / std::sqrt((double)hs));
                    }
                    want_lse[((size_t)b * s.NH + h) * s.Tn + t] = (float)std::log(sum);
                }

        auto out = poisoned<T>(want.size());
        auto lse = poisoned<float>(want_lse.size());
        gpu::attention_forward(out.data(), lse.data(), to_device<T>(qkv).data(), s.B, s.Tn, s.C, s.NH, kStream);
        expect_close(out, want, tolerance<T>(), "attention out, " + describe(s));
        expect_close(lse, want_lse, tolerance<T>(), "attention lse, " + describe(s));
    }
}

TYPED_TEST(Kernel, AttentionBackward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    for (const AttentionShape& s : kAttentionShapes) {
        SCOPED_TRACE(describe(s));
        Rng rng(9);
        const size_t rows = (size_t)s.B * s.Tn;
        const std::vector<float> qkv = rounded<T>(random_vector(rng, rows * 3 * s.C));
        const std::vector<float> dout = rounded<T>(random_vector(rng, rows * s.C));
        std::vector<float> dqkv = rounded<T>(random_vector(rng, rows * 3 * s.C));
        auto d_dqkv = to_device<T>(dqkv);
        auto d_qkv = to_device<T>(qkv);
        std::vector<float> out(rows * s.C), att((size_t)s.B * s.NH * s.Tn * s.Tn);
        ::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.Tn, s.C, s.NH);
        ::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.Tn, s.C, s.NH);

        // The backward reads what the forward kernel saved and wrote.
        const size_t saved = gpu::attention_saved_size(s.B, s.Tn, s.NH);
        DeviceArray<T> d_out(rows * s.C);
        DeviceArray<float> lse(saved);
        auto delta = poisoned<float>(saved);
        gpu::attention_forward(d_out.data(), lse.data(), d_qkv.data(), s.B, s.Tn, s.C, s.NH, kStream);
        gpu::attention_backward(d_dqkv.data(), to_device<T>(dout).data(), d_qkv.data(), d_out.data(), lse.data(),
                                delta.data(), s.B, s.Tn, s.C, s.NH, kStream);
        expect_close(d_dqkv, dqkv, tolerance<T>(), "attention dqkv, " + describe(s));
        // The gradient alone (from zero), whose error the random start above would dilute.
        std::vector<float> grad(rows * 3 * s.C, 0.0f);
        ::attention_backward(grad.data(), dout.data(), qkv.data(), att.data(), s.B, s.Tn, s.C, s.NH);
        auto d_grad = to_device<T>(std::vector<float>(grad.size(), 0.0f));
        gpu::attention_backward(d_grad.data(), to_device<T>(dout).data(), d_qkv.data(), d_out.data(), lse.data(),
                                delta.data(), s.B, s.Tn, s.C, s.NH, kStream);
        expect_close(d_grad, grad, tolerance<T>(), "attention dqkv from zero, " + describe(s));
    }
}

// The backward on the elements [offset, offset + count) of buffers of N·4C = 7488: all in
// 16-byte packs; a count that leaves a partial pack at the end; buffers one element off
// 16-byte alignment, which take the element-by-element path. Elements outside are untouched.
TYPED_TEST(Kernel, GeluBackward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(10);
    const size_t n = (size_t)N * 4 * C;
    const std::vector<float> x = rounded<T>(random_vector(rng, n, 2.0f));
    const std::vector<float> dout = rounded<T>(random_vector(rng, n));
    // Adding into random values, or writing over NaN in the range (GradOut::Write: not read);
    // outside the range dinp keeps its values.
    for (GradOut mode : {GradOut::Add, GradOut::Write})
        for (auto [offset, count] : {std::pair<size_t, size_t>{0, n}, {0, n - 3}, {1, n - 1}}) {
            SCOPED_TRACE(std::string(mode == GradOut::Add ? "add" : "write") + ", elements " +
                         std::to_string(offset) + " + " + std::to_string(count));
            std::vector<float> dinp = rounded<T>(random_vector(rng, n)), before = dinp;
            if (mode == GradOut::Write) std::fill(before.begin() + offset, before.begin() + offset + count, NAN);
            auto d_dinp = to_device<T>(before), d_dout = to_device<T>(dout), d_x = to_device<T>(x);
            ::gelu_backward(dinp.data() + offset, dout.data() + offset, x.data() + offset, count, mode);
            gpu::gelu_backward(d_dinp.data() + offset, d_dout.data() + offset, d_x.data() + offset, count, kStream,
                               mode);
            expect_close(d_dinp, dinp, tolerance<T>(), "gelu dinp");
        }
}

// The MLP's fc layer with its GELU fused in: pre = inp·wᵀ + bias and GELU(pre), against the
// reference's matmul then GELU (OC = 4C; N·OC = 7488 elements fill no block exactly).
TYPED_TEST(Kernel, MatmulBiasGeluForward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(11);
    const int IC = C, OC = 4 * C;
    const std::vector<float> inp = rounded<T>(random_vector(rng, (size_t)N * IC));
    const std::vector<float> w = rounded<T>(random_vector(rng, (size_t)OC * IC, 0.2f));
    const std::vector<float> bias = rounded<T>(random_vector(rng, OC));
    std::vector<float> want_pre((size_t)N * OC), want_out((size_t)N * OC);
    ::matmul_forward(want_pre.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
    ::gelu_forward(want_out.data(), want_pre.data(), want_pre.size());
    Cublas cublas;
    auto pre = poisoned<T>((size_t)N * OC), out = poisoned<T>((size_t)N * OC);
    gpu::matmul_bias_gelu_forward(cublas.handle, out.data(), pre.data(), to_device<T>(inp).data(),
                                  to_device<T>(w).data(), to_device<T>(bias).data(), N, IC, OC, kStream);
    expect_close(pre, want_pre, tolerance<T>(), "fc pre-activation");
    expect_close(out, want_out, tolerance<T>(), "fc GELU");
}

TYPED_TEST(Kernel, CrossEntropyForwardAndBackward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(11);
    const std::vector<float> logits = rounded<T>(random_vector(rng, (size_t)N * Vp, 2.0f));
    const std::vector<int32_t> targets = random_tokens(rng, N, V);
    const float dloss = 0.37f / N;
    std::vector<float> want_losses(N), want_dlogits = logits;
    ::crossentropy_forward(want_losses.data(), logits.data(), targets.data(), N, V, Vp);
    ::crossentropy_backward_inplace(want_dlogits.data(), targets.data(), dloss, N, V, Vp);

    auto d_logits = to_device<T>(logits);
    auto d_targets = to_device(targets);
    auto losses = poisoned<float>(N), lse = poisoned<float>(N);
    gpu::crossentropy_forward(losses.data(), lse.data(), d_logits.data(), d_targets.data(), N, V, Vp, kStream);
    expect_close(losses, want_losses, tolerance<T>(), "crossentropy losses");
    gpu::crossentropy_backward_inplace(d_logits.data(), lse.data(), d_targets.data(), dloss, N, V, Vp, kStream);
    expect_close(d_logits, want_dlogits, tolerance<T>(), "crossentropy dlogits");
}

// Two gradient sizes: 0.01 (√v̂ ≫ ε) and 1e-8 (√v̂ about ε, where ε's place in m̂/(√v̂ + ε)
// decides the update). The update itself (new − old parameters) is compared too, relative to
// its own size: against parameters of size 1 a wrong update of size lr would hide.
TYPED_TEST(Kernel, AdamW) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(12);
    // Three segments (decay, an empty one, no decay, decay) and one launch over the range
    // [lo, hi), which starts and ends inside segments: elements outside it stay as they were.
    const size_t n = 1003, lo = 150, hi = 950;
    gpu::AdamWTable table;
    table.count = 4;
    const unsigned long long ends[] = {400, 400, 700, n};
    const bool decays[] = {true, true, false, true};
    for (int k = 0; k < 4; k++) table.end[k] = ends[k], table.decays[k] = decays[k];
    for (float grad_size : {0.01f, 1e-8f}) {
        SCOPED_TRACE("gradients of size " + std::to_string(grad_size));
        const std::vector<float> params0 = random_vector(rng, n), grads = random_vector(rng, n, grad_size);
        std::vector<float> params = params0, m = random_vector(rng, n, 0.1f * grad_size),
                           v = random_vector(rng, n, 0.01f * grad_size);
        for (float& x : v) x *= x;  // second moments are squares
        // The moments of [lo, hi) only, as a ZeRO-1 rank keeps them.
        const auto in_range = [&](const std::vector<float>& x) {
            return std::vector<float>(x.begin() + lo, x.begin() + hi);
        };
        auto d_params = to_device<float>(params), d_m = to_device<float>(in_range(m)), d_v = to_device<float>(in_range(v));
        const AdamWHyper h{1e-3, 0.9, 0.95, 1e-8, 0.1};
        const int t = 3;
        const double grad_scale = 0.7;
        size_t begin = 0;
        for (int k = 0; k < 4; begin = ends[k++]) {  // the reference, segment by segment, clipped to [lo, hi)
            const size_t from = std::max(begin, lo), to = std::min<size_t>(ends[k], hi);
            AdamWHyper hk = h;
            if (!decays[k]) hk.weight_decay = 0;
            if (from < to)
                ::adamw_update(params.data() + from, grads.data() + from, m.data() + from, v.data() + from, to - from,
                               hk, t, grad_scale);
        }

        // bf16 mode refreshes the bf16 copy of the weights; fp32 mode has none.
        const bool has_copy = !std::is_same<T, float>::value;
        auto copy = to_device<T>(params0);
        gpu::adamw_update(d_params.data(), has_copy ? copy.data() : nullptr, to_device<float>(grads).data(), d_m.data(),
                          d_v.data(), table, lo, hi, h, t, grad_scale, kStream);
        const std::vector<float> got = to_host(d_params);
        for (size_t i : {size_t{0}, lo - 1, hi, n - 1}) EXPECT_EQ(got[i], params0[i]) << "outside [lo, hi): " << i;
        expect_close(d_params, params, 1e-5, "adamw params");
        expect_close(d_m, in_range(m), 1e-5, "adamw m");
        expect_close(d_v, in_range(v), 1e-5, "adamw v");
        std::vector<float> got_update = to_host(d_params), want_update = params;
        for (size_t i = 0; i < n; i++) {
            got_update[i] -= params0[i];
            want_update[i] -= params0[i];
        }
        expect_close(got_update, want_update, 1e-3, "adamw update");
        if (has_copy) expect_close(copy, rounded<T>(params), tolerance<T>(), "adamw bf16 copy");
    }
}

TYPED_TEST(Kernel, SumOfSquares) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(13);
    const size_t n = 100003;  // not a multiple of any block size
    const std::vector<float> x = rounded<T>(random_vector(rng, n, 0.5f, 0.1f));
    DeviceArray<float> partial(gpu::SUMSQ_MAX_BLOCKS);
    const double got = gpu::sum_of_squares(to_device<T>(x).data(), n, partial.data(), kStream);
    expect_close({(float)got}, {(float)::sum_of_squares(x.data(), n)}, tolerance<T>(), "sum of squares");
}

TYPED_TEST(Kernel, StreamStatistics) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(14);
    std::vector<float> x = random_vector(rng, (size_t)N * C, 1.3f);
    const std::vector<float> column_offset = random_vector(rng, C, 2.0f);
    for (size_t i = 0; i < x.size(); i++) x[i] += column_offset[i % C];  // data_var ≠ entry_var
    x = rounded<T>(x);
    const StreamStats want = ::stream_statistics(x.data(), N, C);

    DeviceArray<float> scratch(gpu::stream_statistics_scratch(N, C));
    const StreamStats got = gpu::stream_statistics(to_device<T>(x).data(), N, C, scratch.data(), kStream);
    expect_close({(float)got.mean_abs}, {(float)want.mean_abs}, tolerance<T>(), "stats mean_abs");
    expect_close({(float)got.entry_var}, {(float)want.entry_var}, tolerance<T>(), "stats entry_var");
    expect_close({(float)got.data_var}, {(float)want.data_var}, tolerance<T>(), "stats data_var");
}

TYPED_TEST(Kernel, Convert) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(15);
    const size_t n = 777;
    const std::vector<float> x = random_vector(rng, n);
    auto out = poisoned<T>(n);
    convert(out.data(), to_device<float>(x).data(), n, kStream);
    const std::vector<float> got = to_host(out), want = rounded<T>(x);
    size_t mismatches = 0;
    for (size_t i = 0; i < n; i++) mismatches += got[i] != want[i];
    EXPECT_EQ(mismatches, 0u) << "convert rounds like the host conversion";
}

}  // namespace

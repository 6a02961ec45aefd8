// Every op of the CUDA op set (cuda_ops.cuh), and so every kernel it launches, against the CPU
// reference (cpu_ops.h), in fp32 and in bf16, on fresh random inputs (never zeros) at tiny sizes,
// called as the model calls it.
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
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <type_traits>
#include <vector>

#include "adamw.cuh"
#include "attention.cuh"
#include "cpu_ops.h"
#include "cuda/cuda_common.cuh"
#include "cuda_ops.cuh"
#include "cuda_test_util.h"
#include "encoder.cuh"
#include "gelu.cuh"
#include "bench/kernel_costs.h"  // gpu::token_runs
#include "layernorm.cuh"
#include "loss.cuh"
#include "residual.cuh"
#include "matmul.cuh"
#include "util/rng.h"
#include "stats.cuh"

namespace {

// Sizes: small enough for the emulated run, with heads, padding and repeated tokens, and odd on
// purpose: N = 39 rows and N·C = 1872 elements fill no 256-thread block or 8-warp block exactly,
// C = 48 is not a multiple of the 32 lanes of a warp, and the head size is 12, so every kernel's
// tail (the last, partly idle block or warp) is exercised. (cuda_test_model.cu runs the whole
// step at power-of-two sizes.)
constexpr int B = 3, Tn = 13, C = 48, V = 83, Vp = 96, maxT = 20;
constexpr int N = B * Tn;
constexpr cudaStream_t kStream = nullptr;

// The CUDA ops (cuda_ops.cuh) of a model of C channels for up to 200 positions: the matrix
// products are tested as the model calls them, through the ops, whose scratch fits every product
// below (OC ≤ 4C).
ModelConfig ops_config() {
    ModelConfig cfg;
    cfg.maxT = 200, cfg.V = V, cfg.Vp = Vp, cfg.L = 1, cfg.NH = 4, cfg.C = C;
    return cfg;
}
constexpr int kOpsRows = 200;

// The same model with C channels and NH heads: CudaOps for (B, T) of it holds the scratch of a
// test's shapes (the embedding's sort, LayerNorm's column sums, attention's row sums).
ModelConfig config_of(int channels, int heads = 1) {
    ModelConfig cfg = ops_config();
    cfg.C = channels, cfg.NH = heads;
    return cfg;
}

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

// A device copy of `host` that begins `shift` elements into its allocation (shift = 1 breaks
// the alignment of every pack), with zeros before it.
template <typename T>
DeviceArray<T> to_device_shifted(const std::vector<float>& host, size_t shift) {
    std::vector<float> padded(shift, 0.0f);
    padded.insert(padded.end(), host.begin(), host.end());
    return to_device<T>(padded);
}

// A device array's values past its first `shift` elements (undoes to_device_shifted).
template <typename U>
std::vector<float> to_host_shifted(const DeviceArray<U>& d, size_t shift) {
    const std::vector<float> all = to_host(d);
    return std::vector<float>(all.begin() + shift, all.end());
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

// As the model calls it (out the fp32 stream, packs of 4: 16-byte stores) at C = 48 (a multiple
// of the pack) and 50 (not: single elements), with every buffer aligned and with out, wte or
// wpe one element off (single elements): exactly the CPU's sums, whichever path ran.
TYPED_TEST(Kernel, EncoderForward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    CudaOps<T> ops(ops_config(), B, Tn);
    Rng rng(1);
    const std::vector<int32_t> tokens = random_tokens(rng, N, V);
    auto d_tokens = to_device(tokens);
    struct Shifts {
        size_t out, wte, wpe;
    };
    for (int width : {C, 50}) {
        const std::vector<float> wte = rounded<T>(random_vector(rng, (size_t)Vp * width));
        const std::vector<float> wpe = rounded<T>(random_vector(rng, (size_t)maxT * width));
        std::vector<float> want((size_t)N * width);
        ::encoder_forward(want.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, width);
        for (const Shifts& s : {Shifts{0, 0, 0}, Shifts{1, 0, 0}, Shifts{0, 1, 0}, Shifts{0, 0, 1}}) {
            SCOPED_TRACE("C = " + std::to_string(width) + ", shifts " + std::to_string(s.out) + ", " +
                         std::to_string(s.wte) + ", " + std::to_string(s.wpe));
            auto out = poisoned<float>(s.out + want.size());
            ops.encoder_forward(out.data() + s.out, d_tokens.data(), to_device_shifted<T>(wte, s.wte).data() + s.wte,
                                to_device_shifted<T>(wpe, s.wpe).data() + s.wpe, B, Tn, width);
            EXPECT_EQ(to_host_shifted(out, s.out), want) << "encoder out (fp32) is not wte + wpe";
        }
    }
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
    CudaOps<T> ops(ops_config(), B, Tn);  // N = 39: the sort pads to 64 keys
    ops.encoder_backward(d_dwte.data(), d_dwpe.data(), to_device<float>(dout).data(), d_tokens.data(), B, Tn, C);
    expect_close(d_dwte, dwte, tolerance<T>(), "encoder dwte");
    expect_close(d_dwpe, dwpe, tolerance<T>(), "encoder dwpe");

    // The device sort: every position once, by token and then by position, padding last.
    const gpu::TokenOrder& order = ops.token_order;
    std::vector<unsigned long long> keys(order.padded), want(order.padded, ~0ull);
    order.keys.download(keys.data(), kStream);
    for (int i = 0; i < N; i++) want[i] = (unsigned long long)tokens[i] << 32 | (unsigned)i;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(keys, want);
}

// The wte gradient where tokens repeat as in real text: two tokens fill 60% and 20% of 800
// positions, so their runs of sorted positions cross many chunks of WTE_CHUNK (whole chunks
// among them), with rare tokens in between; C = 300 needs two blocks of channels, the second
// partly idle. Against the reference, fp32 within rounding (the sums are in another order).
TYPED_TEST(Kernel, EncoderBackwardLongRuns) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    const int b = 2, t = 400, n = b * t, c = 300, v = 50;
    Rng rng(21);
    std::vector<int32_t> tokens(n);
    for (int32_t& token : tokens) {
        const double u = rng.uniform();
        token = u < 0.6 ? 7 : u < 0.8 ? 3 : (int32_t)rng.below(v);
    }
    const std::vector<float> dout = rounded<T>(random_vector(rng, (size_t)n * c));
    std::vector<float> dwte = random_vector(rng, (size_t)v * c), dwpe = random_vector(rng, (size_t)t * c);
    auto d_dwte = to_device<float>(dwte), d_dwpe = to_device<float>(dwpe);
    ::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), b, t, c);
    CudaOps<T> ops(config_of(c), b, t);
    ops.encoder_backward(d_dwte.data(), d_dwpe.data(), to_device<float>(dout).data(), to_device(tokens).data(), b, t, c);
    const gpu::TokenRuns runs = gpu::token_runs(tokens.data(), n);
    EXPECT_GT(runs.crossing, 1);
    EXPECT_GT(runs.heads, 20);  // token 7 alone reaches 15 chunks or more
    expect_close(d_dwte, dwte, tolerance<T>(), "encoder dwte, long runs");
    expect_close(d_dwpe, dwpe, tolerance<T>(), "encoder dwpe, long runs");
}

// The device sort of the embedding backward, against std::sort of the same keys, for
// N = 1 (2 keys), odd N whose padding stays in one tile (39) or spans several (5001: 8192 keys,
// four tiles of SORT_TILE), and N a power of two below the tile (1024), equal to it (2048) and
// above it (4096). Tokens from a small vocabulary (long runs of equal tokens) and from one
// of GPT-2's size (a token's high bits matter). Not per element type: keys are integers.
TEST(TokenSort, MatchesStdSort) {
    REQUIRE_CUDA_DEVICE();
    Rng rng(17);
    for (int count : {1, 39, 1024, 2048, 4096, 5001})
        for (int vocabulary : {7, 50257}) {
            SCOPED_TRACE("N = " + std::to_string(count) + ", tokens below " + std::to_string(vocabulary));
            const std::vector<int32_t> tokens = random_tokens(rng, count, vocabulary);
            CudaOps<float> ops(config_of(1), 1, count);  // one channel: the sums do not matter here
            auto dwte = to_device<float>(std::vector<float>(vocabulary)), dwpe = to_device<float>(std::vector<float>(count));
            auto dout = to_device<float>(std::vector<float>(count));
            ops.encoder_backward(dwte.data(), dwpe.data(), dout.data(), to_device(tokens).data(), 1, count, 1);
            const gpu::TokenOrder& order = ops.token_order;
            std::vector<unsigned long long> keys(order.padded), want(order.padded, ~0ull);
            order.keys.download(keys.data(), kStream);
            for (int i = 0; i < count; i++) want[i] = (unsigned long long)tokens[i] << 32 | (unsigned)i;
            std::sort(want.begin(), want.end());
            EXPECT_EQ(keys, want);
        }
}

// LayerNorm inputs: spread 1.5 around 0.3, and spread 1e-3 around 0 (variance 1e-6, below
// ε = 1e-5, so that ε matters at first order: a kernel with another ε, or ε outside the square
// root, fails). The small spread is centred on 0: around 0.3, x − mean would lose digits to
// cancellation in float, and the two sides would differ by that rounding, not by a bug.
struct LayerNormInputs {
    float spread, offset;
};
constexpr LayerNormInputs kLayerNormInputs[] = {{1.5f, 0.3f}, {1e-3f, 0.0f}};

// LayerNorm shapes (N rows, C channels). The kernels move packs of 4 elements (8 when every
// tensor is bf16) where C and the pointers allow, else single elements: C = 48 and 264 are
// multiples of both packs, 44 of 4 only, 50 of neither. N = 39 leaves the last 8-warp block of
// the forward part idle and cuts the backward's rows into 3 chunks; 300 × 264 gives each lane
// several packs per row (the last one partial) and the backward 19 uneven chunks; 2 × 3 is less
// than one pack per lane; 5 × 1600 is d48's width, whose backward needs more than the default
// 48 KiB of shared memory.
struct LayerNormShape {
    int N, C;
};
constexpr LayerNormShape kLayerNormShapes[] = {{39, 48}, {39, 44}, {39, 50}, {300, 264}, {2, 3}, {5, 1600}};

std::string shape_name(const LayerNormShape& shape) {
    return "N = " + std::to_string(shape.N) + ", C = " + std::to_string(shape.C);
}

// Bit patterns of a device array past its first `shift` elements, to compare two kernels'
// results exactly.
template <typename T>
std::vector<uint16_t> bits_of(const DeviceArray<T>& d, size_t shift = 0) {
    std::vector<uint16_t> bits(d.size() * sizeof(T) / sizeof(uint16_t));
    d.download(reinterpret_cast<T*>(bits.data()), kStream);
    bits.erase(bits.begin(), bits.begin() + shift * sizeof(T) / sizeof(uint16_t));
    return bits;
}

// CudaOps whose LayerNorm scratch fits every shape above (C up to 1600).
template <typename T>
CudaOps<T> layernorm_ops() {
    return CudaOps<T>(config_of(1600), 1, 1);
}

// The forward of one shape against the CPU: input x of type X shifted by `shift` elements
// (the stream's type as the model calls it), output and weights of type T.
template <typename T, typename X>
void check_layernorm_forward(CudaOps<T>& ops, Rng& rng, const LayerNormShape& shape, const LayerNormInputs& in,
                             size_t shift = 0) {
    const int N = shape.N, C = shape.C;
    const std::vector<float> x = rounded<X>(random_vector(rng, (size_t)N * C, in.spread, in.offset));
    const std::vector<float> w = rounded<T>(random_vector(rng, C, 0.2f, 1.0f));
    const std::vector<float> b = rounded<T>(random_vector(rng, C, 0.2f));
    std::vector<float> want((size_t)N * C), want_mean(N), want_rstd(N);
    ::layernorm_forward(want.data(), want_mean.data(), want_rstd.data(), x.data(), w.data(), b.data(), N, C);

    auto out = poisoned<T>((size_t)N * C);
    auto mean = poisoned<float>(N), rstd = poisoned<float>(N);
    auto d_x = to_device_shifted<X>(x, shift);
    ops.layernorm_forward(out.data(), mean.data(), rstd.data(), d_x.data() + shift, to_device<T>(w).data(),
                          to_device<T>(b).data(), N, C);
    expect_close(out, want, tolerance<T>(), "layernorm out");
    expect_close(mean, want_mean, tolerance<T>(), "layernorm mean");
    expect_close(rstd, want_rstd, tolerance<T>(), "layernorm rstd");
}

// The backward of one shape against the CPU, dinp added into random values and written over
// NaN (GradOut::Write: not read): x and dinp of type X, x shifted by `shift` elements; dout
// and the weights of type T.
template <typename T, typename X>
void check_layernorm_backward(CudaOps<T>& ops, Rng& rng, const LayerNormShape& shape, const LayerNormInputs& in,
                              size_t shift = 0) {
    const int N = shape.N, C = shape.C;
    const std::vector<float> x = rounded<X>(random_vector(rng, (size_t)N * C, in.spread, in.offset));
    const std::vector<float> w = rounded<T>(random_vector(rng, C, 0.2f, 1.0f));
    const std::vector<float> b = rounded<T>(random_vector(rng, C, 0.2f));
    const std::vector<float> dout = rounded<T>(random_vector(rng, (size_t)N * C));
    std::vector<float> y((size_t)N * C), mean(N), rstd(N);
    ::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    auto d_x = to_device_shifted<X>(x, shift);
    for (GradOut mode : {GradOut::Add, GradOut::Write}) {
        const bool add = mode == GradOut::Add;
        SCOPED_TRACE(add ? "add" : "write");
        const std::vector<float> dinp_start = rounded<X>(random_vector(rng, (size_t)N * C));
        const std::vector<float> dw_start = random_vector(rng, C), db_start = random_vector(rng, C);
        std::vector<float> dinp = dinp_start, dw = dw_start, db = db_start;
        auto d_dinp = add ? to_device<X>(dinp) : poisoned<X>((size_t)N * C);
        auto d_dw = to_device<float>(dw), d_db = to_device<float>(db);
        ::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                             rstd.data(), N, C, mode);

        ops.layernorm_backward(d_dinp.data(), d_dw.data(), d_db.data(), to_device<T>(dout).data(), d_x.data() + shift,
                               to_device<T>(w).data(), to_device<float>(mean).data(), to_device<float>(rstd).data(), N,
                               C, mode);
        expect_close(d_dinp, dinp, tolerance<T>(), "layernorm dinp");
        expect_close(d_dw, dw, tolerance<T>(), "layernorm dw");
        expect_close(d_db, db, tolerance<T>(), "layernorm db");

        // layernorm_backward_residual, with the residual gradient df = Δt·dinp (written over NaN):
        // dinp, dw and db as above, and df exactly Δt times the dinp the kernel stored, rounded to T.
        auto d_dinp2 = add ? to_device<X>(dinp_start) : poisoned<X>((size_t)N * C);
        auto d_dw2 = to_device<float>(dw_start), d_db2 = to_device<float>(db_start);
        auto d_df = poisoned<T>((size_t)N * C);
        const float dt = 0.3f;
        ops.layernorm_backward_residual(d_dinp2.data(), d_df.data(), dt, d_dw2.data(), d_db2.data(),
                                        to_device<T>(dout).data(), d_x.data() + shift, to_device<T>(w).data(),
                                        to_device<float>(mean).data(), to_device<float>(rstd).data(), N, C, mode);
        EXPECT_EQ(bits_of(d_dinp2), bits_of(d_dinp)) << "dinp differs from layernorm_backward's";
        EXPECT_EQ(bits_of(d_dw2), bits_of(d_dw)) << "dw differs from layernorm_backward's";
        EXPECT_EQ(bits_of(d_db2), bits_of(d_db)) << "db differs from layernorm_backward's";
        std::vector<float> want_df = to_host(d_dinp);
        for (float& v : want_df) v *= dt;
        EXPECT_EQ(to_host(d_df), rounded<T>(want_df)) << "df is not Δt·dinp";
    }
}

TYPED_TEST(Kernel, LayerNormForward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(3);
    CudaOps<T> ops = layernorm_ops<T>();
    for (const LayerNormShape& shape : kLayerNormShapes)
        for (const LayerNormInputs& in : kLayerNormInputs) {
            SCOPED_TRACE(shape_name(shape) + ", input spread " + std::to_string(in.spread));
            check_layernorm_forward<T, T>(ops, rng, shape, in);
        }
}

TYPED_TEST(Kernel, LayerNormBackward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(4);
    CudaOps<T> ops = layernorm_ops<T>();
    for (const LayerNormShape& shape : kLayerNormShapes)
        for (const LayerNormInputs& in : kLayerNormInputs) {
            SCOPED_TRACE(shape_name(shape) + ", input spread " + std::to_string(in.spread));
            check_layernorm_backward<T, T>(ops, rng, shape, in);
        }
}

// As the model calls it on the stream: x and dinp fp32, the rest in T (packs of 4 of each type
// in bf16); x aligned, and one element off (every pack of x misaligned: single elements).
TYPED_TEST(Kernel, LayerNormOnTheStream) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(21);
    CudaOps<T> ops = layernorm_ops<T>();
    for (const LayerNormShape& shape : {kLayerNormShapes[0], kLayerNormShapes[3]})
        for (size_t shift : {0, 1}) {
            SCOPED_TRACE(shape_name(shape) + ", x shifted by " + std::to_string(shift));
            check_layernorm_forward<T, float>(ops, rng, shape, kLayerNormInputs[0], shift);
            check_layernorm_backward<T, float>(ops, rng, shape, kLayerNormInputs[0], shift);
        }
}

// The fused residual add + LayerNorm forward with the sum in the fp32 stream, output O, f and the
// weights T: sum against the CPU's x + Δt·f rounded to fp32, out, mean and rstd against the CPU
// LayerNorm of that sum; and every result bit for bit the same as residual_forward then
// layernorm_forward.
template <typename T, typename O>
void check_residual_layernorm_forward(CudaOps<T>& ops, Rng& rng, const LayerNormShape& shape) {
    using S = float;
    const int N = shape.N, C = shape.C;
    const size_t n = (size_t)N * C;
    const float dt = 0.3f;
    const std::vector<float> x = rounded<S>(random_vector(rng, n, 1.5f, 0.3f)), f = rounded<T>(random_vector(rng, n));
    const std::vector<float> w = rounded<T>(random_vector(rng, C, 0.2f, 1.0f));
    const std::vector<float> b = rounded<T>(random_vector(rng, C, 0.2f));
    std::vector<float> want_sum(n), want((size_t)N * C), want_mean(N), want_rstd(N);
    ::residual_forward(want_sum.data(), x.data(), f.data(), dt, n);
    want_sum = rounded<S>(want_sum);
    ::layernorm_forward(want.data(), want_mean.data(), want_rstd.data(), want_sum.data(), w.data(), b.data(), N, C);

    auto d_x = to_device<S>(x);
    auto d_f = to_device<T>(f), d_w = to_device<T>(w), d_b = to_device<T>(b);
    auto sum = poisoned<S>(n);
    auto out = poisoned<O>(n);
    auto mean = poisoned<float>(N), rstd = poisoned<float>(N);
    ops.residual_layernorm_forward(sum.data(), out.data(), mean.data(), rstd.data(), d_x.data(), d_f.data(), dt,
                                   d_w.data(), d_b.data(), N, C);
    const double tol = tolerance<T>();
    expect_close(sum, want_sum, tol, "residual_layernorm sum");
    expect_close(out, want, tol, "residual_layernorm out");
    expect_close(mean, want_mean, tol, "residual_layernorm mean");
    expect_close(rstd, want_rstd, tol, "residual_layernorm rstd");

    auto sum2 = poisoned<S>(n);
    auto out2 = poisoned<O>(n);
    auto mean2 = poisoned<float>(N), rstd2 = poisoned<float>(N);
    ops.residual_forward(sum2.data(), d_x.data(), d_f.data(), dt, n);
    ops.layernorm_forward(out2.data(), mean2.data(), rstd2.data(), sum2.data(), d_w.data(), d_b.data(), N, C);
    EXPECT_EQ(bits_of(sum), bits_of(sum2)) << "sum differs from residual_forward's";
    EXPECT_EQ(bits_of(out), bits_of(out2)) << "out differs from layernorm_forward's";
    EXPECT_EQ(bits_of(mean), bits_of(mean2)) << "mean differs from layernorm_forward's";
    EXPECT_EQ(bits_of(rstd), bits_of(rstd2)) << "rstd differs from layernorm_forward's";
}

// The model's two uses: the fp32 stream into a T output (Pre/Peri-LN's LN_in, lnf) or into the
// fp32 stream (Post-LN's after-add norm).
TYPED_TEST(Kernel, ResidualLayerNormForward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(22);
    CudaOps<T> ops = layernorm_ops<T>();
    for (const LayerNormShape& shape : kLayerNormShapes) {
        SCOPED_TRACE(shape_name(shape));
        {
            SCOPED_TRACE("fp32 sum, T out");
            check_residual_layernorm_forward<T, T>(ops, rng, shape);
        }
        {
            SCOPED_TRACE("fp32 sum, fp32 out");
            check_residual_layernorm_forward<T, float>(ops, rng, shape);
        }
    }
}

// The packed paths (residual.cuh, layernorm.cuh) run only where every buffer is aligned to its
// pack: 16 bytes for the stream's fp32 pointers, 4 elements' worth for the module's (8 bytes
// in bf16); 32-bit indices only where the last pack's index cannot wrap.
TEST(Packs, AlignmentAndSizeDecideThePath) {
    alignas(16) static float s[8];
    alignas(16) static bf16 f[8];
    EXPECT_EQ((pack_width<float, bf16>()), 4);
    EXPECT_EQ((pack_width<float, float>()), 4);
    EXPECT_EQ((pack_width<bf16, bf16>()), 8);
    EXPECT_TRUE(aligned_to_packs<4>(s, s + 4, f, f + 4));
    EXPECT_FALSE(aligned_to_packs<4>(s, s + 1, f));
    EXPECT_FALSE(aligned_to_packs<4>(s, f + 2));
    EXPECT_TRUE(narrow_index((size_t(1) << 32) - (size_t(1) << 16) - 1));
    EXPECT_FALSE(narrow_index((size_t(1) << 32) - (size_t(1) << 16)));
}

// The sizes and alignments the residual kernels run at: n a multiple of the pack (every pack
// whole), n − 3 (the last thread's pack partial), and with the stream's buffers, or only the
// module's, one element off alignment (one thread per element).
struct ResidualCase {
    size_t n, stream_shift, f_shift;
    std::string name() const {
        return "n = " + std::to_string(n) + ", shifts " + std::to_string(stream_shift) + " and " +
               std::to_string(f_shift);
    }
};
std::vector<ResidualCase> residual_cases() {
    const size_t nc = (size_t)N * C;
    return {{nc, 0, 0}, {nc - 3, 0, 0}, {nc - 3, 1, 1}, {nc, 0, 1}};
}

// As the model calls it: the stream (x, out) fp32, the module's f in T.
TYPED_TEST(Kernel, ResidualForward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(5);
    CudaOps<T> ops(ops_config(), B, Tn);
    const float dt = 0.1f;
    for (const ResidualCase& k : residual_cases()) {
        SCOPED_TRACE(k.name());
        const size_t n = k.n, ss = k.stream_shift, fs = k.f_shift;
        const std::vector<float> x = random_vector(rng, n), f = rounded<T>(random_vector(rng, n));
        std::vector<float> want(n);
        ::residual_forward(want.data(), x.data(), f.data(), dt, n);
        auto out = poisoned<float>(ss + n);
        ops.residual_forward(out.data() + ss, to_device_shifted<float>(x, ss).data() + ss,
                             to_device_shifted<T>(f, fs).data() + fs, dt, n);
        expect_close(to_host_shifted(out, ss), want, tolerance<float>(), "residual out");
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
    CudaOps<T> ops(ops_config(), 1, kOpsRows);
    for (bool with_bias : {true, false}) {
        std::vector<float> want((size_t)N * OC);
        ::matmul_forward(want.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, IC, OC);
        auto out = poisoned<T>((size_t)N * OC);
        auto d_bias = to_device<T>(bias);
        ops.matmul_forward(out.data(), to_device<T>(inp).data(), to_device<T>(w).data(),
                           with_bias ? d_bias.data() : nullptr, N, IC, OC);
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
    CudaOps<T> ops(ops_config(), 1, kOpsRows);
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
        ops.matmul_backward(d_dinp.data(), d_dw.data(), d_dbias.data(), to_device<T>(dout).data(),
                            to_device<T>(inp).data(), to_device<T>(w).data(), N, IC, OC, mode);
        expect_close(d_dinp, dinp, tolerance<T>(), "matmul dinp");
        expect_close(d_dw, dw, tolerance<T>(), "matmul dw");
        expect_close(d_dbias, dbias, tolerance<T>(), "matmul dbias");
    }
}

// Attention shapes (B, T, C, NH). In bf16 the head sizes 12, 16 and 64 run on the tensor cores
// (12 padded to 16), 20 and 300 on the exact kernels (300 in two passes of 256 channels), as fp32
// always does. T = 1, 17, 33, 100 and 130 leave the last 64-row tile partly or mostly empty and
// give one, two and three tiles (tiles below the diagonal, and the diagonal's mask); several heads
// and sequences exercise the head and batch offsets into qkv.
struct AttentionShape {
    int B, Tn, C, NH;
};
constexpr AttentionShape kAttentionShapes[] = {{2, 1, 24, 2},  {2, 17, 48, 4},  {1, 33, 24, 2}, {1, 17, 64, 1},
                                               {2, 33, 128, 2}, {2, 100, 128, 2}, {1, 130, 32, 2}, {2, 33, 40, 2},
                                               {1, 9, 600, 2}};

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
        CudaOps<T> ops(config_of(s.C, s.NH), s.B, s.Tn);
        ops.attention_forward(out.data(), lse.data(), to_device<T>(qkv).data(), s.B, s.Tn, s.C, s.NH);
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
        auto d_dqkv = poisoned<T>(rows * 3 * s.C);  // stored into: nothing of it may show through
        auto d_qkv = to_device<T>(qkv);
        std::vector<float> out(rows * s.C), att((size_t)s.B * s.NH * s.Tn * s.Tn), dqkv(rows * 3 * s.C);
        ::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.Tn, s.C, s.NH);
        ::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.Tn, s.C, s.NH);
        // The backward reads what the forward kernel saved and wrote. It runs twice, first on another
        // dout, so that a row of its scratch (the row sums Σ dout·out) left unwritten by the second
        // run would hold the first run's value.
        const size_t saved = gpu::attention_saved_size(s.B, s.Tn, s.NH);
        DeviceArray<T> d_out(rows * s.C);
        DeviceArray<float> lse(saved);
        CudaOps<T> ops(config_of(s.C, s.NH), s.B, s.Tn);
        ops.attention_forward(d_out.data(), lse.data(), d_qkv.data(), s.B, s.Tn, s.C, s.NH);
        DeviceArray<T> first_dqkv(rows * 3 * s.C);
        ops.attention_backward(first_dqkv.data(), to_device<T>(rounded<T>(random_vector(rng, rows * s.C))).data(),
                               d_qkv.data(), d_out.data(), lse.data(), s.B, s.Tn, s.C, s.NH);
        ops.attention_backward(d_dqkv.data(), to_device<T>(dout).data(), d_qkv.data(), d_out.data(), lse.data(), s.B,
                               s.Tn, s.C, s.NH);
        expect_close(d_dqkv, dqkv, tolerance<T>(), "attention dqkv, " + describe(s));
    }
}

// fcproj's backward with GELU's derivative in it (the MLP's backward), against the reference's
// matmul_backward (dpre written over NaN, dw and dbias added into random values) and then
// gelu_backward over dpre. IC = 4C = 192, a multiple of 8: GELU' is the product's cuBLASLt
// epilogue; IC = 44 and 13: the product, then the in-place pass (in packs in fp32 at 44, one
// element at a time at 13); dpre also one element off 16-byte alignment; N = 39 and 200 (several
// row chunks in the fallback's bias gradient).
TYPED_TEST(Kernel, MatmulGeluBackward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(16);
    const int OC = C;
    CudaOps<T> ops(ops_config(), 1, kOpsRows);
    for (int rows : {N, kOpsRows})
        for (int IC : {4 * C, 44, 13})
            for (size_t offset : {0, 1}) {
                SCOPED_TRACE("N = " + std::to_string(rows) + ", IC = " + std::to_string(IC) + ", offset " +
                             std::to_string(offset));
                const size_t n = (size_t)rows * IC;
                const std::vector<float> pre = rounded<T>(random_vector(rng, n, 2.0f));
                const std::vector<float> inp = rounded<T>(random_vector(rng, n));
                const std::vector<float> w = rounded<T>(random_vector(rng, (size_t)OC * IC, 0.2f));
                const std::vector<float> dout = rounded<T>(random_vector(rng, (size_t)rows * OC));
                std::vector<float> dpre(n), dw = random_vector(rng, (size_t)OC * IC), dbias = random_vector(rng, OC);
                auto d_dw = to_device<float>(dw), d_dbias = to_device<float>(dbias);
                ::matmul_backward(dpre.data(), dw.data(), dbias.data(), dout.data(), inp.data(), w.data(), rows, IC,
                                  OC, GradOut::Write);
                ::gelu_backward(dpre.data(), dpre.data(), pre.data(), n, GradOut::Write);

                auto d_dpre = poisoned<T>(n + offset);
                ops.matmul_gelu_backward(d_dpre.data() + offset, d_dw.data(), d_dbias.data(), to_device<T>(dout).data(),
                                         to_device<T>(inp).data(), to_device<T>(w).data(), to_device<T>(pre).data(),
                                         rows, IC, OC);
                std::vector<float> got = to_host(d_dpre);
                got.erase(got.begin(), got.begin() + offset);
                expect_close(got, dpre, tolerance<T>(), "fcproj dpre through GELU'");
                expect_close(d_dw, dw, tolerance<T>(), "fcproj dw");
                expect_close(d_dbias, dbias, tolerance<T>(), "fcproj dbias");
            }
}

// The MLP's fc layer with its GELU fused in: pre = inp·wᵀ + bias and GELU(pre), against the
// reference's matmul then GELU. OC = 4C = 192, a multiple of 8: bias and GELU are the product's
// cuBLASLt epilogue; OC = 44 and 13: the product, then the bias + GELU pass.
TYPED_TEST(Kernel, MatmulGeluForward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(11);
    const int IC = C;
    CudaOps<T> ops(ops_config(), 1, kOpsRows);
    for (int OC : {4 * C, 44, 13}) {
        SCOPED_TRACE("OC = " + std::to_string(OC));
        const std::vector<float> inp = rounded<T>(random_vector(rng, (size_t)N * IC));
        const std::vector<float> w = rounded<T>(random_vector(rng, (size_t)OC * IC, 0.2f));
        const std::vector<float> bias = rounded<T>(random_vector(rng, OC));
        std::vector<float> want_pre((size_t)N * OC), want_out((size_t)N * OC);
        ::matmul_forward(want_pre.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
        ::gelu_forward(want_out.data(), want_pre.data(), want_pre.size());
        auto pre = poisoned<T>((size_t)N * OC), out = poisoned<T>((size_t)N * OC);
        ops.matmul_gelu_forward(out.data(), pre.data(), to_device<T>(inp).data(), to_device<T>(w).data(),
                                to_device<T>(bias).data(), N, IC, OC);
        expect_close(pre, want_pre, tolerance<T>(), "fc pre-activation");
        expect_close(out, want_out, tolerance<T>(), "fc GELU");
    }
}

// ---- the fused products, each pointer misaligned in turn --------------------------------------
// Every product the ops (cuda_ops.cuh) offer cuBLASLt with an epilogue: the forward's bias
// (matmul_forward), fc's bias + GELU (matmul_gelu_forward), fcproj's GELU' with its
// weight and bias gradients (matmul_gelu_backward) and a linear layer's backward with its bias
// gradient (matmul_backward), at odd sizes (N = 39 rows; OC = 13 for the bias products, 4C = 192
// where GELU's auxiliary matrix needs a row stride divisible by 8). Each runs with every buffer
// aligned, then with each buffer in turn one element off (2 or 4 bytes aligned instead of 256),
// against the CPU reference every time.

// One op with a fused product: the names of its buffers, and a run that places buffer i
// shifts[i] elements into its allocation and checks every output against the CPU. (The ops'
// own scratch, where the bias gradient's epilogue writes, is allocated aligned.)
template <typename T>
struct FusedCase {
    std::string name;
    std::vector<std::string> buffers;
    std::function<void(CudaOps<T>&, const std::vector<size_t>&)> run;
};

template <typename T>
std::vector<FusedCase<T>> fused_cases(Rng& rng) {
    const int IC = C, OC = 13, H = 4 * C;  // H: the MLP's hidden width
    const auto values = [&](size_t n, float scale) { return rounded<T>(random_vector(rng, n, scale)); };
    const std::vector<float> inp = values((size_t)N * H, 1.0f), pre = values((size_t)N * H, 2.0f);
    const std::vector<float> w = values((size_t)H * H, 0.2f), bias = values(H, 1.0f), dout = values((size_t)N * H, 1.0f);
    const std::vector<float> dw = random_vector(rng, (size_t)H * H), dbias = random_vector(rng, H);
    const auto nan = [](size_t n) { return std::vector<float>(n, NAN); };
    const auto head = [](const std::vector<float>& x, size_t n) { return std::vector<float>(x.begin(), x.begin() + n); };
    // A buffer of `host` values, shifted; its data() points at the first value.
    struct Buffer {
        Buffer(const std::vector<float>& host, size_t shift) : shift(shift), array(to_device_shifted<T>(host, shift)) {}
        T* data() { return array.data() + shift; }
        std::vector<float> host() const { return to_host_shifted(array, shift); }
        size_t shift;
        DeviceArray<T> array;
    };
    struct FloatBuffer {  // the fp32 gradients and scratch
        FloatBuffer(const std::vector<float>& host, size_t shift) : shift(shift), array(to_device_shifted<float>(host, shift)) {}
        float* data() { return array.data() + shift; }
        std::vector<float> host() const { return to_host_shifted(array, shift); }
        size_t shift;
        DeviceArray<float> array;
    };
    std::vector<FusedCase<T>> cases;
    cases.push_back({"matmul_forward with bias", {"out", "inp", "w", "bias"}, [=](CudaOps<T>& ops, const std::vector<size_t>& s) {
        const std::vector<float> x = head(inp, (size_t)N * IC), weight = head(w, (size_t)OC * IC), b = head(bias, OC);
        std::vector<float> want((size_t)N * OC);
        ::matmul_forward(want.data(), x.data(), weight.data(), b.data(), N, IC, OC);
        Buffer out(nan(want.size()), s[0]), d_inp(x, s[1]), d_w(weight, s[2]), d_bias(b, s[3]);
        ops.matmul_forward(out.data(), d_inp.data(), d_w.data(), d_bias.data(), N, IC, OC);
        expect_close(out.host(), want, tolerance<T>(), "out");
    }});
    cases.push_back({"matmul_gelu_forward", {"out", "pre", "inp", "w", "bias"}, [=](CudaOps<T>& ops, const std::vector<size_t>& s) {
        const std::vector<float> x = head(inp, (size_t)N * IC), weight = head(w, (size_t)H * IC);
        std::vector<float> want_pre((size_t)N * H), want_out((size_t)N * H);
        ::matmul_forward(want_pre.data(), x.data(), weight.data(), bias.data(), N, IC, H);
        ::gelu_forward(want_out.data(), want_pre.data(), want_pre.size());
        Buffer out(nan(want_out.size()), s[0]), d_pre(nan(want_pre.size()), s[1]), d_inp(x, s[2]), d_w(weight, s[3]);
        Buffer d_bias(bias, s[4]);
        ops.matmul_gelu_forward(out.data(), d_pre.data(), d_inp.data(), d_w.data(), d_bias.data(), N, IC, H);
        expect_close(d_pre.host(), want_pre, tolerance<T>(), "pre");
        expect_close(out.host(), want_out, tolerance<T>(), "out");
    }});
    cases.push_back({"matmul_gelu_backward", {"dpre", "dw", "dbias", "dout", "inp", "w", "pre"},
                     [=](CudaOps<T>& ops, const std::vector<size_t>& s) {
        const std::vector<float> g = head(dout, (size_t)N * IC), weight = head(w, (size_t)IC * H);
        std::vector<float> want_dpre((size_t)N * H), want_dw = head(dw, (size_t)IC * H), want_dbias = head(dbias, IC);
        ::matmul_backward(want_dpre.data(), want_dw.data(), want_dbias.data(), g.data(), inp.data(), weight.data(), N, H,
                          IC, GradOut::Write);
        ::gelu_backward(want_dpre.data(), want_dpre.data(), pre.data(), want_dpre.size(), GradOut::Write);
        Buffer d_dpre(nan(want_dpre.size()), s[0]), d_dout(g, s[3]), d_inp(inp, s[4]), d_w(weight, s[5]), d_pre(pre, s[6]);
        FloatBuffer d_dw(head(dw, (size_t)IC * H), s[1]), d_dbias(head(dbias, IC), s[2]);
        ops.matmul_gelu_backward(d_dpre.data(), d_dw.data(), d_dbias.data(), d_dout.data(), d_inp.data(), d_w.data(),
                                 d_pre.data(), N, H, IC);
        expect_close(d_dpre.host(), want_dpre, tolerance<T>(), "dpre");
        expect_close(d_dw.host(), want_dw, tolerance<T>(), "dw");
        expect_close(d_dbias.host(), want_dbias, tolerance<T>(), "dbias");
    }});
    cases.push_back({"matmul_backward with bias", {"dinp", "dw", "dbias", "dout", "inp", "w"},
                     [=](CudaOps<T>& ops, const std::vector<size_t>& s) {
        const std::vector<float> g = head(dout, (size_t)N * OC), x = head(inp, (size_t)N * IC);
        const std::vector<float> weight = head(w, (size_t)OC * IC), dinp = head(pre, (size_t)N * IC);
        std::vector<float> want_dinp = dinp, want_dw = head(dw, (size_t)OC * IC), want_dbias = head(dbias, OC);
        ::matmul_backward(want_dinp.data(), want_dw.data(), want_dbias.data(), g.data(), x.data(), weight.data(), N, IC,
                          OC, GradOut::Add);
        Buffer d_dinp(dinp, s[0]), d_dout(g, s[3]), d_inp(x, s[4]), d_w(weight, s[5]);
        FloatBuffer d_dw(head(dw, (size_t)OC * IC), s[1]), d_dbias(head(dbias, OC), s[2]);
        ops.matmul_backward(d_dinp.data(), d_dw.data(), d_dbias.data(), d_dout.data(), d_inp.data(), d_w.data(), N, IC,
                            OC, GradOut::Add);
        expect_close(d_dinp.host(), want_dinp, tolerance<T>(), "dinp");
        expect_close(d_dw.host(), want_dw, tolerance<T>(), "dw");
        expect_close(d_dbias.host(), want_dbias, tolerance<T>(), "dbias");
    }});
    return cases;
}

// Each op with a fused product with every buffer aligned, then each buffer in turn one element off.
template <typename T>
void run_with_each_buffer_misaligned(CudaOps<T>& ops, const std::vector<FusedCase<T>>& cases) {
    for (const FusedCase<T>& c : cases)
        for (int off = -1; off < (int)c.buffers.size(); off++) {
            SCOPED_TRACE(c.name + (off < 0 ? ", all aligned" : ", " + c.buffers[off] + " one element off"));
            std::vector<size_t> shifts(c.buffers.size(), 0);
            if (off >= 0) shifts[off] = 1;
            c.run(ops, shifts);
        }
}

// The backend tells cuBLASLt the real alignment of every pointer, so the emulated cuBLASLt,
// which has an algorithm for every product its documentation allows, runs each one fused: no
// kind of product may be refused (with 256 bytes promised for a 2-byte aligned pointer,
// cublasLtMatmul would refuse it). Natively, a GPU's cuBLASLt may refuse some: those run
// unfused, still checked, and CUDA_TEST_REPORT says how many kinds.
TYPED_TEST(Kernel, FusedProductsWithEachPointerMisaligned) {
    REQUIRE_CUDA_DEVICE();
    Rng rng(31);
    CudaOps<TypeParam> ops(ops_config(), 1, kOpsRows);
    run_with_each_buffer_misaligned(ops, fused_cases<TypeParam>(rng));
#ifdef SIMT_EMULATION
    EXPECT_EQ(ops.blas->refused_kinds(), 0u) << "cuBLASLt refused a product its documentation allows";
#else
    if (std::getenv("CUDA_TEST_REPORT"))
        std::printf("  kinds of fused product cuBLASLt refused: %zu\n", ops.blas->refused_kinds());
#endif
}

// Each op with every kind of product plain (-fused none, or a kind timed slower fused): the plain
// product and the project's kernel, against the CPU reference with each buffer misaligned in
// turn. Emulated, cuBLASLt is told to refuse every epilogue meanwhile: it records no refusal,
// so the ops never asked it.
TYPED_TEST(Kernel, FusedProductsRunPlainWhereTheirKindIsPlain) {
    REQUIRE_CUDA_DEVICE();
    Rng rng(33);
    CudaOps<TypeParam> ops(ops_config(), 1, kOpsRows);
    ops.fused = NO_KIND_FUSED;
#ifdef SIMT_EMULATION
    simt::refuse_cublaslt_epilogues(simt::LtRefusal::kHeuristic);
#endif
    run_with_each_buffer_misaligned(ops, fused_cases<TypeParam>(rng));
#ifdef SIMT_EMULATION
    simt::refuse_cublaslt_epilogues(simt::LtRefusal::kNone);
#endif
    EXPECT_EQ(ops.blas->refused_kinds(), 0u) << "an op asked cuBLASLt for a kind of product it was told to run plain";
}

#ifdef SIMT_EMULATION
// Where cuBLASLt refuses (the emulated one told to: its heuristic returns no algorithm, or
// cublasLtMatmul refuses the one it gave), every op with a fused product runs its unfused path with the
// same results, and says so once per kind of product: in bf16 the bias, bias + GELU, GELU' and
// the two bias gradients; in fp32 (no GELU epilogue) the bias and the two bias gradients.
TYPED_TEST(Kernel, FusedProductsFallBackWhereCublasLtRefuses) {
    using T = TypeParam;
    const size_t kinds = std::is_same<T, bf16>::value ? 5 : 3;
    for (simt::LtRefusal refusal : {simt::LtRefusal::kHeuristic, simt::LtRefusal::kMatmul}) {
        SCOPED_TRACE(refusal == simt::LtRefusal::kHeuristic ? "the heuristic refuses" : "cublasLtMatmul refuses");
        Rng rng(32);
        const std::vector<FusedCase<T>> cases = fused_cases<T>(rng);
        CudaOps<T> ops(ops_config(), 1, kOpsRows);
        simt::refuse_cublaslt_epilogues(refusal);
        testing::internal::CaptureStderr();
        for (int round = 0; round < 2; round++)
            for (const FusedCase<T>& c : cases) {
                SCOPED_TRACE(c.name);
                c.run(ops, std::vector<size_t>(c.buffers.size(), 0));
            }
        const std::string said = testing::internal::GetCapturedStderr();
        simt::refuse_cublaslt_epilogues(simt::LtRefusal::kNone);
        EXPECT_EQ(ops.blas->refused_kinds(), kinds);
        size_t lines = 0;
        for (size_t at = said.find("cuBLASLt refused the "); at != std::string::npos; at = said.find("cuBLASLt refused the ", at + 1))
            lines++;
        EXPECT_EQ(lines, kinds) << said;
    }
}
#endif

// The bias passes over (N,OC) rows, N = 39: OC = 4C = 192, a multiple of both packs (16-byte
// accesses in fp32 and in bf16); 44, a multiple of 4 only (packs in fp32, single elements in
// bf16); 13, of neither. Each with every buffer aligned, and with all of them, or one, one
// element off 16-byte alignment (single elements). x is the buffer the bias is added to.
constexpr int kBiasWidths[] = {4 * C, 44, 13};
struct BiasShifts {
    size_t x, out, bias;  // elements into its allocation where each buffer begins
};
constexpr BiasShifts kBiasShifts[] = {{0, 0, 0}, {1, 1, 1}, {0, 1, 0}, {0, 0, 1}};

std::string bias_case_name(int OC, const BiasShifts& s) {
    return "OC = " + std::to_string(OC) + ", shifts " + std::to_string(s.x) + ", " + std::to_string(s.out) + ", " +
           std::to_string(s.bias);
}

// x (N,OC) + bias (OC) in fp32, rounded to T: what a bias pass stores.
template <typename T>
std::vector<float> plus_bias(const std::vector<float>& x, const std::vector<float>& bias) {
    std::vector<float> sum(x.size());
    for (size_t i = 0; i < x.size(); i++) sum[i] = x[i] + bias[i % bias.size()];
    return rounded<T>(sum);
}

// The passes below run inside the linear layers' ops where a product's kind is plain
// (ops.fused = NO_KIND_FUSED): each op's plain product is read back first (by an op that makes
// the same cuBLAS call and nothing else), so that the pass after it can be checked exactly. The
// same bits whichever path (packs or single elements) ran, where the products agree.

// The product inp (N,C)·wᵀ (N,OC) into `out` shifted by `shift`, read back: matmul_forward
// without a bias is the plain product alone.
template <typename T>
std::vector<float> plain_product(CudaOps<T>& ops, DeviceArray<T>& out, size_t shift, const DeviceArray<T>& inp,
                                 const DeviceArray<T>& w, int OC) {
    ops.matmul_forward(out.data() + shift, inp.data(), w.data(), nullptr, N, C, OC);
    return to_host_shifted(out, shift);
}

// The fc layer's bias + GELU pass (bias_gelu_forward_kernel, matmul_gelu_forward with its kind
// plain): pre = product + bias exactly as a bias pass rounds it, and GELU of the stored pre
// against the CPU.
TYPED_TEST(Kernel, BiasGeluForward) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(23);
    CudaOps<T> ops(ops_config(), 1, kOpsRows);
    ops.fused = NO_KIND_FUSED;
    for (int OC : kBiasWidths) {
        const size_t n = (size_t)N * OC;
        const auto d_inp = to_device<T>(rounded<T>(random_vector(rng, (size_t)N * C)));
        const auto d_w = to_device<T>(rounded<T>(random_vector(rng, (size_t)OC * C, 0.3f)));
        const std::vector<float> bias = rounded<T>(random_vector(rng, OC));
        std::vector<float> first_product;
        std::vector<uint16_t> pre_bits, out_bits;  // of the first case
        for (const BiasShifts& s : kBiasShifts) {
            SCOPED_TRACE(bias_case_name(OC, s));
            auto d_pre = poisoned<T>(s.x + n);
            const std::vector<float> product = plain_product(ops, d_pre, s.x, d_inp, d_w, OC);
            const std::vector<float> want_pre = plus_bias<T>(product, bias);
            std::vector<float> want_out(n);
            ::gelu_forward(want_out.data(), want_pre.data(), n);
            auto d_out = poisoned<T>(s.out + n);
            ops.matmul_gelu_forward(d_out.data() + s.out, d_pre.data() + s.x, d_inp.data(), d_w.data(),
                                    to_device_shifted<T>(bias, s.bias).data() + s.bias, N, C, OC);
            EXPECT_EQ(to_host_shifted(d_pre, s.x), want_pre) << "pre is not the product + bias rounded to T";
            expect_close(to_host_shifted(d_out, s.out), want_out, tolerance<T>(), "bias_gelu out");
            if (pre_bits.empty()) {
                first_product = product;
                pre_bits = bits_of(d_pre, s.x);
                out_bits = bits_of(d_out, s.out);
            } else if (product == first_product) {
                EXPECT_EQ(bits_of(d_pre, s.x), pre_bits) << "pre differs between the paths";
                EXPECT_EQ(bits_of(d_out, s.out), out_bits) << "out differs between the paths";
            }
        }
    }
}

// The linear layer's bias pass (add_bias_kernel, matmul_forward with the bias kind plain): out =
// product + bias exactly as rounded to T, whichever path ran.
TYPED_TEST(Kernel, AddBias) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(24);
    CudaOps<T> ops(ops_config(), 1, kOpsRows);
    ops.fused = NO_KIND_FUSED;
    for (int OC : kBiasWidths) {
        const auto d_inp = to_device<T>(rounded<T>(random_vector(rng, (size_t)N * C)));
        const auto d_w = to_device<T>(rounded<T>(random_vector(rng, (size_t)OC * C, 0.3f)));
        const std::vector<float> bias = rounded<T>(random_vector(rng, OC));
        for (const BiasShifts& s : kBiasShifts) {
            SCOPED_TRACE(bias_case_name(OC, s));
            auto d_out = poisoned<T>(s.x + (size_t)N * OC);
            const std::vector<float> want = plus_bias<T>(plain_product(ops, d_out, s.x, d_inp, d_w, OC), bias);
            ops.matmul_forward(d_out.data() + s.x, d_inp.data(), d_w.data(),
                               to_device_shifted<T>(bias, s.bias).data() + s.bias, N, C, OC);
            EXPECT_EQ(to_host_shifted(d_out, s.x), want) << "out is not the product + bias rounded to T";
        }
    }
}

// GELU's backward pass in place (gelu_backward_inplace_kernel, matmul_gelu_backward with its
// kind plain): d·GELU'(pre) of the product d = dout·w (read back first: matmul_backward's input
// gradient is the same product) against the CPU's gelu_backward, with d and pre aligned or one
// element off (BiasShifts' x and bias).
TYPED_TEST(Kernel, GeluBackwardInplace) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(25);
    CudaOps<T> ops(ops_config(), 1, kOpsRows);
    ops.fused = NO_KIND_FUSED;
    const int OC = C;  // fcproj's output width; its input width IC is the pass's row
    for (int IC : kBiasWidths) {
        const size_t n = (size_t)N * IC;
        const auto d_dout = to_device<T>(rounded<T>(random_vector(rng, (size_t)N * OC)));
        const auto d_inp = to_device<T>(rounded<T>(random_vector(rng, n)));
        const auto d_w = to_device<T>(rounded<T>(random_vector(rng, (size_t)OC * IC, 0.3f)));
        const std::vector<float> pre = rounded<T>(random_vector(rng, n, 2.0f));
        auto d_dw = to_device<float>(std::vector<float>((size_t)OC * IC));
        std::vector<float> first_product;
        std::vector<uint16_t> first_bits;
        for (const BiasShifts& s : kBiasShifts) {
            SCOPED_TRACE(bias_case_name(IC, s));
            auto d_d = poisoned<T>(s.x + n);
            ops.matmul_backward(d_d.data() + s.x, d_dw.data(), (float*)nullptr, d_dout.data(), d_inp.data(), d_w.data(),
                                N, IC, OC, GradOut::Write);
            const std::vector<float> product = to_host_shifted(d_d, s.x);
            std::vector<float> want(n);
            ::gelu_backward(want.data(), product.data(), pre.data(), n, GradOut::Write);
            ops.matmul_gelu_backward(d_d.data() + s.x, d_dw.data(), nullptr, d_dout.data(), d_inp.data(), d_w.data(),
                                     to_device_shifted<T>(pre, s.bias).data() + s.bias, N, IC, OC);
            expect_close(to_host_shifted(d_d, s.x), want, tolerance<T>(), "gelu backward in place");
            if (first_bits.empty()) {
                first_product = product;
                first_bits = bits_of(d_d, s.x);
            } else if (product == first_product) {
                EXPECT_EQ(bits_of(d_d, s.x), first_bits) << "d differs between the paths";
            }
        }
    }
}

// The losses of the forward-only op (evaluation), and the losses and gradient of the one-pass
// op (training) against the CPU reference's forward then backward, at rows of (V, Vp):
// narrower than the 1024-thread block of the one-pass kernel, wider than it and not a multiple
// of it, and too long for shared memory (above 227 KiB: the unstaged path; V > 58K in fp32,
// > 116K in bf16). Padding columns V..Vp−1 of the gradient must be exactly 0. These rows are
// read in 16-byte packs (Vp a multiple of 8), V mod 8 columns one by one; the rows of Vp = 97,
// and logits one element off alignment, one element at a time throughout.
TYPED_TEST(Kernel, CrossEntropy) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    const int long_row = 227 * 1024 / (int)sizeof(T) + 33;
    const struct Shape {
        int N, V, Vp;
        size_t shift;  // elements into its allocation where the logits begin
    } shapes[] = {{N, V, Vp, 0}, {5, 1500, 1536, 0}, {3, long_row, long_row + 31, 0}, {7, V, 97, 0}, {N, V, Vp, 1}};
    Rng rng(11);
    CudaOps<T> ops(ops_config(), 1, kOpsRows);
    for (const Shape& s : shapes) {
        const std::string at = " at N " + std::to_string(s.N) + ", V " + std::to_string(s.V) + ", Vp " +
                               std::to_string(s.Vp) + ", shift " + std::to_string(s.shift);
        const std::vector<float> logits = rounded<T>(random_vector(rng, (size_t)s.N * s.Vp, 2.0f));
        const std::vector<int32_t> targets = random_tokens(rng, s.N, s.V);
        const float dloss = 0.37f / s.N;
        std::vector<float> want_losses(s.N), want_dlogits = logits;
        ::crossentropy_forward(want_losses.data(), logits.data(), targets.data(), s.N, s.V, s.Vp);
        ::crossentropy_backward_inplace(want_dlogits.data(), targets.data(), dloss, s.N, s.V, s.Vp);

        auto d_logits = to_device_shifted<T>(logits, s.shift);
        auto d_targets = to_device(targets);
        auto losses = poisoned<float>(s.N);
        ops.crossentropy_forward(losses.data(), d_logits.data() + s.shift, d_targets.data(), s.N, s.V, s.Vp);
        expect_close(losses, want_losses, tolerance<T>(), "crossentropy forward losses" + at);
        EXPECT_EQ(to_host_shifted(d_logits, s.shift), logits) << "the forward-only op keeps the logits" << at;

        auto fused_losses = poisoned<float>(s.N);
        ops.crossentropy_forward_backward(fused_losses.data(), d_logits.data() + s.shift, d_targets.data(), dloss, s.N,
                                          s.V, s.Vp);
        expect_close(fused_losses, want_losses, tolerance<T>(), "crossentropy fwd+bwd losses" + at);
        const std::vector<float> got = to_host_shifted(d_logits, s.shift);
        expect_close(got, want_dlogits, tolerance<T>(), "crossentropy fwd+bwd dlogits" + at);
        size_t nonzero_padding = 0;
        for (int n = 0; n < s.N; n++)
            for (int v = s.V; v < s.Vp; v++) nonzero_padding += got[(size_t)n * s.Vp + v] != 0.0f;
        EXPECT_EQ(nonzero_padding, 0u) << "padding columns of the gradient" << at;
    }
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
    // From lo = 148 (params + lo 16-byte aligned) the kernel takes 4 parameters per access,
    // with segment ends inside packs and a tail of 3 before hi = 951; from lo = 150 (not
    // aligned) one at a time.
    const size_t n = 1003;
    CudaOps<T> ops(ops_config(), 1, 1);
    gpu::AdamWTable& table = ops.adamw_segments;
    table.count = 4;
    const unsigned long long ends[] = {402, 402, 701, n};
    const bool decays[] = {true, true, false, true};
    for (int k = 0; k < 4; k++) table.end[k] = ends[k], table.decays[k] = decays[k];
    for (const auto& range : {std::pair<size_t, size_t>{148, 951}, {150, 950}})
    for (float grad_size : {0.01f, 1e-8f}) {
        const size_t lo = range.first, hi = range.second;
        SCOPED_TRACE("range [" + std::to_string(lo) + ", " + std::to_string(hi) + "), gradients of size " +
                     std::to_string(grad_size));
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
        ops.adamw_update(d_params.data(), has_copy ? copy.data() : nullptr, to_device<float>(grads).data(), d_m.data(),
                         d_v.data(), lo, hi, h, t, grad_scale);
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

// AdamW's 4-parameter accesses give the same bits as one at a time: the same update of
// [0, n) on buffers shifted by one element (not aligned: one at a time).
TYPED_TEST(Kernel, AdamWPacksMatchSingleElements) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(18);
    const size_t n = 1003;
    CudaOps<T> ops(ops_config(), 1, 1);
    gpu::AdamWTable& table = ops.adamw_segments;
    table.count = 2, table.end[0] = 501, table.end[1] = n, table.decays[0] = true, table.decays[1] = false;
    std::vector<float> params = random_vector(rng, n), grads = random_vector(rng, n, 0.01f),
                       m = random_vector(rng, n, 0.001f), v = random_vector(rng, n, 0.001f);
    for (float& x : v) x *= x;
    const bool has_copy = !std::is_same<T, float>::value;
    std::vector<std::vector<float>> results[2];  // params, m, v, copy per run
    for (size_t shift : {0, 1}) {
        const auto shifted = [&](const std::vector<float>& x) {
            std::vector<float> out(shift, 0.0f);
            out.insert(out.end(), x.begin(), x.end());
            return out;
        };
        auto d_params = to_device<float>(shifted(params)), d_grads = to_device<float>(shifted(grads));
        auto d_m = to_device<float>(shifted(m)), d_v = to_device<float>(shifted(v));
        auto copy = poisoned<T>(n + shift);
        ops.adamw_update(d_params.data() + shift, has_copy ? copy.data() + shift : nullptr, d_grads.data() + shift,
                         d_m.data() + shift, d_v.data() + shift, 0, n, AdamWHyper{1e-3, 0.9, 0.95, 1e-8, 0.1}, 2, 0.8);
        for (const DeviceArray<float>* d : {&d_params, &d_m, &d_v}) {
            std::vector<float> got = to_host(*d);
            results[shift].emplace_back(got.begin() + shift, got.end());
        }
        if (has_copy) {
            std::vector<float> got = to_host(copy);
            results[shift].emplace_back(got.begin() + shift, got.end());
        }
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t b = 0; b < results[0].size(); b++) {
        size_t mismatches = 0;
        for (size_t i = 0; i < n; i++) mismatches += std::memcmp(&results[0][b][i], &results[1][b][i], 4) != 0;
        EXPECT_EQ(mismatches, 0u) << "buffer " << b << " (params, m, v, copy)";
    }
}

TYPED_TEST(Kernel, SumOfSquares) {
    REQUIRE_CUDA_DEVICE();
    using T = TypeParam;
    Rng rng(13);
    const size_t n = 100003;  // not a multiple of any block size
    const std::vector<float> x = rounded<T>(random_vector(rng, n, 0.5f, 0.1f));
    CudaOps<T> ops(ops_config(), 1, 1);
    const double got = ops.sum_of_squares(to_device<T>(x).data(), n);
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

    CudaOps<T> ops(ops_config(), B, Tn);
    const StreamStats got = ops.stream_statistics(to_device<float>(x).data(), N, C);  // the fp32 stream
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
    CudaOps<T> ops(ops_config(), 1, 1);
    // From element 0 in packs of 4 with a tail of 1; from element 1 (not aligned) one at a
    // time, 3 elements short of the end. Elements outside the range stay poisoned.
    for (auto [offset, count] : {std::pair<size_t, size_t>{0, n}, {1, n - 4}}) {
        SCOPED_TRACE("elements " + std::to_string(offset) + " + " + std::to_string(count));
        auto out = poisoned<T>(n);
        ops.convert(out.data() + offset, to_device<float>(x).data() + offset, count);
        const std::vector<float> got = to_host(out), want = rounded<T>(x);
        size_t mismatches = 0, outside = 0;
        for (size_t i = 0; i < n; i++) {
            if (i < offset || i >= offset + count) outside += !std::isnan(got[i]);
            else mismatches += got[i] != want[i];
        }
        EXPECT_EQ(mismatches, 0u) << "convert rounds like the host conversion";
        EXPECT_EQ(outside, 0u) << "written outside the range";
    }
}

}  // namespace

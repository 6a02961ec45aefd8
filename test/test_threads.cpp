// The threaded branches of the CPU code, run threaded: the ops training runs (the fast ops of
// cpu_fast_ops.h and the reference ops of cpu_ops.h, which CpuModel<float> uses for the encoder,
// the residual step and AdamW, and the diagnostics for their norms), the tangents of
// measure/stability.h, the diagnostics of diagnostics.h and gemm of matmul.h. Every op is run with
// parallel_min_work() lowered to 1, so each loop gated by it takes its parallel branch at these
// small sizes, with 1, 2 and 3 threads (3 does not divide the work evenly), and once more with
// the threshold left at its default (the serial branch). All results must be the same bit for
// bit: every parallel loop gives each thread its own outputs and fixes the order of every sum
// (cpu_ops.h). The ops run in float, as training runs them, on sizes where every thread gets
// work: C = 200 is four 64-channel blocks of the column sums (the last one partial), and a few
// token ids repeat many times, so a loop that let two threads add into one row would show.
// (test_fast_ops.cpp checks the fast ops' accuracy against the reference at d12's sizes.)
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu_fast_ops.h"
#include "cpu_ops.h"
#include "diagnostics.h"
#include "gpt2_cpu.h"
#include "matmul.h"
#include "util/rng.h"
#include "measure/stability.h"

namespace {

using Floats = std::vector<float>;

constexpr int B = 4, Tn = 24, C = 200, NH = 4, V = 96, Vp = 128;
constexpr int N = B * Tn;

// n floats uniform in [-scale, scale).
Floats random_floats(Rng& rng, size_t n, float scale = 1.0f) {
    Floats v(n);
    for (float& x : v) x = (float)((rng.uniform() * 2 - 1) * scale);
    return v;
}

// N token ids, most of them one of three ids (so rows of dwte are shared by many positions).
std::vector<int32_t> repeated_tokens(Rng& rng) {
    std::vector<int32_t> t(N);
    for (int32_t& x : t) x = rng.uniform() < 0.8 ? (int32_t)rng.below(3) : (int32_t)rng.below(V);
    return t;
}

// What an op wrote: its output buffers (results that are numbers, one-element buffers).
using Outputs = std::vector<Floats>;

// Runs `op` (which fills and returns its outputs from fixed inputs) on the serial branch, then
// on the parallel branch with 1, 2 and 3 threads, and expects every result identical.
void expect_thread_independent(const std::function<Outputs()>& op, int repeats = 3) {
    const int saved_threads = omp_get_max_threads();
    const size_t saved_threshold = parallel_min_work();
    omp_set_num_threads(1);
    const Outputs serial = op();
    parallel_min_work() = 1;
    for (int threads : {1, 2, 3})
        for (int r = 0; r < repeats; r++) {
            omp_set_num_threads(threads);
            const Outputs got = op();
            ASSERT_EQ(got.size(), serial.size());
            for (size_t k = 0; k < got.size(); k++) {
                ASSERT_EQ(got[k].size(), serial[k].size());
                EXPECT_EQ(0, std::memcmp(got[k].data(), serial[k].data(), got[k].size() * sizeof(float)))
                    << "output " << k << " with " << threads << " threads (run " << r << ") differs from serial";
            }
        }
    parallel_min_work() = saved_threshold;
    omp_set_num_threads(saved_threads);
}

TEST(ThreadedBranch, ThresholdDefaultsToParallelMinWork) { EXPECT_EQ(parallel_min_work(), PARALLEL_MIN_WORK); }

// The ops that have a fast version, once as the reference (ReferenceOps<float>) and once as
// training runs them (FastOps): the same tests on both.
template <class Ops>
class BothOps : public ::testing::Test {};
using OpSets = ::testing::Types<ReferenceOps<float>, FastOps>;
class OpSetNames {
public:
    template <class Ops>
    static std::string GetName(int) { return std::is_same<Ops, FastOps>::value ? "Fast" : "Reference"; }
};
TYPED_TEST_SUITE(BothOps, OpSets, OpSetNames);

TYPED_TEST(BothOps, LayerNorm) {
    Rng rng(2);
    const Floats x = random_floats(rng, (size_t)N * C, 2.0f), w = random_floats(rng, C), b = random_floats(rng, C);
    const Floats dout = random_floats(rng, (size_t)N * C);
    expect_thread_independent([&] {
        Floats out((size_t)N * C), mean(N), rstd(N), dx((size_t)N * C, 0.1f), dw(C, 0.2f), db(C, 0.3f);
        TypeParam::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
        TypeParam::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                                      rstd.data(), N, C, GradOut::Add);
        return Outputs{out, mean, rstd, dx, dw, db};
    });
}

TYPED_TEST(BothOps, Matmul) {
    Rng rng(3);
    const int IC = C, OC = 3 * C;
    const Floats x = random_floats(rng, (size_t)N * IC), w = random_floats(rng, (size_t)OC * IC),
                 bias = random_floats(rng, OC), dout = random_floats(rng, (size_t)N * OC);
    expect_thread_independent([&] {
        Floats out((size_t)N * OC), dx((size_t)N * IC, 0.1f), dw((size_t)OC * IC, 0.2f), db(OC, 0.3f);
        TypeParam::matmul_forward(out.data(), x.data(), w.data(), bias.data(), N, IC, OC);
        TypeParam::matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, IC, OC,
                                   GradOut::Add);
        return Outputs{out, dx, dw, db};
    });
}

TYPED_TEST(BothOps, Attention) {
    Rng rng(4);
    const Floats qkv = random_floats(rng, (size_t)N * 3 * C), dout = random_floats(rng, (size_t)N * C);
    expect_thread_independent([&] {
        Floats out((size_t)N * C), att((size_t)B * NH * Tn * Tn), dqkv((size_t)N * 3 * C, 0.1f);
        TypeParam::attention_forward(out.data(), att.data(), qkv.data(), B, Tn, C, NH);
        TypeParam::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), att.data(), B, Tn, C, NH);
        return Outputs{out, att, dqkv};
    });
}

// The MLP's fc layer with its GELU (matmul_gelu_forward) and the backward of the projection that
// reads its output (matmul_gelu_backward), as the model calls them.
TYPED_TEST(BothOps, MatmulGelu) {
    Rng rng(5);
    const int H = 4 * C;
    const Floats x = random_floats(rng, (size_t)N * C), w_fc = random_floats(rng, (size_t)H * C),
                 b_fc = random_floats(rng, H), w_proj = random_floats(rng, (size_t)C * H),
                 dout = random_floats(rng, (size_t)N * C);
    expect_thread_independent([&] {
        Floats h((size_t)N * H), pre((size_t)N * H), dpre((size_t)N * H), dw((size_t)C * H, 0.2f), db(C, 0.3f);
        TypeParam::matmul_gelu_forward(h.data(), pre.data(), x.data(), w_fc.data(), b_fc.data(), N, C, H);
        TypeParam::matmul_gelu_backward(dpre.data(), dw.data(), db.data(), dout.data(), h.data(), w_proj.data(),
                                        pre.data(), N, H, C);
        return Outputs{h, pre, dpre, dw, db};
    });
}

TYPED_TEST(BothOps, CrossEntropy) {
    Rng rng(6);
    const Floats logits0 = random_floats(rng, (size_t)N * Vp, 3.0f);
    std::vector<int32_t> targets(N);
    for (int32_t& t : targets) t = (int32_t)rng.below(V);
    expect_thread_independent([&] {
        Floats losses(N), logits = logits0;
        TypeParam::crossentropy_forward_backward(losses.data(), logits.data(), targets.data(), 1.0f / N, N, V, Vp);
        return Outputs{losses, logits};
    });
}

// Runs `body` (which exits with 0 for success) in a fresh process, so a crash in the code under
// test fails this one test instead of killing the whole binary.
#define EXPECT_IN_CHILD_PROCESS(body)                             \
    do {                                                          \
        GTEST_FLAG_SET(death_test_style, "threadsafe");           \
        EXPECT_EXIT({ body; }, ::testing::ExitedWithCode(0), ""); \
    } while (0)

// The L2 norm (sum_of_squares, in 65536-element chunks) of a vector of several chunks: it must
// match a direct sum on every branch and thread count, and be the same bits on all of them.
TYPED_TEST(BothOps, Norm) {
    EXPECT_IN_CHILD_PROCESS({
        Rng rng(8);
        const size_t n = 200003;
        const Floats x = random_floats(rng, n);
        long double direct = 0;
        for (float v : x) direct += (long double)v * v;
        const double want = std::sqrt((double)direct);
        bool ok = true;
        double first = 0;
        for (size_t threshold : {PARALLEL_MIN_WORK, size_t(1)})
            for (int threads : {1, 2, 3}) {
                parallel_min_work() = threshold;
                omp_set_num_threads(threads);
                const double s = TypeParam::norm(x);
                if (threshold == PARALLEL_MIN_WORK && threads == 1) first = s;
                ok = ok && std::fabs(s - want) <= 1e-12 * want && std::memcmp(&s, &first, sizeof s) == 0;
                std::fprintf(stderr, "norm: threshold %zu, %d threads: %.17g (direct %.17g)\n", threshold, threads, s,
                             want);
            }
        std::exit(ok ? 0 : 1);
    });
}

// The reference ops the fast ops do not replace (training runs them as they are).

TEST(ThreadedBranch, Encoder) {
    Rng rng(1);
    const std::vector<int32_t> tokens = repeated_tokens(rng);
    const Floats wte = random_floats(rng, (size_t)Vp * C), wpe = random_floats(rng, (size_t)Tn * C);
    const Floats dout = random_floats(rng, (size_t)N * C), dwte0 = random_floats(rng, (size_t)Vp * C);
    expect_thread_independent([&] {
        Floats out((size_t)N * C), dwte = dwte0, dwpe((size_t)Tn * C, 0.5f);
        encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);
        for (int k = 0; k < 3; k++)  // accumulating: a lost or reordered addition shows
            encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, Tn, C);
        return Outputs{out, dwte, dwpe};
    });
}

TEST(ThreadedBranch, Residual) {
    Rng rng(5);
    const size_t n = (size_t)N * C;
    const Floats x = random_floats(rng, n), f = random_floats(rng, n), dout = random_floats(rng, n);
    expect_thread_independent([&] {
        Floats r(n), df(n, 0.3f);
        residual_forward(r.data(), x.data(), f.data(), 0.3f, n);
        residual_backward(df.data(), dout.data(), 0.3f, n);
        return Outputs{r, df};
    });
}

TEST(ThreadedBranch, AdamW) {
    Rng rng(7);
    const size_t n = 200003;  // not a multiple of any thread count
    const Floats p0 = random_floats(rng, n), g = random_floats(rng, n, 1e-3f);
    const AdamWHyper h{1e-3, 0.9, 0.95, 1e-8, 0.1};
    expect_thread_independent([&] {
        Floats p = p0, m(n, 0.0f), v(n, 0.0f);
        for (int t = 1; t <= 2; t++) adamw_update(p.data(), g.data(), m.data(), v.data(), n, h, t, 0.7);
        return Outputs{p, m, v};
    });
}

// The tangents of measure/stability.h (their loops are always parallel).
TEST(ThreadedBranch, Tangents) {
    Rng rng(10);
    const Floats x = random_floats(rng, (size_t)N * C, 2.0f), w = random_floats(rng, C), b = random_floats(rng, C);
    const Floats qkv = random_floats(rng, (size_t)N * 3 * C), dx = random_floats(rng, (size_t)N * C),
                 dqkv = random_floats(rng, (size_t)N * 3 * C);
    Floats y((size_t)N * C), mean(N), rstd(N), out((size_t)N * C), att((size_t)B * NH * Tn * Tn);
    layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    attention_forward(out.data(), att.data(), qkv.data(), B, Tn, C, NH);
    expect_thread_independent([&] {
        Floats ln((size_t)N * C), attn((size_t)N * C);
        stability::layernorm_tangent(ln.data(), dx.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
        stability::attention_tangent(attn.data(), dqkv.data(), qkv.data(), att.data(), B, Tn, C, NH);
        return Outputs{ln, attn};
    });
}

// The diagnostics' reductions over rows and heads (always parallel): the attention-logit
// maximum and the output-logit statistics, whose mean log-partition is a sum over rows (2000
// of them, enough that a sum regrouped by thread rounds differently).
TEST(ThreadedBranch, Diagnostics) {
    Rng rng(11);
    const int rows = 2000;
    const Floats qkv = random_floats(rng, (size_t)N * 3 * C), logits = random_floats(rng, (size_t)rows * Vp, 7.0f);
    auto as_floats = [](double v) {  // a double's 8 bytes, to compare bit for bit
        Floats f(2);
        std::memcpy(f.data(), &v, sizeof v);
        return f;
    };
    expect_thread_independent([&] {
        const LogitStats s = diag::logit_statistics(logits.data(), rows, V, Vp);
        return Outputs{as_floats(diag::attention_logit_max(qkv.data(), B, Tn, C, NH)), as_floats(s.logit_max),
                       as_floats(s.log_z_mean)};
    });
}

// gemm splits the output among the threads when M·N·K ≥ 2^20 (no threshold to lower): products
// of that size, with many column tiles and two k panels, in both element types.
TEST(ThreadedBranch, Gemm) {
    Rng rng(9);
    const int M = 70, Nn = 1100, K = 300;
    const Floats A = random_floats(rng, (size_t)K * M), Bm = random_floats(rng, (size_t)K * Nn),
                 C0 = random_floats(rng, (size_t)M * Nn);
    expect_thread_independent([&] {
        Floats c1 = C0, c2 = C0;
        gemm<float>(true, false, M, Nn, K, A.data(), M, Bm.data(), Nn, 1.0f, c1.data(), Nn);
        gemm<float>(true, true, M, Nn, K, A.data(), M, Bm.data(), K, 1.0f, c2.data(), Nn);
        return Outputs{c1, c2};
    });
    const std::vector<double> Ad(A.begin(), A.end()), Bd(Bm.begin(), Bm.end()), Cd(C0.begin(), C0.end());
    const int saved_threads = omp_get_max_threads();
    std::vector<double> serial = Cd;
    omp_set_num_threads(1);
    gemm<double>(true, false, M, Nn, K, Ad.data(), M, Bd.data(), Nn, 1.0, serial.data(), Nn);
    for (int threads : {2, 3}) {
        std::vector<double> got = Cd;
        omp_set_num_threads(threads);
        gemm<double>(true, false, M, Nn, K, Ad.data(), M, Bd.data(), Nn, 1.0, got.data(), Nn);
        EXPECT_EQ(0, std::memcmp(got.data(), serial.data(), got.size() * sizeof(double))) << threads << " threads";
    }
    omp_set_num_threads(saved_threads);
}

}  // namespace

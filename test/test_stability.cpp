// The diagnostics of measure/stability.h against independent computations:
//   * the docs/statistics.md statistics against direct two-pass formulas and a hand-worked tensor;
//   * the exact tangent pass (JVP) of every block and residual step against a dense
//     central-difference Jacobian of a tiny float64 model, for every placement and Δt;
//   * the sensitivity estimate (mean, max of ‖J v‖) against the same dense Jacobian applied to
//     the same directions, and the float model against the double one;
//   * the gradient norms and the output-uncertainty pass against direct computations;
//   * the measurements of diagnostics.h (attention-logit maximum, output-logit statistics,
//     per-sequence perplexity, RMS and scale-free gradients) and the per-block norms and the
//     relative noise amplification of measure/stability.h, against hand-worked values, finite
//     differences or the direct formulas.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "gpt2_cpu.h"
#include "measure/stability.h"

namespace {

// The models here are tiny: one thread avoids thousands of OpenMP fork/joins over a few rows,
// which cost far more than the work on a busy machine.
const int one_thread = (omp_set_num_threads(1), 1);

// ---------------------------------------------------------------------------------------------
// Statistics

// Direct, two-pass versions of docs/statistics.md's formulas.
StreamStats direct_stats(const std::vector<double>& x, int N, int C) {
    StreamStats s;
    for (double v : x) s.mean_abs += std::fabs(v);
    s.mean_abs /= (double)N * C;
    for (int n = 0; n < N; n++) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++) mean += x[n * C + c] / C;
        for (int c = 0; c < C; c++) var += (x[n * C + c] - mean) * (x[n * C + c] - mean) / C;
        s.entry_var += var / N;
    }
    for (int c = 0; c < C; c++) {
        double mean = 0, var = 0;
        for (int n = 0; n < N; n++) mean += x[n * C + c] / N;
        for (int n = 0; n < N; n++) var += (x[n * C + c] - mean) * (x[n * C + c] - mean) / N;
        s.data_var += var / C;
    }
    return s;
}

TEST(Statistics, HandWorkedTensor) {
    // Rows (1, -1) and (3, 5): |x| mean 2.5; row variances 1 and 1; column variances 1 and 9.
    const std::vector<float> x = {1, -1, 3, 5};
    const StreamStats s = stream_statistics(x.data(), 2, 2);
    EXPECT_DOUBLE_EQ(s.mean_abs, 2.5);
    EXPECT_DOUBLE_EQ(s.entry_var, 1.0);
    EXPECT_DOUBLE_EQ(s.data_var, 5.0);
}

TEST(Statistics, MatchDirectFormulasOnKnownTensors) {
    Rng rng(11);
    for (auto [N, C] : {std::pair{1, 7}, std::pair{5, 3}, std::pair{64, 48}}) {
        std::vector<double> x(N * C);
        for (double& v : x) v = 3.0 + 2.0 * rng.normal();  // an offset, so mean and variance differ
        const StreamStats got = stream_statistics(x.data(), N, C), want = direct_stats(x, N, C);
        EXPECT_NEAR(got.mean_abs, want.mean_abs, 1e-12 * want.mean_abs) << N << "x" << C;
        EXPECT_NEAR(got.entry_var, want.entry_var, 1e-10 * (1 + want.entry_var)) << N << "x" << C;
        EXPECT_NEAR(got.data_var, want.data_var, 1e-10 * (1 + want.data_var)) << N << "x" << C;
    }
    // Constant rows have no spread inside a token; identical rows none across tokens.
    const std::vector<double> rows = {2, 2, 2, -1, -1, -1};
    EXPECT_DOUBLE_EQ(stream_statistics(rows.data(), 2, 3).entry_var, 0.0);
    const std::vector<double> same = {1, 2, 3, 1, 2, 3};
    EXPECT_DOUBLE_EQ(stream_statistics(same.data(), 2, 3).data_var, 0.0);
}

// ---------------------------------------------------------------------------------------------
// A tiny model with every parameter non-trivial, in float and double.

struct Tiny {
    ModelConfig cfg;
    std::vector<float> params;
    std::vector<int32_t> tokens, targets;
    int B = 2, T = 3;
};

Tiny make_tiny(Placement placement, float dt, int L = 2) {
    Tiny t;
    t.cfg.maxT = 4; t.cfg.V = 16; t.cfg.Vp = 16; t.cfg.L = L; t.cfg.NH = 2; t.cfg.C = 8;
    t.cfg.placement = placement;
    t.cfg.dt = dt;
    t.params.resize(num_parameters(t.cfg));
    init_parameters(t.cfg, t.params.data(), 5);
    // Larger embeddings, biases and non-unit LN weights, so every term of every Jacobian matters.
    Rng rng(99);
    ParamTensors<float> p = param_tensors(t.params.data(), t.cfg);
    auto fill = [&](float* x, size_t n, double mean, double std) {
        for (size_t i = 0; i < n; i++) x[i] = (float)(mean + std * rng.normal());
    };
    const size_t C = t.cfg.C, LC = (size_t)L * C;
    fill(p.wte, (size_t)t.cfg.Vp * C, 0, 0.5);
    fill(p.wpe, (size_t)t.cfg.maxT * C, 0, 0.5);
    fill(p.qkvw, LC * 3 * C, 0, 0.3);
    fill(p.attprojw, LC * C, 0, 0.3);
    fill(p.fcw, LC * 4 * C, 0, 0.3);
    fill(p.fcprojw, LC * 4 * C, 0, 0.2);
    fill(p.qkvb, LC * 3, 0, 0.1);
    fill(p.attprojb, LC, 0, 0.1);
    fill(p.fcb, LC * 4, 0, 0.1);
    fill(p.fcprojb, LC, 0, 0.1);
    for (float* w : {p.ln1w, p.ln2w}) fill(w, LC, 1, 0.2);
    for (float* b : {p.ln1b, p.ln2b}) fill(b, LC, 0, 0.1);
    fill(p.lnfw, C, 1, 0.2);
    fill(p.lnfb, C, 0, 0.1);
    if (placement == Placement::Peri) {
        for (float* w : {p.ln1ow, p.ln2ow}) fill(w, LC, 1, 0.2);
        for (float* b : {p.ln1ob, p.ln2ob}) fill(b, LC, 0, 0.1);
    }
    for (int i = 0; i < t.B * t.T; i++) {
        t.tokens.push_back((int32_t)rng.below(t.cfg.V));
        t.targets.push_back((int32_t)rng.below(t.cfg.V));
    }
    return t;
}

template <typename T>
CpuModel<T> load(const Tiny& t) {
    CpuModel<T> m(t.cfg, t.B, t.T);
    std::copy(t.params.begin(), t.params.end(), m.params.begin());
    m.forward(t.tokens.data(), t.targets.data());
    return m;
}

// Dense Jacobian (NC × NC, row-major: J[out][in]) of `f`, a map from (N,C) to (N,C) evaluated by
// running part of the model, by central differences with step h.
template <typename F>
std::vector<double> dense_jacobian(const std::vector<double>& x, F f, double h) {
    const size_t n = x.size();
    std::vector<double> J(n * n), xp = x;
    for (size_t j = 0; j < n; j++) {
        xp[j] = x[j] + h;
        const std::vector<double> plus = f(xp);
        xp[j] = x[j] - h;
        const std::vector<double> minus = f(xp);
        xp[j] = x[j];
        for (size_t i = 0; i < n; i++) J[i * n + j] = (plus[i] - minus[i]) / (2 * h);
    }
    return J;
}

std::vector<double> jacobian_times(const std::vector<double>& J, const std::vector<double>& v) {
    const size_t n = v.size();
    std::vector<double> y(n, 0.0);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) y[i] += J[i * n + j] * v[j];
    return y;
}

double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double d = 0, r = 0;
    for (size_t i = 0; i < a.size(); i++) {
        d += (a[i] - b[i]) * (a[i] - b[i]);
        r += b[i] * b[i];
    }
    return std::sqrt(d / r);
}

// One residual step of block l (half 0 attention, 1 MLP), or the whole block, of the model on
// x (N,C), through the model's own run_step; the output (N,C) is valid until that step runs
// again.
template <typename T>
const T* run_step(CpuModel<T>& m, int l, int half, const T* x) {
    return m.run_step(l, (Half)half, x);
}
template <typename T>
const T* run_block(CpuModel<T>& m, int l, const T* x) {
    return run_step(m, l, 1, run_step(m, l, 0, x));
}

// The three Jacobians of block l: 0 attention step, 1 MLP step, 2 whole block, each at the
// point of the model's forward on the tiny batch. Restores the model's activations afterwards.
std::vector<std::vector<double>> block_jacobians(CpuModel<double>& m, const Tiny& t, int l) {
    const size_t NC = (size_t)m.N * m.cfg.C;
    const std::vector<double> x(m.stream(l), m.stream(l) + NC);
    const std::vector<double> h(m.half_stream(2 * l + 1), m.half_stream(2 * l + 1) + NC);
    auto run = [&](int which) {
        return [&, which](const std::vector<double>& in) {
            const double* out = which == 2 ? run_block(m, l, in.data()) : run_step(m, l, which, in.data());
            return std::vector<double>(out, out + NC);
        };
    };
    std::vector<std::vector<double>> J = {dense_jacobian(x, run(0), 1e-5), dense_jacobian(h, run(1), 1e-5),
                                          dense_jacobian(x, run(2), 1e-5)};
    m.forward(t.tokens.data(), t.targets.data());
    return J;
}

// A step run on its own, on a copy of the input the forward pass gave it, must give every
// half-block point of the stream of that forward, bit for bit, in every placement and on both
// CPU op sets.
template <typename T>
void expect_run_step_reproduces_forward(Placement placement) {
    const Tiny t = make_tiny(placement, 0.5f);
    CpuModel<T> m = load<T>(t);
    const int L = m.cfg.L;
    const size_t NC = (size_t)m.N * m.cfg.C;
    std::vector<std::vector<T>> points;
    for (int j = 0; j <= 2 * L; j++) points.emplace_back(m.half_stream(j), m.half_stream(j) + NC);
    for (int j = 1; j <= 2 * L; j++) {
        const T* out = run_step(m, (j - 1) / 2, (j - 1) % 2, points[j - 1].data());
        for (size_t k = 0; k < NC; k++)
            ASSERT_EQ(out[k], points[j][k]) << placement_name(placement) << ", point " << j << " [" << k << "]";
    }
}

TEST(StreamPoints, RunStepReproducesTheForwardPassBitForBit) {
    for (Placement p : {Placement::Pre, Placement::Post, Placement::Peri}) {
        expect_run_step_reproduces_forward<double>(p);
        expect_run_step_reproduces_forward<float>(p);
    }
}

using Case = std::tuple<Placement, float>;

class Sensitivity : public ::testing::TestWithParam<Case> {};

TEST_P(Sensitivity, TangentPassMatchesDenseFiniteDifferenceJacobian) {
    const auto [placement, dt] = GetParam();
    const Tiny t = make_tiny(placement, dt);
    CpuModel<double> m = load<double>(t);
    const size_t NC = (size_t)m.N * m.cfg.C;
    stability::TangentScratch<double> scratch(NC);
    Rng rng(3);
    for (int l = 0; l < m.cfg.L; l++) {
        const std::vector<std::vector<double>> J = block_jacobians(m, t, l);
        for (int k = 0; k < 3; k++) {
            std::vector<double> v(NC), y(NC), mid(NC);
            for (double& x : v) x = rng.normal();
            for (int which = 0; which < 2; which++) {
                stability::step_jvp(m, l, which, v.data(), y.data(), scratch);
                EXPECT_LT(rel_diff(y, jacobian_times(J[which], v)), 1e-7) << "layer " << l << " step " << which;
            }
            stability::block_jvp(m, l, v.data(), y.data(), mid.data(), scratch);
            EXPECT_LT(rel_diff(y, jacobian_times(J[2], v)), 1e-7) << "layer " << l << " block";
            EXPECT_LT(rel_diff(mid, jacobian_times(J[0], v)), 1e-7) << "layer " << l << " block's attention step";
        }
    }
}

TEST_P(Sensitivity, EstimateMatchesDenseJacobianOnTheSameDirections) {
    const auto [placement, dt] = GetParam();
    const Tiny t = make_tiny(placement, dt);
    CpuModel<double> m = load<double>(t);
    const int N = m.N, C = m.cfg.C, K = 4;
    Rng rng(17);
    const stability::Sensitivity got = stability::local_sensitivity(m, K, rng);
    ASSERT_EQ(got.block_mean.size(), (size_t)m.cfg.L);
    ASSERT_EQ(got.step_mean.size(), (size_t)(2 * m.cfg.L));

    Rng replay(17);  // the same directions, in the documented order
    for (int l = 0; l < m.cfg.L; l++) {
        const std::vector<std::vector<double>> J = block_jacobians(m, t, l);
        double sum[3] = {0, 0, 0}, max[3] = {0, 0, 0};  // attention step, MLP step, block
        auto add = [&](int which, const std::vector<double>& y) {
            for (int n = 0; n < N; n++) {
                double sq = 0;
                for (int c = 0; c < C; c++) sq += y[n * C + c] * y[n * C + c];
                sum[which] += std::sqrt(sq);
                max[which] = std::max(max[which], std::sqrt(sq));
            }
        };
        for (int k = 0; k < K; k++) {
            std::vector<double> v(N * C);
            stability::random_unit_rows(v.data(), N, C, replay);
            for (int n = 0; n < N; n++) {  // the directions are unit per token
                double sq = 0;
                for (int c = 0; c < C; c++) sq += v[n * C + c] * v[n * C + c];
                ASSERT_NEAR(sq, 1.0, 1e-12);
            }
            add(0, jacobian_times(J[0], v));
            add(2, jacobian_times(J[2], v));
            stability::random_unit_rows(v.data(), N, C, replay);
            add(1, jacobian_times(J[1], v));
        }
        const double count = (double)K * N;
        EXPECT_NEAR(got.block_mean[l], sum[2] / count, 1e-7 * sum[2] / count) << l;
        EXPECT_NEAR(got.block_max[l], max[2], 1e-7 * max[2]) << l;
        EXPECT_NEAR(got.step_mean[2 * l], sum[0] / count, 1e-7 * sum[0] / count) << l;
        EXPECT_NEAR(got.step_max[2 * l], max[0], 1e-7 * max[0]) << l;
        EXPECT_NEAR(got.step_mean[2 * l + 1], sum[1] / count, 1e-7 * sum[1] / count) << l;
        EXPECT_NEAR(got.step_max[2 * l + 1], max[1], 1e-7 * max[1]) << l;
    }
}

TEST_P(Sensitivity, FloatModelAgreesWithDouble) {
    const auto [placement, dt] = GetParam();
    const Tiny t = make_tiny(placement, dt);
    CpuModel<double> md = load<double>(t);
    CpuModel<float> mf = load<float>(t);
    Rng rd(5), rf(5);
    const stability::Sensitivity d = stability::local_sensitivity(md, 3, rd);
    const stability::Sensitivity f = stability::local_sensitivity(mf, 3, rf);
    for (int l = 0; l < md.cfg.L; l++) {
        EXPECT_NEAR(f.block_mean[l], d.block_mean[l], 1e-4 * d.block_mean[l]);
        EXPECT_NEAR(f.block_max[l], d.block_max[l], 1e-4 * d.block_max[l]);
    }
}

INSTANTIATE_TEST_SUITE_P(AllPlacements, Sensitivity,
                         ::testing::Combine(::testing::Values(Placement::Pre, Placement::Post, Placement::Peri),
                                            ::testing::Values(1.0f, 0.1f)),
                         [](const ::testing::TestParamInfo<Case>& info) {
                             return std::string(placement_name(std::get<0>(info.param))) +
                                    (std::get<1>(info.param) == 1.0f ? "_dt1" : "_dt01");
                         });

// With Δt → 0 a Pre-LN or Peri-LN block tends to the identity: every token's gain tends to 1.
TEST(SensitivityLimits, SmallStepGivesGainNearOne) {
    for (Placement p : {Placement::Pre, Placement::Peri}) {
        const Tiny t = make_tiny(p, 1e-6f);
        CpuModel<double> m = load<double>(t);
        Rng rng(1);
        const stability::Sensitivity s = stability::local_sensitivity(m, 2, rng);
        for (int l = 0; l < m.cfg.L; l++) {
            EXPECT_NEAR(s.block_mean[l], 1.0, 1e-4);
            EXPECT_NEAR(s.block_max[l], 1.0, 1e-4);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Gradient norms

TEST(GradNorms, StreamGradientAtEmbeddingEqualsPositionEmbeddingGradient) {
    // With B = 1, ∂loss/∂X_0[t] is exactly the gradient of wpe[t].
    for (Placement p : {Placement::Pre, Placement::Post, Placement::Peri}) {
        Tiny t = make_tiny(p, 0.5f);
        t.B = 1;
        t.tokens.resize(t.T);
        t.targets.resize(t.T);
        CpuModel<double> m = load<double>(t);
        std::fill(m.grads.begin(), m.grads.end(), 0.0);
        m.record_stream_grads(true);
        m.backward(1.0);
        ASSERT_EQ(m.stream_grad_norms().size(), (size_t)(2 * m.cfg.L + 1));
        const double wpe = std::sqrt(sum_of_squares(m.g.wpe, (size_t)t.T * m.cfg.C));
        EXPECT_NEAR(m.stream_grad_norms()[0], wpe, 1e-12 * wpe) << placement_name(p);
    }
}

TEST(GradNorms, BlockParameterNormsAddUpToTheTotal) {
    const Tiny t = make_tiny(Placement::Peri, 1.0f, 3);
    CpuModel<double> m = load<double>(t);
    std::fill(m.grads.begin(), m.grads.end(), 0.0);
    m.backward(1.0);
    const std::vector<double> blocks = stability::block_param_grad_norms(m);
    ASSERT_EQ(blocks.size(), 3u);
    const auto sizes = param_sizes(m.cfg);
    const auto off = param_offsets(m.cfg);
    double rest = 0;
    for (int i : {P_WTE, P_WPE, P_LNFW, P_LNFB}) rest += sum_of_squares(m.grads.data() + off[i], sizes[i]);
    double total = rest;
    for (double b : blocks) total += b * b;
    EXPECT_NEAR(total, sum_of_squares(m.grads.data(), m.grads.size()), 1e-12 * total);
    // Block 1 alone, computed directly from its slices.
    double direct = 0;
    for (const double* g : {m.g.ln1w, m.g.ln1b, m.g.ln2w, m.g.ln2b, m.g.attprojb, m.g.fcprojb, m.g.ln1ow,
                            m.g.ln1ob, m.g.ln2ow, m.g.ln2ob})
        direct += sum_of_squares(g + 1 * m.cfg.C, m.cfg.C);
    const size_t C = m.cfg.C;
    direct += sum_of_squares(m.g.qkvw + 3 * C * C, 3 * C * C) + sum_of_squares(m.g.qkvb + 3 * C, 3 * C);
    direct += sum_of_squares(m.g.attprojw + C * C, C * C);
    direct += sum_of_squares(m.g.fcw + 4 * C * C, 4 * C * C) + sum_of_squares(m.g.fcb + 4 * C, 4 * C);
    direct += sum_of_squares(m.g.fcprojw + 4 * C * C, 4 * C * C);
    EXPECT_NEAR(blocks[1], std::sqrt(direct), 1e-12 * blocks[1]);
}

// ---------------------------------------------------------------------------------------------
// Output uncertainty

TEST(Uncertainty, MatchesDirectComputationAndRestoresTheCleanForward) {
    const Tiny t = make_tiny(Placement::Pre, 1.0f, 3);
    CpuModel<double> m = load<double>(t);
    const int L = m.cfg.L, N = m.N, C = m.cfg.C;
    const size_t NC = (size_t)N * C;
    std::vector<std::vector<double>> clean;
    for (int i = 0; i <= L; i++) clean.emplace_back(m.stream(i), m.stream(i) + NC);

    const double sigma = 0.05;
    Rng rng(21);
    const stability::Uncertainty u = stability::output_uncertainty(m, sigma, 3, rng);
    for (int i = 0; i <= L; i++)
        for (size_t k = 0; k < NC; k++) ASSERT_EQ(m.stream(i)[k], clean[i][k]) << "stream " << i << " not restored";

    // Replay: the same noise, each sample through a fresh model.
    Rng replay(21);
    std::vector<double> sum(L + 1, 0), sum_sq(L + 1, 0);
    for (int s = 0; s < 3; s++) {
        std::vector<double> x0(NC);
        for (size_t k = 0; k < NC; k++) x0[k] = clean[0][k] + sigma * replay.normal();
        CpuModel<double> fresh = load<double>(t);
        fresh.run_blocks_from(x0.data());
        for (int i = 0; i <= L; i++)
            for (int n = 0; n < N; n++) {
                double sq = 0;
                for (int c = 0; c < C; c++) {
                    const double d = fresh.stream(i)[n * C + c] - clean[i][n * C + c];
                    sq += d * d;
                }
                sum[i] += std::sqrt(sq);
                sum_sq[i] += sq;
            }
    }
    for (int i = 0; i <= L; i++) {
        EXPECT_NEAR(u.mean_dx[i], sum[i] / (3 * N), 1e-12) << i;
        EXPECT_NEAR(u.w2_bound[i], std::sqrt(sum_sq[i] / (3 * N)), 1e-12) << i;
        EXPECT_LE(u.mean_dx[i], u.w2_bound[i] + 1e-15);  // mean ≤ root mean square
    }
    // At the embedding the change is the noise itself: about σ·√C per token.
    EXPECT_NEAR(u.w2_bound[0], sigma * std::sqrt((double)C), 0.35 * sigma * std::sqrt((double)C));
}

TEST(Uncertainty, ZeroNoiseGivesZero) {
    const Tiny t = make_tiny(Placement::Post, 0.1f);
    CpuModel<float> m = load<float>(t);
    Rng rng(1);
    const stability::Uncertainty u = stability::output_uncertainty(m, 0.0, 2, rng);
    for (double v : u.w2_bound) EXPECT_EQ(v, 0.0);
}

// ---------------------------------------------------------------------------------------------
// The measurements of diagnostics.h and the per-block ones of measure/stability.h

TEST(AttentionLogitMax, HandBuiltQkvHonoursTheCausalMaskHeadsAndScale) {
    // B = 2, T = 2, C = 4, NH = 2 (hs = 2, scale 1/√2); every entry 0 unless set.
    const int B = 2, T = 2, C = 4, NH = 2;
    std::vector<double> qkv(B * T * 3 * C, 0.0);
    auto q = [&](int b, int t, int h) { return &qkv[(b * T + t) * 3 * C + h * 2]; };
    auto k = [&](int b, int t, int h) { return &qkv[(b * T + t) * 3 * C + C + h * 2]; };
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) qkv[(b * T + t) * 3 * C + 2 * C + c] = 1000;  // v never enters
    q(0, 0, 0)[0] = 10;  // with k(0, 1, 0) a product of 100, but t' = 1 > t = 0: masked
    k(0, 1, 0)[0] = 10;
    q(1, 1, 1)[0] = 1;  // batch 1, head 1, t = 1, t' = 0: (1, 2)·(3, 1) = 5, the answer
    q(1, 1, 1)[1] = 2;
    k(1, 0, 1)[0] = 3;
    k(1, 0, 1)[1] = 1;
    q(1, 1, 0)[0] = 4;  // head 0 of the same pair: (4, 0)·(−1, 0) = −4; mixing heads would give 1
    k(1, 0, 0)[0] = -1;
    EXPECT_NEAR(diag::attention_logit_max(qkv.data(), B, T, C, NH), 5 / std::sqrt(2.0), 1e-14);
    // A single negative logit stays negative: (1, 0)·(−2, 0)/√2.
    const std::vector<double> one = {1, 0, -2, 0, 9, 9};
    EXPECT_NEAR(diag::attention_logit_max(one.data(), 1, 1, 2, 1), -2 / std::sqrt(2.0), 1e-14);
}

TEST(AttentionLogitMax, ZeroQueryKeyWeightsGiveTheBiasProduct) {
    // With W_qkv = 0 every token's q and k are the bias, so every logit of head h is
    // q_h·k_h/√hs and the block's maximum is the largest over the heads.
    for (Placement p : {Placement::Pre, Placement::Post, Placement::Peri}) {
        Tiny t = make_tiny(p, 0.5f, 3);
        ParamTensors<float> w = param_tensors(t.params.data(), t.cfg);
        const int C = t.cfg.C, NH = t.cfg.NH, hs = C / NH;
        std::fill(w.qkvw, w.qkvw + (size_t)t.cfg.L * 3 * C * C, 0.0f);
        CpuModel<double> m = load<double>(t);
        const std::vector<double> got = m.forward_stats().attn_logit_max;
        ASSERT_EQ(got.size(), 3u);
        for (int l = 0; l < t.cfg.L; l++) {
            const double* bias = m.p.qkvb + (size_t)l * 3 * C;
            double want = -INFINITY;
            for (int h = 0; h < NH; h++) {
                double s = 0;
                for (int i = 0; i < hs; i++) s += bias[h * hs + i] * bias[C + h * hs + i];
                want = std::max(want, s / std::sqrt((double)hs));
            }
            EXPECT_NEAR(got[l], want, 1e-12) << placement_name(p) << " block " << l;
        }
    }
}

TEST(LogitStatistics, HandWorkedRowsIgnoreThePadding) {
    // V = 2 real tokens, Vp = 3: the third column is padding. Row 0: log(e^0 + e^ln3) = ln 4;
    // row 1: 5 + ln 2. Largest real logit 5.
    const std::vector<double> z = {0, std::log(3.0), 100, 5, 5, 200};
    const LogitStats s = diag::logit_statistics(z.data(), 2, 2, 3);
    EXPECT_DOUBLE_EQ(s.logit_max, 5.0);
    EXPECT_NEAR(s.log_z_mean, (std::log(4.0) + 5 + std::log(2.0)) / 2, 1e-14);
}

TEST(LogitStatistics, LogPartitionIsLossPlusTargetLogit) {
    // loss_n = log Z_n − z_n[target]: the mean log-partition from the model's own losses.
    for (Placement p : {Placement::Pre, Placement::Peri}) {
        const Tiny t = make_tiny(p, 1.0f);
        CpuModel<double> m = load<double>(t);
        const int Vp = m.cfg.Vp;
        double want = 0, largest = -INFINITY;
        for (int n = 0; n < m.N; n++) {
            want += (m.losses_data()[n] + m.logits_data()[(size_t)n * Vp + t.targets[n]]) / m.N;
            for (int v = 0; v < m.cfg.V; v++) largest = std::max(largest, m.logits_data()[(size_t)n * Vp + v]);
        }
        const LogitStats s = m.forward_stats().logits;
        EXPECT_NEAR(s.log_z_mean, want, 1e-12) << placement_name(p);
        EXPECT_EQ(s.logit_max, largest) << placement_name(p);
    }
}

TEST(SequencePerplexity, HandWorked) {
    // Two sequences of two tokens: mean losses ln 3 and ln 2, so Σ exp = 3 + 2.
    const std::vector<double> losses = {0, 2 * std::log(3.0), std::log(2.0), std::log(2.0)};
    EXPECT_NEAR(diag::sequence_perplexity_sum(losses.data(), 2, 2), 5.0, 1e-14);
}

// Mean loss of the tiny batch as a function of the residual stream at half-block point j
// (x (N,C) replaces it): runs the rest of the model and the head (LNf, tied logits, loss).
double loss_from_half_point(CpuModel<double>& m, const Tiny& t, int j, const std::vector<double>& x) {
    const int L = m.cfg.L, N = m.N, C = m.cfg.C, Vp = m.cfg.Vp;
    std::vector<double> cur = x;
    auto keep = [&](const double* out) { cur.assign(out, out + (size_t)N * C); };
    int next_block = j / 2;
    if (j % 2 == 1) {
        keep(run_step(m, (j - 1) / 2, 1, cur.data()));
        next_block = (j + 1) / 2;
    }
    for (int l = next_block; l < L; l++) keep(run_block(m, l, cur.data()));
    std::vector<double> u((size_t)N * C), mean(N), rstd(N), logits((size_t)N * Vp), losses(N);
    layernorm_forward(u.data(), mean.data(), rstd.data(), cur.data(), m.p.lnfw, m.p.lnfb, N, C);
    matmul_forward(logits.data(), u.data(), m.p.wte, (const double*)nullptr, N, C, Vp);
    crossentropy_forward(losses.data(), logits.data(), t.targets.data(), N, m.cfg.V, Vp);
    double total = 0;
    for (double l : losses) total += l;
    return total / N;
}

TEST(ScaledGradients, MatchFiniteDifferenceGradientTimesRms) {
    // At every half-block point j: ‖∂L/∂X_j‖ by central differences over all N·C entries, and
    // RMS(X_j) = sqrt(mean X²) written out; grad_norm_scaled = their product.
    for (Placement p : {Placement::Pre, Placement::Post, Placement::Peri}) {
        const Tiny t = make_tiny(p, 0.5f);
        CpuModel<double> m = load<double>(t);
        const int L = m.cfg.L;
        const size_t NC = (size_t)m.N * m.cfg.C;
        const std::vector<double> rms = m.forward_stats().rms;
        std::vector<std::vector<double>> points;
        for (int j = 0; j <= 2 * L; j++) points.emplace_back(m.half_stream(j), m.half_stream(j) + NC);
        std::fill(m.grads.begin(), m.grads.end(), 0.0);
        m.record_stream_grads(true);
        m.backward(1.0);
        const std::vector<double> scaled = diag::products(m.stream_grad_norms(), rms);
        ASSERT_EQ(scaled.size(), (size_t)(2 * L + 1));
        for (int j = 0; j <= 2 * L; j++) {
            double sq = 0, grad_sq = 0;
            for (double v : points[j]) sq += v * v;
            std::vector<double> x = points[j];
            for (size_t k = 0; k < NC; k++) {
                const double h = 1e-5;
                x[k] = points[j][k] + h;
                const double plus = loss_from_half_point(m, t, j, x);
                x[k] = points[j][k] - h;
                const double minus = loss_from_half_point(m, t, j, x);
                x[k] = points[j][k];
                grad_sq += std::pow((plus - minus) / (2 * h), 2);
            }
            const double want_rms = std::sqrt(sq / NC), want = std::sqrt(grad_sq) * want_rms;
            EXPECT_NEAR(rms[j], want_rms, 1e-13 * want_rms) << placement_name(p) << " j " << j;
            EXPECT_NEAR(scaled[j], want, 1e-7 * want) << placement_name(p) << " j " << j;
        }
    }
}

TEST(BlockNorms, ParameterNormOfConstantWeightsCountsTheBlocksParameters) {
    // Every parameter 2: ‖θ_l‖ = 2·sqrt(number of block parameters), counted by hand for C = 8:
    // qkv 3C² + 3C, attention projection C² + C, fc 4C² + 4C, fc projection 4C² + C, two
    // LayerNorms 4C, and with Peri-LN two output LayerNorms 4C more.
    for (Placement p : {Placement::Pre, Placement::Peri}) {
        Tiny t = make_tiny(p, 1.0f, 3);
        std::fill(t.params.begin(), t.params.end(), 2.0f);
        CpuModel<double> m = load<double>(t);
        const double C = 8, count = 12 * C * C + 13 * C + (p == Placement::Peri ? 4 * C : 0);
        const std::vector<double> norms = m.forward_stats().param_norm;
        ASSERT_EQ(norms.size(), 3u);
        for (double n : norms) EXPECT_NEAR(n, 2 * std::sqrt(count), 1e-12) << placement_name(p);
    }
}

TEST(FcprojGradNorm, MatchesFiniteDifferences) {
    // ‖∂L/∂W_fcproj‖ of each block against central differences over its 4C·C weights.
    for (Placement p : {Placement::Pre, Placement::Post, Placement::Peri}) {
        const Tiny t = make_tiny(p, 0.5f);
        CpuModel<double> m = load<double>(t);
        std::fill(m.grads.begin(), m.grads.end(), 0.0);
        m.backward(1.0);
        const std::vector<double> got = m.fcproj_grad_norms();
        const std::vector<double> whole = stability::block_param_grad_norms(m);
        const size_t size = (size_t)4 * m.cfg.C * m.cfg.C;
        for (int l = 0; l < m.cfg.L; l++) {
            double sq = 0;
            for (size_t k = 0; k < size; k++) {
                double& w = m.p.fcprojw[l * size + k];
                const double saved = w, h = 1e-5;
                w = saved + h;
                const double plus = m.forward(t.tokens.data(), t.targets.data());
                w = saved - h;
                const double minus = m.forward(t.tokens.data(), t.targets.data());
                w = saved;
                sq += std::pow((plus - minus) / (2 * h), 2);
            }
            EXPECT_NEAR(got[l], std::sqrt(sq), 1e-7 * std::sqrt(sq)) << placement_name(p) << " block " << l;
            EXPECT_LT(got[l], whole[l]);  // a part of the block's gradient
        }
    }
}

TEST(MlpHiddenRms, IsTheRmsOfGeluOfTheFcActivation) {
    const Tiny t = make_tiny(Placement::Pre, 1.0f);
    CpuModel<double> m = load<double>(t);
    const std::vector<double> got = m.forward_stats().mlp_hidden_rms;
    for (int l = 0; l < m.cfg.L; l++) {
        double sq = 0;
        const std::vector<double>& fc = m.block_activations(l).fc;
        for (double x : fc) {
            const double y = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
            sq += y * y;
        }
        const double want = std::sqrt(sq / fc.size());
        EXPECT_NEAR(got[l], want, 1e-12 * want) << l;
    }
}

TEST(RelativeAmplification, IdentityBlocksGiveTheSampleRmsOfTheNoise) {
    // Pre-LN with Δt = 0 leaves X_i = X_0: the noise reaches every layer unchanged, so each
    // relative amplification is sqrt(mean ε²) of the unit draws, about 1.
    Tiny t = make_tiny(Placement::Pre, 0.0f, 3);
    CpuModel<double> m = load<double>(t);
    const size_t NC = (size_t)m.N * m.cfg.C;
    const int samples = 4;
    Rng rng(8), replay(8);
    const stability::Uncertainty u = stability::relative_output_uncertainty(m, 0.01, samples, rng);
    double sq = 0;
    for (size_t k = 0; k < samples * NC; k++) sq += std::pow(replay.normal(), 2);
    const double want = std::sqrt(sq / (samples * NC));
    ASSERT_EQ(u.relative_amplification.size(), 4u);
    for (double a : u.relative_amplification) EXPECT_NEAR(a, want, 1e-9);
    EXPECT_NEAR(want, 1.0, 0.25);
    EXPECT_EQ(u.sigma_rel, 0.01);
    EXPECT_NEAR(u.sigma, 0.01 * diag::root_mean_square(m.stream(0), NC), 1e-15);
}

TEST(RelativeAmplification, IsTheW2BoundOverTheStateScaleOverTheInputRatio) {
    // Against output_uncertainty at the absolute σ = sigma_rel·RMS(X_0) with the same draws.
    const Tiny t = make_tiny(Placement::Peri, 1.0f, 3);
    CpuModel<double> m = load<double>(t), ref = load<double>(t);
    const int C = m.cfg.C;
    const size_t NC = (size_t)m.N * C;
    std::vector<double> rms;
    for (int i = 0; i <= m.cfg.L; i++) {
        double sq = 0;
        for (size_t k = 0; k < NC; k++) sq += m.stream(i)[k] * m.stream(i)[k];
        rms.push_back(std::sqrt(sq / NC));
    }
    Rng a(3), b(3);
    const stability::Uncertainty u = stability::relative_output_uncertainty(m, 0.02, 3, a);
    const stability::Uncertainty v = stability::output_uncertainty(ref, 0.02 * rms[0], 3, b);
    for (int i = 0; i <= m.cfg.L; i++) {
        EXPECT_NEAR(u.w2_bound[i], v.w2_bound[i], 1e-12 * v.w2_bound[i]) << i;
        const double want = (v.w2_bound[i] / std::sqrt((double)C) / rms[i]) / (0.02 * rms[0] / rms[0]);
        EXPECT_NEAR(u.relative_amplification[i], want, 1e-10 * want) << i;
    }
}

}  // namespace

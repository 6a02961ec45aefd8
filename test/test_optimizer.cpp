// The optimiser pieces of docs/model.md §5: the learning-rate schedule, gradient clipping, and
// CpuBackend::update (AdamW with weight decay on the 2-D tensors only) and grad_norm.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "gpt2_cpu.h"
#include "util/rng.h"
#include "training.h"

namespace {

// ---------------------------------------------------------------------------------------------
// learning_rate(s, steps, lr, lr_min, warmup)

TEST(LearningRate, WarmupRampsLinearlyFromLrOverWarmup) {
    const double lr = 6e-4, lr_min = 6e-5;
    const int warmup = 10, steps = 111;
    EXPECT_DOUBLE_EQ(learning_rate(0, steps, lr, lr_min, warmup), 6e-5);  // lr/warmup
    EXPECT_DOUBLE_EQ(learning_rate(1, steps, lr, lr_min, warmup), 1.2e-4);
    EXPECT_DOUBLE_EQ(learning_rate(4, steps, lr, lr_min, warmup), 3e-4);
    EXPECT_DOUBLE_EQ(learning_rate(9, steps, lr, lr_min, warmup), 6e-4);  // last warmup step: lr
    for (int s = 1; s < warmup; s++)
        EXPECT_NEAR(learning_rate(s, steps, lr, lr_min, warmup) - learning_rate(s - 1, steps, lr, lr_min, warmup),
                    lr / warmup, 1e-18)
            << "step " << s;
}

TEST(LearningRate, CosineDecayFromLrToLrMinAtTheLastStep) {
    const double lr = 6e-4, lr_min = 6e-5;
    const int warmup = 10, steps = 111;  // the cosine spans steps 10..110 (100 intervals)
    EXPECT_DOUBLE_EQ(learning_rate(10, steps, lr, lr_min, warmup), 6e-4);           // end of warmup: lr
    EXPECT_DOUBLE_EQ(learning_rate(35, steps, lr, lr_min, warmup),                  // a quarter of the way
                     6e-5 + 0.5 * (1 + std::sqrt(0.5)) * 5.4e-4);
    EXPECT_NEAR(learning_rate(60, steps, lr, lr_min, warmup), 3.3e-4, 1e-18);       // midpoint (lr+lr_min)/2
    EXPECT_DOUBLE_EQ(learning_rate(85, steps, lr, lr_min, warmup),                  // three quarters
                     6e-5 + 0.5 * (1 - std::sqrt(0.5)) * 5.4e-4);
    EXPECT_EQ(learning_rate(110, steps, lr, lr_min, warmup), lr_min);               // exactly lr_min
    for (int s = warmup + 1; s < steps; s++) {
        const double a = learning_rate(s - 1, steps, lr, lr_min, warmup), b = learning_rate(s, steps, lr, lr_min, warmup);
        EXPECT_LE(b, a) << "not decaying at step " << s;
        EXPECT_GE(b, lr_min) << "below lr_min at step " << s;
    }
}

TEST(LearningRate, NoWarmupStartsAtLrAndEndsAtLrMin) {
    EXPECT_DOUBLE_EQ(learning_rate(0, 5, 1e-3, 1e-4, 0), 1e-3);
    EXPECT_DOUBLE_EQ(learning_rate(2, 5, 1e-3, 1e-4, 0), 5.5e-4);  // midpoint of 4 intervals
    EXPECT_EQ(learning_rate(4, 5, 1e-3, 1e-4, 0), 1e-4);
}

TEST(LearningRate, ASingleStepAfterWarmupRunsAtLr) {
    EXPECT_EQ(learning_rate(0, 1, 1e-3, 1e-4, 0), 1e-3);   // one step in all
    EXPECT_EQ(learning_rate(3, 4, 1e-3, 1e-4, 3), 1e-3);   // three of warmup, then one
}

TEST(LearningRate, ConstantWithNoWarmupAndLrMinEqualToLr) {
    const int steps = 37;
    for (int s = 0; s < steps; s++) EXPECT_EQ(learning_rate(s, steps, 3e-4, 3e-4, 0), 3e-4) << "step " << s;
}

// ---------------------------------------------------------------------------------------------
// clip_factor(grad_norm, clip)

TEST(ClipFactor, OffWhenClipIsZero) {
    EXPECT_EQ(clip_factor(1e6, 0.0), 1.0);
    EXPECT_EQ(clip_factor(0.5, 0.0), 1.0);
}

TEST(ClipFactor, OneWhenTheNormIsNotAboveClip) {
    EXPECT_EQ(clip_factor(0.3, 1.0), 1.0);
    EXPECT_EQ(clip_factor(1.0, 1.0), 1.0);
    EXPECT_EQ(clip_factor(0.0, 1.0), 1.0);
}

TEST(ClipFactor, ClipOverNormWhenAbove) {
    EXPECT_DOUBLE_EQ(clip_factor(4.0, 1.0), 0.25);
    EXPECT_DOUBLE_EQ(clip_factor(3.0, 0.5), 1.0 / 6.0);
    EXPECT_DOUBLE_EQ(clip_factor(2.0, 1.0) * 2.0, 1.0);  // the clipped norm is exactly clip
}

// ---------------------------------------------------------------------------------------------
// CpuBackend::update and grad_norm

// The tensors docs/model.md §5 decays, by name (independent of param_decays()).
const std::set<std::string> kDecaying = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"};

ModelConfig tiny_peri() {
    ModelConfig c;
    c.V = 11; c.Vp = 16; c.maxT = 8; c.L = 2; c.NH = 2; c.C = 8;
    c.placement = Placement::Peri;  // so all 20 tensors exist
    c.dt = 0.5f;
    return c;
}

std::vector<float> random_params(size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<float> p(n);
    for (float& x : p) x = (float)((0.2 + rng.uniform()) * (rng.uniform() < 0.5 ? -1 : 1));
    return p;
}

TEST(CpuBackendUpdate, DecayTouchesOnlyTheTwoDimensionalTensors) {
    const ModelConfig cfg = tiny_peri();
    CpuBackend backend(cfg, 1, 4);
    const size_t n = num_parameters(cfg);
    const std::vector<float> p0 = random_params(n, 1);  // non-zero everywhere, biases and gains too
    backend.set_params(p0.data());
    backend.zero_grad();
    const double lr = 0.01, wd = 0.1;
    backend.update(AdamWHyper{lr, 0.9, 0.95, 1e-8, wd}, 1, 1.0);
    std::vector<float> p1(n), m(n), v(n);
    backend.get_params(p1.data());
    backend.get_moments(m.data(), v.data());
    const auto sizes = param_sizes(cfg);
    const auto offsets = param_offsets(cfg);
    int decayed = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        ASSERT_GT(sizes[i], 0u) << param_name(i);
        const bool decays = kDecaying.count(param_name(i)) > 0;
        decayed += decays;
        for (size_t k = offsets[i]; k < offsets[i] + sizes[i]; k++) {
            if (decays) {
                // exactly p·(1 − lr·wd), up to the float rounding of the result
                const double expect = p0[k] * (1.0 - lr * wd);
                ASSERT_NEAR(p1[k], expect, std::ldexp(std::fabs(expect), -23)) << param_name(i) << " entry " << k;
            } else {
                ASSERT_EQ(p1[k], p0[k]) << param_name(i) << " (no weight decay) changed at entry " << k;
            }
            ASSERT_EQ(m[k], 0.0f);
            ASSERT_EQ(v[k], 0.0f);
        }
    }
    EXPECT_EQ(decayed, 6);
}

// Two AdamW steps with non-zero gradients and grad_scale ≠ 1, against docs/model.md §5 written out in
// double for every parameter, with weight decay chosen by tensor name.
TEST(CpuBackendUpdate, TwoStepsMatchAdamWReferencePerTensor) {
    const ModelConfig cfg = tiny_peri();
    CpuBackend backend(cfg, 1, 4);
    const size_t n = num_parameters(cfg);
    const std::vector<float> p0 = random_params(n, 2);
    backend.set_params(p0.data());
    const double lr = 0.01, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, scale = 0.5;
    const auto sizes = param_sizes(cfg);
    const auto offsets = param_offsets(cfg);
    std::vector<double> rp(p0.begin(), p0.end()), rm(n, 0.0), rv(n, 0.0);
    // Size of the terms summed into m and v at the last step: the float moments can be off by
    // a float rounding of these (they may cancel), not only of the result.
    std::vector<double> m_terms(n), v_terms(n);
    for (int t = 1; t <= 2; t++) {
        const std::vector<float> g = random_params(n, 10 + t);
        std::copy(g.begin(), g.end(), backend.grads.begin());
        backend.update(AdamWHyper{lr, b1, b2, eps, wd}, t, scale);
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
            const double wdi = kDecaying.count(param_name(i)) ? wd : 0.0;
            for (size_t k = offsets[i]; k < offsets[i] + sizes[i]; k++) {
                const double gk = scale * g[k];
                m_terms[k] = b1 * std::fabs(rm[k]) + (1 - b1) * std::fabs(gk);
                v_terms[k] = b2 * rv[k] + (1 - b2) * gk * gk;
                rm[k] = b1 * rm[k] + (1 - b1) * gk;
                rv[k] = b2 * rv[k] + (1 - b2) * gk * gk;
                const double mh = rm[k] / (1 - std::pow(b1, t)), vh = rv[k] / (1 - std::pow(b2, t));
                rp[k] -= lr * (mh / (std::sqrt(vh) + eps) + wdi * rp[k]);
            }
        }
    }
    std::vector<float> p(n), m(n), v(n);
    backend.get_params(p.data());
    backend.get_moments(m.data(), v.data());
    for (int i = 0; i < NUM_PARAM_TENSORS; i++)
        for (size_t k = offsets[i]; k < offsets[i] + sizes[i]; k++) {
            ASSERT_NEAR(p[k], rp[k], 1e-6 * std::fabs(rp[k]) + 1e-8) << param_name(i) << " entry " << k;
            ASSERT_NEAR(m[k], rm[k], 1e-6 * m_terms[k]) << param_name(i) << " entry " << k;
            ASSERT_NEAR(v[k], rv[k], 1e-6 * v_terms[k]) << param_name(i) << " entry " << k;
        }
}

TEST(CpuBackendGradNorm, IsTheL2NormOfAllGradients) {
    const ModelConfig cfg = tiny_peri();
    CpuBackend backend(cfg, 1, 4);
    const std::vector<float> g = random_params(num_parameters(cfg), 3);
    std::copy(g.begin(), g.end(), backend.grads.begin());
    double sq = 0;
    for (float x : g) sq += (double)x * x;
    EXPECT_NEAR(backend.grad_norm(), std::sqrt(sq), 1e-12 * std::sqrt(sq));
    backend.zero_grad();
    EXPECT_EQ(backend.grad_norm(), 0.0);
}

// A model with more than 65536 parameters (every real one), with the default OpenMP threads:
// grad_norm must work and match the direct sum. Run in a child process so a crash fails only
// this test.
TEST(CpuBackendGradNorm, LargerModelWithDefaultThreads) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            ModelConfig cfg;
            cfg.V = 1000; cfg.Vp = 1024; cfg.maxT = 16; cfg.L = 2; cfg.NH = 4; cfg.C = 64;
            CpuBackend backend(cfg, 1, 4);
            const std::vector<float> g = random_params(num_parameters(cfg), 4);
            std::copy(g.begin(), g.end(), backend.grads.begin());
            double sq = 0;
            for (float x : g) sq += (double)x * x;
            const double norm = backend.grad_norm();
            std::exit(std::fabs(norm - std::sqrt(sq)) <= 1e-12 * std::sqrt(sq) ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
}

}  // namespace


// The whole model's gradients (CpuModel<double>) against central finite differences of the
// mean loss, for each LayerNorm placement × Δt ∈ {1, 0.1}, on a tiny configuration.
//
// Parameters start from init_parameters and are then perturbed so that no path through the
// network is trivial: LN gains 1 + N(0, 0.1), every bias N(0, 0.05), and the 2-D weights scaled
// by 5 (with std 0.02 and C = 8 some tensors' gradients are ~1e-5, where the finite differences
// are pure roundoff). EVERY entry of every tensor is checked (about 2000 per case):
//   * each entry on its own: |fd − an| <= 1e-6·|an| + 1e-9;
//   * each tensor as a whole: max |fd − an| / max |an| < 2e-6;
//   * padded wte rows V..Vp−1 and wpe rows t >= T: gradient exactly zero (and so is the FD).
// eps = 1e-5 balances truncation (~eps²) and roundoff (~1e-16·loss/eps) best for this model.
// Measured errors are printed ("[gradcheck-model] ...").
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "gpt2_cpu.h"
#include "util/rng.h"

namespace {

constexpr double kEps = 1e-5;          // finite-difference step
constexpr double kWeightScale = 5.0;   // 2-D weights: init_parameters' values times this
constexpr double kTensorTol = 2e-6;    // max |fd − an| / max |an| over a tensor
constexpr double kEntryRelTol = 1e-6;  // one entry: |fd − an| <= rel·|an| + abs
constexpr double kEntryAbsTol = 1e-9;

struct Case {
    Placement placement;
    float dt;
};

void PrintTo(const Case& c, std::ostream* os) { *os << placement_name(c.placement) << " dt=" << c.dt; }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    return std::string(placement_name(info.param.placement)) + (info.param.dt == 1.0f ? "_dt1" : "_dt0_1");
}

bool is_gain(int i) { return i == P_LN1W || i == P_LN2W || i == P_LNFW || i == P_LN1OW || i == P_LN2OW; }

class ModelGradcheck : public ::testing::TestWithParam<Case> {
protected:
    static constexpr int B = 2, Tn = 5;

    void SetUp() override {
        saved_threads = omp_get_max_threads();
        omp_set_num_threads(1);  // thousands of tiny forwards: thread start-up would dominate
        cfg.V = 11; cfg.Vp = 16; cfg.maxT = 8; cfg.L = 2; cfg.NH = 2; cfg.C = 8;
        cfg.placement = GetParam().placement;
        cfg.dt = GetParam().dt;
        std::vector<float> init(num_parameters(cfg));
        init_parameters(cfg, init.data(), 1234);
        model = std::make_unique<CpuModel<double>>(cfg, B, Tn);
        std::copy(init.begin(), init.end(), model->params.begin());
        Rng rng(99);
        const auto sizes = param_sizes(cfg);
        const auto offsets = param_offsets(cfg);
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
            double* p = model->params.data() + offsets[i];
            if (param_decays(i)) {
                for (size_t k = 0; k < sizes[i]; k++) p[k] *= kWeightScale;
                continue;
            }
            for (size_t k = 0; k < sizes[i]; k++) p[k] = is_gain(i) ? 1.0 + 0.1 * rng.normal() : 0.05 * rng.normal();
        }
        tokens.resize(B * Tn);
        targets.resize(B * Tn);
        for (int n = 0; n < B * Tn; n++) {
            tokens[n] = (int32_t)rng.below(cfg.V);
            targets[n] = (int32_t)rng.below(cfg.V);
        }
    }

    void TearDown() override { omp_set_num_threads(saved_threads); }

    double loss() { return model->forward(tokens.data(), targets.data()); }

    double fd(size_t idx) {
        double& p = model->params[idx];
        const double saved = p;
        p = saved + kEps;
        const double lp = loss();
        p = saved - kEps;
        const double lm = loss();
        p = saved;
        return (lp - lm) / (2 * kEps);
    }

    int saved_threads = 1;
    ModelConfig cfg;
    std::unique_ptr<CpuModel<double>> model;
    std::vector<int32_t> tokens, targets;
};

TEST_P(ModelGradcheck, EveryTensorAgainstFiniteDifferences) {
    std::fill(model->grads.begin(), model->grads.end(), 0.0);
    const double l0 = loss();
    ASSERT_TRUE(std::isfinite(l0));
    model->backward(1.0);
    const std::vector<double> an = model->grads;

    const auto sizes = param_sizes(cfg);
    const auto offsets = param_offsets(cfg);
    double worst_tensor = 0, worst_tensor_l2 = 0, worst_entry = 0;
    std::string worst_name;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (sizes[i] == 0) continue;
        const size_t off = offsets[i], n = sizes[i];
        double diff = 0, ref = 0, diff2 = 0, ref2 = 0;
        int bad_entries = 0;
        for (size_t k = 0; k < n; k++) {
            const double a = an[off + k], f = fd(off + k);
            const double d = std::fabs(f - a);
            diff = std::max(diff, d);
            ref = std::max(ref, std::fabs(a));
            diff2 += d * d;
            ref2 += a * a;
            worst_entry = std::max(worst_entry, d / (kEntryRelTol * std::fabs(a) + kEntryAbsTol));
            if (d > kEntryRelTol * std::fabs(a) + kEntryAbsTol && bad_entries++ < 3)
                ADD_FAILURE() << param_name(i) << "[" << k << "]: analytic " << a << " vs finite difference " << f;
            // Padded rows of wte and unused positions of wpe: exactly zero, analytically and
            // numerically (they do not enter the loss at all).
            const bool unused = (i == P_WTE && k >= (size_t)cfg.V * cfg.C) || (i == P_WPE && k >= (size_t)Tn * cfg.C);
            if (unused) {
                EXPECT_EQ(a, 0.0) << param_name(i) << " entry " << k << " must get zero gradient";
                EXPECT_EQ(f, 0.0) << param_name(i) << " entry " << k << " changes the loss";
            }
        }
        EXPECT_EQ(bad_entries, 0) << param_name(i) << ": entries outside |fd - an| <= " << kEntryRelTol
                                  << "|an| + " << kEntryAbsTol;
        ASSERT_GT(ref, 0.0) << param_name(i) << ": gradient is all zeros";
        const double err = diff / ref;
        if (err > worst_tensor) { worst_tensor = err; worst_name = param_name(i); }
        worst_tensor_l2 = std::max(worst_tensor_l2, std::sqrt(diff2 / ref2));
        EXPECT_LT(err, kTensorTol) << "tensor " << param_name(i);
    }
    std::printf("[gradcheck-model] %-4s dt=%.1f  worst tensor max|fd-an|/max|an| = %.2e (%s), "
                "||fd-an||/||an|| = %.2e, worst entry |fd-an|/(1e-6|an|+1e-9) = %.2f\n",
                placement_name(cfg.placement), cfg.dt, worst_tensor, worst_name.c_str(), worst_tensor_l2,
                worst_entry);
}

// backward(w) adds w · d(mean loss)/dθ: calling it twice, or with weight 0.5 after weight 1,
// accumulates.
TEST_P(ModelGradcheck, BackwardAccumulatesWithLossWeight) {
    std::fill(model->grads.begin(), model->grads.end(), 0.0);
    loss();
    model->backward(1.0);
    const std::vector<double> once = model->grads;
    loss();
    model->backward(0.5);
    for (size_t k = 0; k < once.size(); k++)
        ASSERT_NEAR(model->grads[k], 1.5 * once[k], 1e-12 * (std::fabs(once[k]) + 1e-6)) << "entry " << k;
}

INSTANTIATE_TEST_SUITE_P(AllPlacements, ModelGradcheck,
                         ::testing::Values(Case{Placement::Pre, 1.0f}, Case{Placement::Pre, 0.1f},
                                           Case{Placement::Post, 1.0f}, Case{Placement::Post, 0.1f},
                                           Case{Placement::Peri, 1.0f}, Case{Placement::Peri, 0.1f}),
                         case_name);

}  // namespace

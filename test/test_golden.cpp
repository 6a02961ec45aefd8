// The CPU reference against golden values computed independently by PyTorch in float64
// (test/make_golden.py): for each placement and Δt ∈ {1, 0.1}, the loss and every parameter
// gradient of one batch, then five AdamW steps with warmup, cosine decay, weight decay and
// clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "run/checkpoint.h"
#include "golden.h"
#include "gpt2_cpu.h"
#include "training.h"

namespace {

struct GoldenCase {
    const char* name;
};

// ‖a − b‖ / ‖b‖ over n elements (absolute when b is all zeros).
double relative_error(const float* a, const double* b, size_t n) {
    double diff = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        diff += (a[i] - b[i]) * (a[i] - b[i]);
        ref += b[i] * b[i];
    }
    return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

class Golden : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        const std::string base = std::string(GOLDEN_DIR) + "/" + GetParam();
        cfg = read_checkpoint(base + ".model.bin", &initial);
        expect = read_golden_expect(base + ".expect.bin");
        ASSERT_EQ(initial.size(), expect.grads.size());
    }
    const int32_t* batch(int s) const { return expect.tokens.data() + (size_t)s * expect.B * expect.T; }

    ModelConfig cfg;
    std::vector<float> initial;
    GoldenExpect expect;
};

TEST_P(Golden, LossAndEveryGradient) {
    CpuBackend backend(cfg, expect.B, expect.T);
    backend.set_params(initial.data());
    backend.zero_grad();
    const float loss = backend.forward(batch(0), batch(0) + 1);
    EXPECT_NEAR(loss, expect.loss0, 1e-5);
    // backward recomputes the losses with their gradient: on the CPU the same ops, the same bits.
    EXPECT_EQ(backend.backward(1.0f), loss);
    const auto sizes = param_sizes(cfg);
    const auto offsets = param_offsets(cfg);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (sizes[i] == 0) continue;
        const double err = relative_error(backend.grads.data() + offsets[i], expect.grads.data() + offsets[i],
                                          sizes[i]);
        EXPECT_LT(err, 1e-4) << "gradient of " << param_name(i);
    }
}

TEST_P(Golden, FiveAdamWStepsWithClipping) {
    CpuBackend backend(cfg, expect.B, expect.T);
    backend.set_params(initial.data());
    for (int s = 0; s < expect.steps; s++) {
        backend.zero_grad();
        backend.forward_to_logits(batch(s), batch(s) + 1);  // as ./train runs a step
        const float loss = backend.backward(1.0f);
        const double norm = backend.grad_norm();
        const double lr = learning_rate(s, expect.steps, kGoldenLr, kGoldenLrMin, kGoldenWarmup);
        EXPECT_NEAR(loss, expect.step_loss[s], 1e-4) << "step " << s;
        EXPECT_NEAR(norm, expect.step_grad_norm[s], 1e-4 * expect.step_grad_norm[s]) << "step " << s;
        EXPECT_NEAR(lr, expect.step_lr[s], 1e-12) << "step " << s;
        const AdamWHyper h{lr, kGoldenBeta1, kGoldenBeta2, kGoldenEps, kGoldenWeightDecay};
        backend.update(h, s + 1, clip_factor(norm, kGoldenClip));
    }
    std::vector<float> final_params(initial.size());
    backend.get_params(final_params.data());
    EXPECT_LT(relative_error(final_params.data(), expect.final_params.data(), final_params.size()), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(AllPlacements, Golden,
                         ::testing::Values("pre_dt1.0", "pre_dt0.1", "post_dt1.0", "post_dt0.1", "peri_dt1.0",
                                           "peri_dt0.1"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             std::string n = info.param;
                             for (char& c : n) if (c == '.') c = '_';
                             return n;
                         });

}  // namespace

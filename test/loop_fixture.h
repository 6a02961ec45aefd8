// loop_fixture.h: the training-loop golden case (test/golden/loop.*, test/golden/README.md) as
// a test of a training program itself. make_golden.py ran, in float64 PyTorch, six optimiser
// steps of three micro-steps each over two token shards (shuffling off: consecutive windows,
// crossing to the second shard and wrapping back to the first), with warmup, cosine decay,
// weight decay and clipping at 0.85 (it triggers on steps 0 and 2 only), AdamW ε = 1e-6. A run of ./train (or
// of the CUDA program) with loop_fixture_flags() must log the same loss, learning rate and
// gradient norm at every step and end with the same parameters. Header-only, C++17.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "golden.h"
#include "run/checkpoint.h"
#include "test_files.h"

// The clipping threshold and AdamW ε the loop case used (the other settings are the kGolden*
// ones). ε is 1e-6 because the key biases' gradient is exactly 0 in exact arithmetic (softmax
// ignores a shift shared by a row's scores): in float32 it is rounding noise, which AdamW
// divides by sqrt(v̂) + ε, and ε = 1e-8 would let that noise move them by up to lr per step.
constexpr double kLoopClip = 0.85;
constexpr double kLoopEps = 1e-6;

// The fixture files, relative to the repository root (where the tests run).
inline std::string loop_fixture_path(const std::string& name) { return std::string(GOLDEN_DIR) + "/" + name; }

// The training flags that reproduce the loop case: its checkpoint and shards, B, T,
// total_batch = micro_steps·B·T, the schedule and optimiser; no evaluation, no intermediate
// checkpoints. -device, -threads and -out are the caller's.
inline std::string loop_fixture_flags(const GoldenExpect& g) {
    char flags[512];
    std::snprintf(flags, sizeof flags,
                  "-init %s -train_data '%s' -val_data '%s' -shuffle 0 -eval_every 0 -save_every 0 -B %d -T %d "
                  "-total_batch %d -steps %d -warmup %d -lr %.17g -lr_min %.17g -wd %.17g -beta1 %.17g -beta2 %.17g "
                  "-eps %.17g -clip %.17g",
                  loop_fixture_path("loop.model.bin").c_str(), loop_fixture_path("loop_train_*.bin").c_str(),
                  loop_fixture_path("loop_train_*.bin").c_str(), g.B, g.T, g.micro_steps * g.B * g.T, g.steps,
                  kGoldenWarmup, kGoldenLr, kGoldenLrMin, kGoldenWeightDecay, kGoldenBeta1, kGoldenBeta2, kLoopEps,
                  kLoopClip);
    return flags;
}

// The run in out_dir (log.jsonl and the final model_%08d.bin) against the fixture: per step the
// loss within 1e-5, the learning rate within 1e-8 relative (the log prints 9 digits) and the
// gradient norm within 1e-5 relative; every parameter tensor within 1e-4 relative
// (‖got − want‖ / ‖want‖, per tensor, padding rows of wte included).
inline void expect_run_matches_loop_fixture(const std::string& out_dir, const GoldenExpect& g) {
    const std::vector<std::string> steps = log_lines(read_file(out_dir + "/log.jsonl"), "\"tok_s\"");
    ASSERT_EQ(steps.size(), (size_t)g.steps) << out_dir << "/log.jsonl";
    for (int s = 0; s < g.steps; s++) {
        EXPECT_EQ(json_number(steps[s], "step"), s);
        EXPECT_NEAR(json_number(steps[s], "loss"), g.step_loss[s], 1e-5) << "loss of step " << s;
        EXPECT_NEAR(json_number(steps[s], "lr"), g.step_lr[s], 1e-8 * g.step_lr[s]) << "lr of step " << s;
        EXPECT_NEAR(json_number(steps[s], "grad_norm"), g.step_grad_norm[s], 1e-5 * g.step_grad_norm[s])
            << "grad_norm of step " << s;
    }
    char name[32];
    std::snprintf(name, sizeof name, "/model_%08d.bin", g.steps);
    std::vector<float> params;
    const ModelConfig cfg = read_checkpoint(out_dir + name, &params);
    ASSERT_EQ(params.size(), g.final_params.size());
    const auto sizes = param_sizes(cfg);
    const auto offsets = param_offsets(cfg);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        double diff = 0, ref = 0;
        for (size_t k = offsets[i]; k < offsets[i] + sizes[i]; k++) {
            diff += (params[k] - g.final_params[k]) * (params[k] - g.final_params[k]);
            ref += g.final_params[k] * g.final_params[k];
        }
        if (sizes[i] > 0) {
            EXPECT_LT(std::sqrt(diff / ref), 1e-4) << "final " << param_name(i);
        }
    }
}

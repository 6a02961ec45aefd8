// bench/step_traffic.cuh — the launches of one training step without running a kernel, for the cost
// model of `./bench_gpu -model` (bench/traffic.h, docs/cost_model.md, "The traffic model").
//
// The Recorder observes the CUDA ops (bench/observed_ops.cuh) and notes, under the op's name, the
// launches each op declares. Built while device memory is counted (cuda/cuda_common.cuh), the ops
// launch nothing and their buffers are distinct made-up addresses that nothing reads, so the
// model's own forward and backward run in the order of a real step, fused ops and all, for a
// step of any size on any machine.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/observed_ops.cuh"
#include "bench/traffic.h"
#include "gpt2.h"

namespace step_traffic {

// Records each op's launches in `ops`, in call order.
struct Recorder : OpObserver {
    std::vector<OpTraffic> ops;

    void begin(const std::string& op, Launches launches) override { ops.push_back({op, std::move(launches)}); }
    void end() override {}
};

// One step as bench/bench_gpu.cpp's train_step runs it, on the batch `tokens` (B·T): zero_grad,
// forward to the logits, backward (from the fused cross-entropy on), gradient norm, AdamW over
// every parameter tensor.
template <typename T>
std::vector<OpTraffic> record_step(const ModelConfig& cfg, int B, int T_, const int32_t* tokens,
                                   const FusedKinds& fused) {
    MemoryPlan unused;
    CountingScope no_device(&unused);
    Gpt2<ObservedOps<T>> model(cfg, B, T_);
    model.ops.fused = fused;
    Recorder recorder;
    model.ops.observer = &recorder;
    model.zero_grad();
    model.forward_to_logits(tokens, tokens);
    model.backward(1.0);
    model.grad_norm();
    model.ops.adamw_update(model.params.data(), model.weight_copy(0), model.grads.data(), nullptr, nullptr, 0,
                           model.params.size(), AdamWHyper{}, 1, 1.0);
    return std::move(recorder.ops);
}

}  // namespace step_traffic

std::vector<OpTraffic> cuda_step_traffic(const ModelConfig& cfg, int B, int T, bool use_bf16, const int32_t* tokens,
                                         const FusedKinds& fused) {
    return use_bf16 ? step_traffic::record_step<bf16>(cfg, B, T, tokens, fused)
                    : step_traffic::record_step<float>(cfg, B, T, tokens, fused);
}

// step_traffic.cuh — the launches of one training step without running a kernel, for the cost
// model of `./bench_gpu -model` (traffic.h, docs/cuda.md "The traffic model").
//
// CudaOps<T, Recorder> is CudaOps (gpt2.cu) whose runner notes, under the op's name, the
// launches each op declares (its launcher's `*_traffic` function), instead of running them.
// Built while device memory is counted (cuda_common.cuh), its buffers are distinct made-up
// addresses that nothing reads, so the model's own forward and backward run in the order of a
// real step, the held-back ops fused as on the device, for a step of any size on any machine.
// Included by gpt2.cu after CudaOps.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "traffic.h"

namespace step_traffic {

// The runner of CudaOps that records each op's launches in `ops`, in call order, and runs
// nothing. Transfers between host and device (no op name) are not recorded.
struct Recorder {
    std::vector<OpTraffic> ops;

    template <class Kernels, class Traffic>
    void operator()(const OpName& name, Kernels /*kernels*/, Traffic traffic, cudaStream_t /*stream*/) {
        if (name.op) ops.push_back({name.str(), traffic()});
    }
};

// One step as bench_gpu.cpp's train_step runs it, on the batch `tokens` (B·T): zero_grad,
// forward to the logits, backward (from the fused cross-entropy on), gradient norm, AdamW over
// every parameter tensor.
template <typename T>
std::vector<OpTraffic> record_step(const ModelConfig& cfg, int B, int T_, const int32_t* tokens) {
    MemoryPlan unused;
    CountingScope no_device(&unused);
    Gpt2<CudaOps<T, Recorder>> model(cfg, B, T_);
    model.zero_grad();
    model.forward_to_logits(tokens, tokens);
    model.backward(1.0);
    model.grad_norm();
    model.ops.adamw_update(model.params.data(), model.weight_copy(0), model.grads.data(), nullptr, nullptr, 0,
                           model.params.size(), AdamWHyper{}, 1, 1.0);
    return std::move(model.ops.runner.ops);
}

}  // namespace step_traffic

std::vector<OpTraffic> cuda_step_traffic(const ModelConfig& cfg, int B, int T, bool use_bf16, const int32_t* tokens) {
    return use_bf16 ? step_traffic::record_step<bf16>(cfg, B, T, tokens)
                    : step_traffic::record_step<float>(cfg, B, T, tokens);
}

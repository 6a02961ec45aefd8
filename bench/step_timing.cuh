// bench/step_timing.cuh — the measured time of each op of a training step, for `make bench`'s table of
// measured beside modelled time (bench/bench_gpu.cpp, docs/cost_model.md, "The traffic model").
//
// The Timer observes the CUDA ops (bench/observed_ops.cuh): it records a pair of CUDA events on the
// stream around every op, under the op names bench/step_traffic.cuh's model uses, so both tables
// group the same launches.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "bench/observed_ops.cuh"
#include "bench/traffic.h"
#include "gpt2.h"

namespace step_timing {

// Times each op between two events, in `marks`. Transfers between host and device are not
// told to it (they are no launch of the traffic model), so they run untimed.
class Timer : public OpObserver {
public:
    struct Mark {
        std::string op;
        cudaEvent_t start, end;
    };
    std::vector<Mark> marks;

    explicit Timer(cudaStream_t stream) : stream(stream) {}
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;
    ~Timer() { clear(); }

    // Forgets the marks recorded so far.
    void clear() {
        for (Mark& m : marks) cudaEventDestroy(m.start), cudaEventDestroy(m.end);
        marks.clear();
    }

    void begin(const std::string& op, Launches /*launches*/) override {
        Mark m{op, nullptr, nullptr};
        cudaCheck(cudaEventCreate(&m.start));
        cudaCheck(cudaEventCreate(&m.end));
        cudaCheck(cudaEventRecord(m.start, stream));
        marks.push_back(m);
    }
    void end() override { cudaCheck(cudaEventRecord(marks.back().end, stream)); }

private:
    cudaStream_t stream;
};

// What `measure` allocates on the device: the model on the CUDA ops and its AdamW moments.
// Built while counting (cuda/cuda_common.cuh), it is the plan of the timing (bench_gpu -plan).
template <typename T>
struct TimedStep {
    Gpt2<ObservedOps<T>> model;
    DeviceArray<float> m, v;
    TimedStep(const ModelConfig& cfg, int B, int T_) : model(cfg, B, T_) {
        model.ops.memory_category(MemoryCategory::Parameters);
        m = DeviceArray<float>(model.params.size());
        v = DeviceArray<float>(model.params.size());
    }
};

// Milliseconds per op, summed over the op's marks of one step and averaged over `steps` steps
// (after one untimed step) of the step bench/bench_gpu.cpp times, on the batch `tokens` (B·T + 1).
template <typename T>
std::map<std::string, double> measure(const ModelConfig& cfg, int B, int T_, int steps, const int32_t* tokens,
                                      const FusedKinds& fused) {
    TimedStep<T> timed(cfg, B, T_);
    auto& model = timed.model;
    model.ops.fused = fused;
    DeviceArray<float>&m = timed.m, &v = timed.v;
    Timer timer(model.ops.stream);
    model.ops.observer = &timer;
    std::vector<float> host(model.params.size());
    init_parameters(cfg, host.data(), 1337);
    model.params.upload(host.data(), model.ops.stream);
    model.sync_weights();
    model.ops.zero(m), model.ops.zero(v);
    std::map<std::string, double> ms;
    for (int s = 0; s <= steps; s++) {
        timer.clear();
        model.zero_grad();
        model.forward_to_logits(tokens, tokens + 1);
        model.backward(1.0);
        const double norm = model.grad_norm();
        model.ops.adamw_update(model.params.data(), model.weight_copy(0), model.grads.data(), m.data(), v.data(), 0,
                               model.params.size(), AdamWHyper{6e-4, 0.9, 0.95, 1e-8, 0.1}, s + 1,
                               norm > 1.0 ? 1.0 / norm : 1.0);
        model.ops.finish();
        if (s == 0) continue;  // warm-up
        for (const Timer::Mark& mark : timer.marks) {
            float elapsed = 0;
            cudaCheck(cudaEventElapsedTime(&elapsed, mark.start, mark.end));
            ms[mark.op] += elapsed / steps;
        }
    }
    return ms;
}

}  // namespace step_timing

std::map<std::string, double> cuda_step_op_ms(const ModelConfig& cfg, int B, int T, bool use_bf16, int steps,
                                              const int32_t* tokens, const FusedKinds& fused) {
    return use_bf16 ? step_timing::measure<bf16>(cfg, B, T, steps, tokens, fused)
                    : step_timing::measure<float>(cfg, B, T, steps, tokens, fused);
}

MemoryPlan cuda_step_timing_plan(const ModelConfig& cfg, int B, int T, bool use_bf16) {
    MemoryPlan plan;
    CountingScope counting(&plan);
    if (use_bf16) step_timing::TimedStep<bf16>(cfg, B, T);
    else step_timing::TimedStep<float>(cfg, B, T);
    return plan;
}

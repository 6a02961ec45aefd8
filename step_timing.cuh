// step_timing.cuh — the measured time of each op of a training step, for `make bench`'s table of
// measured beside modelled time (bench_gpu.cpp, docs/cuda.md "The traffic model").
//
// CudaOps<T, Timer> is CudaOps (gpt2.cu) whose runner records a pair of CUDA events on the stream
// around every op, under the op names step_traffic.cuh's model uses, so both tables group the
// same launches. Included by gpt2.cu after CudaOps.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace step_timing {

// The runner of CudaOps that times each op between two events, in `marks`. Transfers between
// host and device (no op name) run untimed, as they are no launch of the traffic model.
struct Timer {
    struct Mark {
        std::string op;
        cudaEvent_t start, end;
    };
    std::vector<Mark> marks;

    Timer() = default;
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;
    ~Timer() { clear(); }

    // Forgets the marks recorded so far.
    void clear() {
        for (Mark& m : marks) cudaEventDestroy(m.start), cudaEventDestroy(m.end);
        marks.clear();
    }

    template <class Kernels, class Traffic>
    void operator()(const OpName& name, Kernels kernels, Traffic /*traffic*/, cudaStream_t stream) {
        if (!name.op) return kernels();
        Mark m{name.str(), nullptr, nullptr};
        cudaCheck(cudaEventCreate(&m.start));
        cudaCheck(cudaEventCreate(&m.end));
        cudaCheck(cudaEventRecord(m.start, stream));
        kernels();
        cudaCheck(cudaEventRecord(m.end, stream));
        marks.push_back(m);
    }
};

// What `measure` allocates on the device: the model on CudaOps<T, Timer> and its AdamW moments.
// Built while counting (cuda_common.cuh), it is the plan of the timing (bench_gpu -plan).
template <typename T>
struct TimedStep {
    Gpt2<CudaOps<T, Timer>> model;
    DeviceArray<float> m, v;
    TimedStep(const ModelConfig& cfg, int B, int T_) : model(cfg, B, T_) {
        model.ops.memory_category(MemoryCategory::Parameters);
        m = DeviceArray<float>(model.params.size());
        v = DeviceArray<float>(model.params.size());
    }
};

// Milliseconds per op, summed over the op's marks of one step and averaged over `steps` steps
// (after one untimed step) of the step bench_gpu.cpp times, on the batch `tokens` (B·T + 1).
template <typename T>
std::map<std::string, double> measure(const ModelConfig& cfg, int B, int T_, int steps, const int32_t* tokens) {
    TimedStep<T> timed(cfg, B, T_);
    auto& model = timed.model;
    DeviceArray<float>&m = timed.m, &v = timed.v;
    std::vector<float> host(model.params.size());
    init_parameters(cfg, host.data(), 1337);
    model.params.upload(host.data(), model.ops.stream);
    model.sync_weights();
    model.ops.zero(m), model.ops.zero(v);
    std::map<std::string, double> ms;
    for (int s = 0; s <= steps; s++) {
        model.ops.runner.clear();
        model.zero_grad();
        model.forward_to_logits(tokens, tokens + 1);
        model.backward(1.0);
        const double norm = model.grad_norm();
        model.ops.adamw_update(model.params.data(), model.weight_copy(0), model.grads.data(), m.data(), v.data(), 0,
                               model.params.size(), AdamWHyper{6e-4, 0.9, 0.95, 1e-8, 0.1}, s + 1,
                               norm > 1.0 ? 1.0 / norm : 1.0);
        model.ops.finish();
        if (s == 0) continue;  // warm-up
        for (const Timer::Mark& mark : model.ops.runner.marks) {
            float elapsed = 0;
            cudaCheck(cudaEventElapsedTime(&elapsed, mark.start, mark.end));
            ms[mark.op] += elapsed / steps;
        }
    }
    return ms;
}

}  // namespace step_timing

std::map<std::string, double> cuda_step_op_ms(const ModelConfig& cfg, int B, int T, bool use_bf16, int steps,
                                              const int32_t* tokens) {
    return use_bf16 ? step_timing::measure<bf16>(cfg, B, T, steps, tokens)
                    : step_timing::measure<float>(cfg, B, T, steps, tokens);
}

MemoryPlan cuda_step_timing_plan(const ModelConfig& cfg, int B, int T, bool use_bf16) {
    MemoryPlan plan;
    CountingScope counting(&plan);
    if (use_bf16) step_timing::TimedStep<bf16>(cfg, B, T);
    else step_timing::TimedStep<float>(cfg, B, T);
    return plan;
}

// step_timing.cuh — the measured time of each op of a training step, for `make bench`'s table of
// measured beside modelled time (bench_gpu.cpp, docs/cuda.md "The traffic model").
//
// TimedOps<T> is CudaOps<T> (gpt2.cu) with a pair of CUDA events recorded on the stream around
// every op, under the op names of step_traffic.cuh, so both tables group the same launches.
// Included by gpt2.cu after CudaOps.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "step_traffic.cuh"

namespace step_timing {

// CudaOps<T> whose ops each record a start and an end event, named, in `marks`.
template <typename T>
class TimedOps : public CudaOps<T> {
public:
    using Base = CudaOps<T>;
    using typename Base::Act;
    template <class U>
    using Array = typename Base::template Array<U>;

    struct Mark {
        std::string op;
        cudaEvent_t start, end;
    };
    std::vector<Mark> marks;

    TimedOps(const ModelConfig& cfg, int B, int Tn) : Base(cfg, B, Tn), cfg(cfg) {}
    ~TimedOps() { clear(); }

    // Forgets the marks recorded so far.
    void clear() {
        for (Mark& m : marks) cudaEventDestroy(m.start), cudaEventDestroy(m.end);
        marks.clear();
    }
    // Runs `op` between two events recorded under `name`.
    template <class F>
    void timed(const std::string& name, F op) {
        Mark m{name, nullptr, nullptr};
        cudaCheck(cudaEventCreate(&m.start));
        cudaCheck(cudaEventCreate(&m.end));
        cudaCheck(cudaEventRecord(m.start, this->stream));
        op();
        cudaCheck(cudaEventRecord(m.end, this->stream));
        marks.push_back(m);
    }

    template <class U>
    void zero(Array<U>& a) {
        timed("memset (gradients)", [&] { Base::zero(a); });
    }
    template <class U>
    double norm(const Array<U>& a) {
        double result = 0;
        timed("grad norm", [&] { result = Base::norm(a); });
        return result;
    }
    void convert(T* dst, const float* src, size_t n) {
        timed("convert", [&] { Base::convert(dst, src, n); });
    }
    void encoder_forward(float* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C) {
        timed("encoder fwd", [&] { Base::encoder_forward(out, tokens, wte, wpe, B, Tn, C); });
    }
    void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int Tn, int C) {
        timed("encoder bwd", [&] { Base::encoder_backward(dwte, dwpe, dout, tokens, B, Tn, C); });
    }
    template <class O, class I>
    void layernorm_forward(O* out, float* mean, float* rstd, const I* x, const T* w, const T* b, int N, int C) {
        timed("layernorm fwd", [&] { Base::layernorm_forward(out, mean, rstd, x, w, b, N, C); });
    }
    template <class D, class G, class I>
    void layernorm_backward(D* dx, float* dw, float* db, const G* dout, const I* x, const T* w, const float* mean,
                            const float* rstd, int N, int C, GradOut dx_out = GradOut::Add) {
        timed("layernorm bwd", [&] { Base::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, dx_out); });
    }
    template <class D, class G, class I>
    void layernorm_backward_residual(D* dx, T* df, float dt, float* dw, float* db, const G* dout, const I* x,
                                     const T* w, const float* mean, const float* rstd, int N, int C,
                                     GradOut dx_out = GradOut::Add) {
        timed("layernorm + residual bwd", [&] {
            Base::layernorm_backward_residual(dx, df, dt, dw, db, dout, x, w, mean, rstd, N, C, dx_out);
        });
    }
    void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int IC, int OC) {
        timed(step_traffic::matmul_name(cfg, IC, OC) + " fwd",
              [&] { Base::matmul_forward(out, inp, w, bias, N, IC, OC); });
    }
    template <class D>
    void matmul_backward(D* dinp, float* dw, float* dbias, const T* dout, const T* inp, const T* w, int N, int IC,
                         int OC, GradOut dinp_out = GradOut::Add) {
        timed(step_traffic::matmul_name(cfg, IC, OC) + " bwd",
              [&] { Base::matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC, dinp_out); });
    }
    void attention_forward(T* out, float* lse, const T* qkv, int B, int Tn, int C, int NH) {
        timed("attention fwd", [&] { Base::attention_forward(out, lse, qkv, B, Tn, C, NH); });
    }
    void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int B, int Tn, int C,
                            int NH) {
        timed("attention bwd", [&] { Base::attention_backward(dqkv, dout, qkv, out, lse, B, Tn, C, NH); });
    }
    void matmul_gelu_forward(T* out, T* pre, const T* inp, const T* w, const T* bias, int N, int IC, int OC) {
        timed("fc matmul + bias + gelu fwd", [&] { Base::matmul_gelu_forward(out, pre, inp, w, bias, N, IC, OC); });
    }
    void matmul_gelu_backward(T* dpre, float* dw, float* dbias, const T* dout, const T* inp, const T* w, const T* pre,
                              int N, int IC, int OC) {
        timed(step_traffic::matmul_name(cfg, IC, OC) + " + gelu bwd",
              [&] { Base::matmul_gelu_backward(dpre, dw, dbias, dout, inp, w, pre, N, IC, OC); });
    }
    void residual_forward(float* out, const float* x, const T* f, float dt, size_t n) {
        timed("residual fwd", [&] { Base::residual_forward(out, x, f, dt, n); });
    }
    template <class O>
    void residual_layernorm_forward(float* sum, O* out, float* mean, float* rstd, const float* x, const T* f, float dt,
                                    const T* w, const T* b, int N, int C) {
        timed("residual + layernorm fwd",
              [&] { Base::residual_layernorm_forward(sum, out, mean, rstd, x, f, dt, w, b, N, C); });
    }
    void crossentropy_forward(float* losses, const T* logits, const int32_t* targets, int N, int V, int Vp) {
        timed("crossentropy fwd", [&] { Base::crossentropy_forward(losses, logits, targets, N, V, Vp); });
    }
    void crossentropy_forward_backward(float* losses, T* logits, const int32_t* targets, float dloss, int N, int V,
                                       int Vp) {
        timed("crossentropy fwd+bwd",
              [&] { Base::crossentropy_forward_backward(losses, logits, targets, dloss, N, V, Vp); });
    }

private:
    ModelConfig cfg;
};

// What `measure` allocates on the device: the model on TimedOps and its AdamW moments. Built
// while counting (cuda_common.cuh), it is the plan of the timing (bench_gpu -plan).
template <typename T>
struct TimedStep {
    Gpt2<TimedOps<T>> model;
    DeviceArray<float> m, v;
    TimedStep(const ModelConfig& cfg, int B, int Tn) : model(cfg, B, Tn) {
        model.ops.memory_category(MemoryCategory::Parameters);
        m = DeviceArray<float>(model.params.size());
        v = DeviceArray<float>(model.params.size());
    }
};

// Milliseconds per op, summed over the op's marks of one step and averaged over `steps` steps
// (after one untimed step) of the step bench_gpu.cpp times, on the batch `tokens` (B·T + 1).
template <typename T>
std::map<std::string, double> measure(const ModelConfig& cfg, int B, int Tn, int steps, const int32_t* tokens) {
    TimedStep<T> timed(cfg, B, Tn);
    auto& model = timed.model;
    DeviceArray<float>&m = timed.m, &v = timed.v;
    std::vector<float> host(model.params.size());
    init_parameters(cfg, host.data(), 1337);
    model.params.upload(host.data(), model.ops.stream);
    model.sync_weights();
    model.ops.zero(m), model.ops.zero(v);
    std::map<std::string, double> ms;
    for (int s = 0; s <= steps; s++) {
        model.ops.clear();
        model.ops.zero(model.grads);
        model.forward_to_logits(tokens, tokens + 1);
        model.backward(1.0f);
        const double norm = model.grad_norm();
        model.ops.timed("adamw", [&] {
            gpu::adamw_update(model.params.data(), model.weight_copy(0), model.grads.data(), m.data(), v.data(),
                              gpu::adamw_table(cfg), 0, model.params.size(), AdamWHyper{6e-4, 0.9, 0.95, 1e-8, 0.1},
                              s + 1, norm > 1.0 ? 1.0 / norm : 1.0, model.ops.stream);
        });
        cudaCheck(cudaStreamSynchronize(model.ops.stream));
        if (s == 0) continue;  // warm-up
        for (const auto& mark : model.ops.marks) {
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

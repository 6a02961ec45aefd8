// bench/observed_ops.cuh — the CUDA op set watched from outside, for ./bench_gpu: ObservedOps<Act>
// is CudaOps<Act> (cuda_ops.cuh) with every op of a training step wrapped, so that an observer
// hears the op's name ("qkv matmul fwd") and the launches it declares (its `*_traffic` function,
// bench/kernel_costs.h) before the op runs, and the op's end after. bench/step_traffic.cuh's
// Recorder notes the launches for the cost model, bench/step_timing.cuh's Timer puts CUDA events
// around each op. The model runs on it unchanged: Gpt2<ObservedOps<Act>>.
//
// While device memory is only counted (cuda/cuda_common.cuh) the wrapped ops tell the observer
// and launch nothing, so the Recorder runs the model's own forward and backward, fused ops and
// all, for a step of any size on any machine. Transfers between host and device and the
// diagnostics are not told.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/kernel_costs.h"
#include "bench/traffic.h"
#include "cuda_ops.cuh"

// What watches the ops of a training step (bench/step_traffic.cuh, bench/step_timing.cuh).
struct OpObserver {
    virtual void begin(const std::string& op, Launches launches) = 0;
    virtual void end() = 0;

protected:
    ~OpObserver() = default;
};

template <typename Activation>
class ObservedOps : public CudaOps<Activation> {
    using Ops = CudaOps<Activation>;

public:
    using Act = Activation;
    using Ops::launching;
    OpObserver* observer = nullptr;

    ObservedOps(const ModelConfig& cfg, int B, int T) : Ops(cfg, B, T), cfg(cfg) {}

    template <class U>
    void zero(DeviceArray<U>& a) {
        observe("memset (gradients)", {{"memset", 0, (double)a.size() * sizeof(U)}}, [&] { Ops::zero(a); });
    }
    template <class U>
    void copy(U* dst, const U* src, size_t n) {
        observe("copy", {{"copy", (double)n * sizeof(U), (double)n * sizeof(U)}}, [&] { Ops::copy(dst, src, n); });
    }
    void convert(Act* dst, const float* src, size_t n) {
        observe("convert", {convert_traffic<Act, float>(n)}, [&] { Ops::convert(dst, src, n); });
    }
    // Keeps the batch's tokens on the host: how they repeat decides the traffic of the embedding
    // backward (no kernel reads them here).
    void load_batch(DeviceArray<int32_t>& tokens, DeviceArray<int32_t>& targets, const int32_t* host_tokens,
                    const int32_t* host_targets) {
        if (launching()) Ops::load_batch(tokens, targets, host_tokens, host_targets);
        host_batch.assign(host_tokens, host_tokens + tokens.size());
    }
    float mean(const DeviceArray<float>& losses) { return launching() ? Ops::mean(losses) : 0.0f; }
    template <class U>
    double norm(const DeviceArray<U>& a) {
        double result = 0;
        observe("grad norm", {gpu::sum_of_squares_traffic<U>(a.size())}, [&] { result = Ops::norm(a); });
        return result;
    }

    void encoder_forward(float* out, const int32_t* tokens, const Act* wte, const Act* wpe, int B, int T, int C) {
        observe("encoder fwd", {gpu::encoder_forward_traffic<float, Act>(B, T, C)},
                [&] { Ops::encoder_forward(out, tokens, wte, wpe, B, T, C); });
    }
    void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) {
        observe("encoder bwd", gpu::encoder_backward_traffic<float>(B, T, C, gpu::token_runs(host_batch.data(), B * T)),
                [&] { Ops::encoder_backward(dwte, dwpe, dout, tokens, B, T, C); });
    }
    template <class O, class I>
    void layernorm_forward(O* out, float* mean, float* rstd, const I* x, const Act* w, const Act* b, int N, int C) {
        observe("layernorm fwd", {gpu::layernorm_forward_traffic<O, I, Act>(N, C)},
                [&] { Ops::layernorm_forward(out, mean, rstd, x, w, b, N, C); });
    }
    template <class O>
    void residual_layernorm_forward(float* s, O* out, float* mean, float* rstd, const float* x, const Act* f,
                                    float dt, const Act* w, const Act* b, int N, int C) {
        observe("residual + layernorm fwd", {gpu::residual_layernorm_forward_traffic<float, Act, O, Act>(N, C)},
                [&] { Ops::residual_layernorm_forward(s, out, mean, rstd, x, f, dt, w, b, N, C); });
    }
    template <class D, class G, class I>
    void layernorm_backward(D* dx, float* dw, float* db, const G* dout, const I* x, const Act* w, const float* mean,
                            const float* rstd, int N, int C, GradOut dx_out) {
        observe("layernorm bwd", gpu::layernorm_backward_traffic<D, G, I, Act>(N, C, dx_out),
                [&] { Ops::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, dx_out); });
    }
    template <class D, class G, class I>
    void layernorm_backward_residual(D* dx, Act* df, float dt, float* dw, float* db, const G* dout, const I* x,
                                     const Act* w, const float* mean, const float* rstd, int N, int C,
                                     GradOut dx_out) {
        observe("layernorm + residual bwd", gpu::layernorm_backward_residual_traffic<D, Act, G, I, Act>(N, C, dx_out),
                [&] { Ops::layernorm_backward_residual(dx, df, dt, dw, db, dout, x, w, mean, rstd, N, C, dx_out); });
    }
    void matmul_forward(Act* out, const Act* inp, const Act* w, const Act* bias, int N, int IC, int OC) {
        observe(matmul_layer(IC, OC) + " fwd", gpu::matmul_forward_traffic<Act>(N, IC, OC, bias != nullptr, this->fused),
                [&] { Ops::matmul_forward(out, inp, w, bias, N, IC, OC); });
    }
    template <class D>
    void matmul_backward(D* dinp, float* dw, float* dbias, const Act* dout, const Act* inp, const Act* w, int N, int IC,
                         int OC, GradOut dinp_out) {
        observe(matmul_layer(IC, OC) + " bwd",
                gpu::matmul_backward_traffic<Act, D>(N, IC, OC, dbias != nullptr, dinp_out, this->fused),
                [&] { Ops::matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC, dinp_out); });
    }
    void attention_forward(Act* out, float* lse, const Act* qkv, int B, int T, int C, int NH) {
        observe("attention fwd", gpu::attention_forward_traffic<Act>(B, T, C, NH),
                [&] { Ops::attention_forward(out, lse, qkv, B, T, C, NH); });
    }
    void attention_backward(Act* dqkv, const Act* dout, const Act* qkv, const Act* out, const float* lse, int B, int T,
                            int C, int NH) {
        observe("attention bwd", gpu::attention_backward_traffic<Act>(B, T, C, NH),
                [&] { Ops::attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH); });
    }
    void matmul_gelu_forward(Act* out, Act* pre, const Act* inp, const Act* w, const Act* bias, int N, int IC, int OC) {
        observe("fc matmul + bias + gelu fwd", gpu::matmul_gelu_forward_traffic<Act>(N, IC, OC, this->fused),
                [&] { Ops::matmul_gelu_forward(out, pre, inp, w, bias, N, IC, OC); });
    }
    void matmul_gelu_backward(Act* dpre, float* dw, float* dbias, const Act* dout, const Act* inp, const Act* w,
                              const Act* pre, int N, int IC, int OC) {
        observe(matmul_layer(IC, OC) + " + gelu bwd",
                gpu::matmul_gelu_backward_traffic<Act>(N, IC, OC, dbias != nullptr, this->fused),
                [&] { Ops::matmul_gelu_backward(dpre, dw, dbias, dout, inp, w, pre, N, IC, OC); });
    }
    void residual_forward(float* s, const float* x, const Act* f, float dt, size_t n) {
        observe("residual fwd", {gpu::residual_forward_traffic<float, Act>(n)},
                [&] { Ops::residual_forward(s, x, f, dt, n); });
    }
    void crossentropy_forward(float* losses, const Act* logits, const int32_t* targets, int N, int V, int Vp) {
        observe("crossentropy fwd", {gpu::crossentropy_forward_traffic<Act>(N, V, Vp)},
                [&] { Ops::crossentropy_forward(losses, logits, targets, N, V, Vp); });
    }
    void crossentropy_forward_backward(float* losses, Act* logits, const int32_t* targets, float dloss, int N, int V,
                                       int Vp) {
        observe("crossentropy fwd+bwd", {gpu::crossentropy_forward_backward_traffic<Act>(N, V, Vp)},
                [&] { Ops::crossentropy_forward_backward(losses, logits, targets, dloss, N, V, Vp); });
    }
    void adamw_update(float* params, Act* copy, const float* grads, float* m, float* v, size_t lo, size_t hi,
                      const AdamWHyper& h, int t, double grad_scale) {
        observe("adamw", {gpu::adamw_update_traffic<Act>(hi - lo, copy != nullptr)},
                [&] { Ops::adamw_update(params, copy, grads, m, v, lo, hi, h, t, grad_scale); });
    }

private:
    ModelConfig cfg;
    std::vector<int32_t> host_batch;  // the last load_batch's tokens (B·T)

    // Tells the observer `op` and its launches, runs it unless device memory is only counted, and
    // tells the observer its end.
    template <class Run>
    void observe(const std::string& op, Launches launches, Run run) {
        if (observer) observer->begin(op, std::move(launches));
        if (launching()) run();
        if (observer) observer->end();
    }

    // The linear layer a matrix product (N,IC)·(OC,IC)ᵀ belongs to, told apart by its shape.
    std::string matmul_layer(int IC, int OC) const {
        if (OC == cfg.Vp) return "lm head matmul";
        if (OC == 3 * cfg.C) return "qkv matmul";
        if (OC == 4 * cfg.C) return "fc matmul";
        if (IC == 4 * cfg.C) return "fcproj matmul";
        return "attproj matmul";
    }
};

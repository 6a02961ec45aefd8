// gpt2_cpu.h — the model on the CPU: the two sets of CPU ops the model of gpt2.h runs on, and
// CpuBackend, which adds AdamW and serves ./train and ./eval.
//
//   CpuModel<double>  the textbook reference ops of cpu_ops.h (the gradient checks);
//   CpuModel<float>   the fast ops of cpu_fast_ops.h where they exist, else the reference
//                     (training, ./eval, the benchmarks).
// test/test_fast_ops.cpp checks the two against each other, op by op and as whole models.
#pragma once
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend.h"
#include "cpu_fast_ops.h"
#include "cpu_ops.h"
#include "diagnostics.h"
#include "gpt2.h"
#include "model.h"

// The reference CPU ops as the model calls them: the functions of cpu_ops.h on std::vector
// buffers of T, everything (activations, the stream, gradients, statistics) in T.
template <typename T>
struct ReferenceOps {
    using Act = T;
    using Acc = T;
    using Stream = T;
    template <class U>
    using Array = std::vector<U>;

    ReferenceOps(const ModelConfig&, int, int) {}
    static void memory_category(MemoryCategory) {}  // host memory is not planned

    // Buffers and copies.
    template <class U>
    static Array<U> alloc(size_t n) { return Array<U>(n); }  // zero-filled
    template <class U>
    static void zero(Array<U>& a) { std::fill(a.begin(), a.end(), U(0)); }
    static void copy(T* dst, const T* src, size_t n) { std::copy(src, src + n, dst); }
    static void finish() {}
    static void load_batch(Array<int32_t>& tokens, Array<int32_t>& targets, const int32_t* host_tokens,
                           const int32_t* host_targets) {
        std::copy(host_tokens, host_tokens + tokens.size(), tokens.begin());
        std::copy(host_targets, host_targets + targets.size(), targets.begin());
    }

    // Reductions: the mean of the per-position losses, the L2 norm of a buffer, the statistics.
    static T mean(const Array<T>& losses) {
        T total = 0;
        for (T l : losses) total += l;
        return total / (T)losses.size();
    }
    static double norm(const Array<T>& a) { return std::sqrt(::sum_of_squares(a.data(), a.size())); }
    static StreamStats stream_statistics(const T* x, int N, int C) { return ::stream_statistics(x, N, C); }

    // The model's ops (cpu_ops.h).
    static void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C) {
        ::encoder_forward(out, tokens, wte, wpe, B, Tn, C);
    }
    static void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C) {
        ::encoder_backward(dwte, dwpe, dout, tokens, B, Tn, C);
    }
    static void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, int N, int C) {
        ::layernorm_forward(out, mean, rstd, x, w, b, N, C);
    }
    static void layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* x, const T* w, const T* mean,
                                   const T* rstd, int N, int C, GradOut dx_out = GradOut::Add) {
        ::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, dx_out);
    }
    // layernorm_backward, then df (N,C) = Δt·dx written: the residual step's gradient for its
    // module, computed with the LayerNorm backward that finishes dx (on the CPU the two in turn).
    static void layernorm_backward_residual(T* dx, T* df, float dt, T* dw, T* db, const T* dout, const T* x,
                                            const T* w, const T* mean, const T* rstd, int N, int C,
                                            GradOut dx_out = GradOut::Add) {
        ::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, dx_out);
        ::residual_backward(df, dx, (T)dt, (size_t)N * C, GradOut::Write);
    }
    static void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int IC, int OC) {
        ::matmul_forward(out, inp, w, bias, N, IC, OC);
    }
    static void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N, int IC,
                                int OC, GradOut dinp_out = GradOut::Add) {
        ::matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC, dinp_out);
    }
    static void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
        ::attention_forward(out, att, qkv, B, Tn, C, NH);
    }
    // Attention saves its probabilities (B,NH,T,T); the backward needs them, not the output.
    using AttentionSaved = T;
    static size_t attention_saved_size(int B, int Tn, int NH) { return (size_t)B * NH * Tn * Tn; }
    // dqkv = attention's backward (the qkv bias gradient is the qkv product's).
    static void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* /*out*/, const T* att, int B, int Tn,
                                   int C, int NH) {
        ::attention_backward(dqkv, dout, qkv, att, B, Tn, C, NH);
    }
    static void gelu_forward(T* out, const T* x, size_t n) { ::gelu_forward(out, x, n); }
    // pre (N,OC) = inp·wᵀ + bias, out = GELU(pre): the MLP's fc layer and its activation.
    static void matmul_gelu_forward(T* out, T* pre, const T* inp, const T* w, const T* bias, int N, int IC, int OC) {
        ::matmul_forward(pre, inp, w, bias, N, IC, OC);
        ::gelu_forward(out, pre, (size_t)N * OC);
    }
    static void gelu_backward(T* dx, const T* dout, const T* x, size_t n, GradOut dx_out = GradOut::Add) {
        ::gelu_backward(dx, dout, x, n, dx_out);
    }
    // The backward of a linear layer whose input is inp = GELU(pre): dpre (N,IC) =
    // (dout·w)·GELU'(pre) (written), dw and dbias added as matmul_backward adds them: the
    // layer's backward into dpre, then GELU's backward over it in place.
    static void matmul_gelu_backward(T* dpre, T* dw, T* dbias, const T* dout, const T* inp, const T* w, const T* pre,
                                     int N, int IC, int OC) {
        ::matmul_backward(dpre, dw, dbias, dout, inp, w, N, IC, OC, GradOut::Write);
        ::gelu_backward(dpre, dpre, pre, (size_t)N * IC, GradOut::Write);
    }
    static void residual_forward(T* out, const T* x, const T* f, float dt, size_t n) {
        ::residual_forward(out, x, f, (T)dt, n);
    }
    // sum (N,C) = x + Δt·f, then out, mean, rstd = LayerNorm(sum): the add and the LayerNorm
    // that reads its sum, as one op of the model (on the CPU the two ops in turn).
    static void residual_layernorm_forward(T* sum, T* out, T* mean, T* rstd, const T* x, const T* f, float dt,
                                           const T* w, const T* b, int N, int C) {
        ::residual_forward(sum, x, f, (T)dt, (size_t)N * C);
        ::layernorm_forward(out, mean, rstd, sum, w, b, N, C);
    }
    static void crossentropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V, int Vp) {
        ::crossentropy_forward(losses, logits, targets, N, V, Vp);
    }
    // The losses, then the logits overwritten with their gradient: the two ops above, in order.
    static void crossentropy_forward_backward(T* losses, T* logits, const int32_t* targets, T dloss, int N, int V,
                                              int Vp) {
        ::crossentropy_forward(losses, logits, targets, N, V, Vp);
        ::crossentropy_backward_inplace(logits, targets, dloss, N, V, Vp);
    }
};

// The fast CPU ops (float): those of cpu_fast_ops.h in place of their reference; the rest as
// ReferenceOps<float> has them.
struct FastOps : ReferenceOps<float> {
    using ReferenceOps<float>::ReferenceOps;
    using T = float;

    static double norm(const Array<T>& a) { return std::sqrt(fast::sum_of_squares(a.data(), a.size())); }
    static void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, int N, int C) {
        fast::layernorm_forward(out, mean, rstd, x, w, b, N, C);
    }
    static void residual_layernorm_forward(T* sum, T* out, T* mean, T* rstd, const T* x, const T* f, float dt,
                                           const T* w, const T* b, int N, int C) {
        ::residual_forward(sum, x, f, dt, (size_t)N * C);
        fast::layernorm_forward(out, mean, rstd, sum, w, b, N, C);
    }
    static void layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* x, const T* w, const T* mean,
                                   const T* rstd, int N, int C, GradOut dx_out = GradOut::Add) {
        fast::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, dx_out);
    }
    static void layernorm_backward_residual(T* dx, T* df, float dt, T* dw, T* db, const T* dout, const T* x,
                                            const T* w, const T* mean, const T* rstd, int N, int C,
                                            GradOut dx_out = GradOut::Add) {
        fast::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, dx_out);
        ::residual_backward(df, dx, dt, (size_t)N * C, GradOut::Write);
    }
    static void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int IC, int OC) {
        fast::matmul_forward(out, inp, w, bias, N, IC, OC);
    }
    static void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N, int IC,
                                int OC, GradOut dinp_out = GradOut::Add) {
        fast::matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC, dinp_out);
    }
    static void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
        fast::attention_forward(out, att, qkv, B, Tn, C, NH);
    }
    static void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* /*out*/, const T* att, int B, int Tn,
                                   int C, int NH) {
        fast::attention_backward(dqkv, dout, qkv, att, B, Tn, C, NH);
    }
    static void gelu_forward(T* out, const T* x, size_t n) { fast::gelu_forward(out, x, n); }
    static void matmul_gelu_forward(T* out, T* pre, const T* inp, const T* w, const T* bias, int N, int IC, int OC) {
        fast::matmul_forward(pre, inp, w, bias, N, IC, OC);
        fast::gelu_forward(out, pre, (size_t)N * OC);
    }
    static void gelu_backward(T* dx, const T* dout, const T* x, size_t n, GradOut dx_out = GradOut::Add) {
        fast::gelu_backward(dx, dout, x, n, dx_out);
    }
    static void matmul_gelu_backward(T* dpre, T* dw, T* dbias, const T* dout, const T* inp, const T* w, const T* pre,
                                     int N, int IC, int OC) {
        fast::matmul_backward(dpre, dw, dbias, dout, inp, w, N, IC, OC, GradOut::Write);
        fast::gelu_backward(dpre, dpre, pre, (size_t)N * IC, GradOut::Write);
    }
    static void crossentropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V, int Vp) {
        fast::crossentropy_forward(losses, logits, targets, N, V, Vp);
    }
    static void crossentropy_forward_backward(T* losses, T* logits, const int32_t* targets, T dloss, int N, int V,
                                              int Vp) {
        fast::crossentropy_forward(losses, logits, targets, N, V, Vp);
        fast::crossentropy_backward_inplace(logits, targets, dloss, N, V, Vp);
    }
};

// The ops a CpuModel<T> runs on: the reference, and for float the fast ops. (A class template
// rather than an alias, so functions taking a CpuModel<T> can deduce T.)
template <typename T>
struct CpuOps : ReferenceOps<T> {
    using ReferenceOps<T>::ReferenceOps;
};
template <>
struct CpuOps<float> : FastOps {
    using FastOps::FastOps;
};

template <typename T>
using CpuModel = Gpt2<CpuOps<T>>;

// The CPU model as a Backend for ./train and ./eval: CpuModel<float> plus AdamW moments.
class CpuBackend : public Backend {
public:
    CpuBackend(const ModelConfig& cfg, int B, int T)
        : model(cfg, B, T), range{0, model.params.size()}, m(model.params.size()), v(model.params.size()) {}

    std::string name() const override {
        return "cpu (fp32, " + std::to_string(omp_get_max_threads()) + " threads)";
    }
    const ModelConfig& config() const override { return model.cfg; }

    float forward(const int32_t* inputs, const int32_t* targets) override { return model.forward(inputs, targets); }
    void forward_to_logits(const int32_t* inputs, const int32_t* targets) override {
        model.forward_to_logits(inputs, targets);
    }
    void zero_grad() override { model.ops.zero(model.grads); }
    float backward(float loss_weight) override { return model.backward(loss_weight); }
    double grad_norm() override { return model.grad_norm(); }

    // AdamW over the optimiser range; m and v hold that range only.
    void update(const AdamWHyper& h, int t, double grad_scale) override {
        for_each_tensor_part(model.cfg, range, [&](int i, size_t o, size_t n) {
            AdamWHyper hi = h;
            if (!param_decays(i)) hi.weight_decay = 0;
            adamw_update(model.params.data() + o, model.grads.data() + o, m.data() + (o - range.lo),
                         v.data() + (o - range.lo), n, hi, t, grad_scale);
        });
    }

    void get_params(float* out) override { std::copy(model.params.begin(), model.params.end(), out); }
    void set_params(const float* in) override { std::copy(in, in + model.params.size(), model.params.begin()); }
    void get_moments(float* m_out, float* v_out) override {
        std::copy(m.begin(), m.end(), m_out);
        std::copy(v.begin(), v.end(), v_out);
    }
    void set_moments(const float* m_in, const float* v_in) override {
        std::copy(m_in, m_in + m.size(), m.begin());
        std::copy(v_in, v_in + v.size(), v.begin());
    }

    void set_optimizer_range(Range r) override {
        range = r;
        m.assign(r.size(), 0.0f);
        v.assign(r.size(), 0.0f);
    }
    void sum_grads(ProcessGroup& group) override { group.sum(model.grads.data(), model.grads.size()); }
    void gather_params(ProcessGroup& group) override { group.all_gather(model.params.data(), model.params.size()); }

    std::vector<StreamStats> stream_stats() override { return model.half_stream_stats(); }
    void record_stream_grads(bool on) override { model.record_stream_grads = on; }
    std::vector<double> stream_grad_norms() override { return model.stream_grad_norm; }
    std::vector<double> stream_rms() override { return diag::half_stream_rms(model); }
    std::vector<double> attn_logit_max() override { return diag::attention_logit_maxima(model); }
    LogitStats logit_stats() override { return diag::model_logit_statistics(model); }
    std::vector<double> mlp_hidden_rms() override { return diag::mlp_hidden_rms(model); }
    std::vector<double> block_param_norms() override { return diag::block_param_norms(model); }
    std::vector<double> fcproj_grad_norms() override { return diag::fcproj_grad_norms(model); }

    CpuModel<float> model;

private:
    Range range;              // the optimiser range (set_optimizer_range)
    std::vector<float> m, v;  // AdamW moments of that range, file order
};

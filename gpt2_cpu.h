// gpt2_cpu.h — the model on the CPU: the two sets of CPU ops the model of gpt2.h runs on, and
// CpuBackend, which adds AdamW and serves ./train and ./eval.
//
//   ReferenceOps<Real>  the textbook ops of cpu_ops.h: CpuModel<double> (the gradient checks),
//                       ./train -cpu_ops reference (ReferenceOps<float>);
//   FastOps             the fast ops of cpu_fast_ops.h where they exist, else the reference:
//                       CpuModel<float> (training, ./eval, the benchmarks).
// An op set is one table, read top to bottom: every op the model calls, each one of those
// functions under the name the model calls; FastOps names the reference functions it reuses.
// Neither inherits the other; both keep their buffers in HostMemory. A static_assert after the
// tables checks that they offer the same ops; test/test_fast_ops.cpp checks the two sets against
// each other, op by op and as whole models; test_cli trains with each (./train -cpu_ops).
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backend.h"
#include "cpu_fast_ops.h"
#include "cpu_ops.h"
#include "diagnostics.h"
#include "gpt2.h"
#include "model.h"

// Where both CPU op sets keep their buffers: std::vector of Real, everything (activations, the
// stream, gradients, statistics) in Real. Host memory is not planned (memory_category), and every op
// has finished when it returns (finish does nothing). Not an op set: no op of the model is here.
template <typename Real>
struct HostMemory {
    using Act = Real;
    using Acc = Real;
    template <class U>
    using Array = std::vector<U>;

    HostMemory(const ModelConfig&, int, int) {}

    static void memory_category(MemoryCategory) {}
    template <class U>
    static Array<U> alloc(size_t n) { return Array<U>(n); }  // zero-filled
    template <class U>
    static void zero(Array<U>& a) { std::fill(a.begin(), a.end(), U(0)); }
    static void copy(Real* dst, const Real* src, size_t n) { std::copy(src, src + n, dst); }
    static void finish() {}
    static void load_batch(Array<int32_t>& tokens, Array<int32_t>& targets, const int32_t* host_tokens,
                           const int32_t* host_targets) {
        std::copy(host_tokens, host_tokens + tokens.size(), tokens.begin());
        std::copy(host_targets, host_targets + targets.size(), targets.begin());
    }
};

// The reference CPU ops: every op the model calls, the textbook functions of cpu_ops.h in Real.
template <typename Real>
struct ReferenceOps : HostMemory<Real> {
    using HostMemory<Real>::HostMemory;

    // Attention keeps its probabilities (B,NH,T,T) for its backward.
    static size_t attention_saved_size(int B, int T, int NH) { return (size_t)B * NH * T * T; }
    // The mean of the per-position losses; the L2 norm of the gradients.
    static Real mean(const std::vector<Real>& losses) {
        Real total = 0;
        for (Real l : losses) total += l;
        return total / (Real)losses.size();
    }
    static double norm(const std::vector<Real>& a) { return std::sqrt(::sum_of_squares(a.data(), a.size())); }

    // The model's ops (cpu_ops.h).
    static constexpr auto encoder_forward = ::encoder_forward<Real>;
    static constexpr auto encoder_backward = ::encoder_backward<Real>;
    static constexpr auto layernorm_forward = ::layernorm_forward<Real>;
    static constexpr auto layernorm_backward = ::layernorm_backward<Real>;
    static constexpr auto matmul_forward = ::matmul_forward<Real>;
    static constexpr auto matmul_backward = ::matmul_backward<Real>;
    static constexpr auto attention_forward = ::attention_forward<Real>;
    // dqkv = attention's backward from the probabilities it kept (the CUDA ops read its output
    // instead; the qkv bias gradient is the qkv product's).
    static void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* /*out*/, const Real* att,
                                   int B, int T, int C, int NH) {
        ::attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
    }
    static constexpr auto residual_forward = ::residual_forward<Real>;
    static constexpr auto crossentropy_forward = ::crossentropy_forward<Real>;
    // GELU's backward alone: no pass of the model calls it (matmul_gelu_backward runs it), the
    // tangent pass of measure/stability.h does.
    static constexpr auto gelu_backward = ::gelu_backward<Real>;
    // Ops that are two functions of cpu_ops.h in turn (on CUDA one cuBLASLt product with its
    // epilogue, where that kind runs fused):
    // pre (N,OC) = inp·wᵀ + bias, out = GELU(pre): the MLP's fc layer and its activation.
    static void matmul_gelu_forward(Real* out, Real* pre, const Real* inp, const Real* w, const Real* bias, int N,
                                    int IC, int OC) {
        ::matmul_forward(pre, inp, w, bias, N, IC, OC);
        ::gelu_forward(out, pre, (size_t)N * OC);
    }
    // The backward of a linear layer whose input is inp = GELU(pre): dpre (N,IC) =
    // (dout·w)·GELU'(pre) (written), dw and dbias added as matmul_backward adds them: the
    // layer's backward into dpre, then GELU's backward over it in place.
    static void matmul_gelu_backward(Real* dpre, Real* dw, Real* dbias, const Real* dout, const Real* inp,
                                     const Real* w, const Real* pre, int N, int IC, int OC) {
        ::matmul_backward(dpre, dw, dbias, dout, inp, w, N, IC, OC, GradOut::Write);
        ::gelu_backward(dpre, dpre, pre, (size_t)N * IC, GradOut::Write);
    }
    // The losses, then the logits overwritten with their gradient.
    static void crossentropy_forward_backward(Real* losses, Real* logits, const int32_t* targets, Real dloss, int N,
                                              int V, int Vp) {
        ::crossentropy_forward(losses, logits, targets, N, V, Vp);
        ::crossentropy_backward_inplace(logits, targets, dloss, N, V, Vp);
    }
    // The two pairs the CUDA ops fuse into one kernel (docs/cuda.md §3); the CPU runs them unfused.
    // s (N,C) = x + Δt·f, then out = LayerNorm(s): residual_forward, then layernorm_forward.
    static void residual_layernorm_forward(Real* s, Real* out, Real* mean, Real* rstd, const Real* x, const Real* f,
                                           Real dt, const Real* w, const Real* b, int N, int C) {
        ::residual_forward(s, x, f, dt, (size_t)N * C);
        ::layernorm_forward(out, mean, rstd, s, w, b, N, C);
    }
    // layernorm_backward into dx, then residual_backward: df (N,C) = Δt·dx (written).
    static void layernorm_backward_residual(Real* dx, Real* df, Real dt, Real* dw, Real* db, const Real* dout,
                                            const Real* x, const Real* w, const Real* mean, const Real* rstd, int N,
                                            int C, GradOut dx_out) {
        ::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, dx_out);
        ::residual_backward(df, dx, dt, (size_t)N * C, GradOut::Write);
    }

    // The reductions of the diagnostics (diagnostics.h), in double.
    static constexpr auto sum_of_squares = ::sum_of_squares<Real>;
    static constexpr auto stream_statistics = ::stream_statistics<Real>;
    static constexpr auto attention_logit_max = diag::attention_logit_max<Real>;
    static constexpr auto logit_statistics = diag::logit_statistics<Real>;
};

// The fast CPU ops (float): every op the model calls, the fast function of cpu_fast_ops.h where
// there is one, else the reference one of cpu_ops.h, named here ("the reference").
struct FastOps : HostMemory<float> {
    using HostMemory<float>::HostMemory;

    static constexpr auto attention_saved_size = ReferenceOps<float>::attention_saved_size;  // the reference
    static constexpr auto mean = ReferenceOps<float>::mean;                                  // the reference
    static double norm(const std::vector<float>& a) { return std::sqrt(fast::sum_of_squares(a.data(), a.size())); }

    // The model's ops.
    static constexpr auto encoder_forward = ::encoder_forward<float>;    // the reference
    static constexpr auto encoder_backward = ::encoder_backward<float>;  // the reference
    static constexpr auto layernorm_forward = fast::layernorm_forward;
    static constexpr auto layernorm_backward = fast::layernorm_backward;
    static constexpr auto matmul_forward = fast::matmul_forward;
    static constexpr auto matmul_backward = fast::matmul_backward;
    static constexpr auto attention_forward = fast::attention_forward;
    static void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* /*out*/,
                                   const float* att, int B, int T, int C, int NH) {
        fast::attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
    }
    static constexpr auto residual_forward = ::residual_forward<float>;  // the reference
    static constexpr auto crossentropy_forward = fast::crossentropy_forward;
    static constexpr auto gelu_backward = fast::gelu_backward;  // measure/stability.h's, as above
    // Ops that are two of the above in turn, as ReferenceOps has them.
    static void matmul_gelu_forward(float* out, float* pre, const float* inp, const float* w, const float* bias, int N,
                                    int IC, int OC) {
        fast::matmul_forward(pre, inp, w, bias, N, IC, OC);
        fast::gelu_forward(out, pre, (size_t)N * OC);
    }
    static void matmul_gelu_backward(float* dpre, float* dw, float* dbias, const float* dout, const float* inp,
                                     const float* w, const float* pre, int N, int IC, int OC) {
        fast::matmul_backward(dpre, dw, dbias, dout, inp, w, N, IC, OC, GradOut::Write);
        fast::gelu_backward(dpre, dpre, pre, (size_t)N * IC, GradOut::Write);
    }
    static void crossentropy_forward_backward(float* losses, float* logits, const int32_t* targets, float dloss, int N,
                                              int V, int Vp) {
        fast::crossentropy_forward(losses, logits, targets, N, V, Vp);
        fast::crossentropy_backward_inplace(logits, targets, dloss, N, V, Vp);
    }

    // The two pairs the CUDA ops fuse, unfused, with the fast LayerNorms (see ReferenceOps).
    static void residual_layernorm_forward(float* s, float* out, float* mean, float* rstd, const float* x,
                                           const float* f, float dt, const float* w, const float* b, int N, int C) {
        ::residual_forward(s, x, f, dt, (size_t)N * C);
        fast::layernorm_forward(out, mean, rstd, s, w, b, N, C);
    }
    static void layernorm_backward_residual(float* dx, float* df, float dt, float* dw, float* db, const float* dout,
                                            const float* x, const float* w, const float* mean, const float* rstd,
                                            int N, int C, GradOut dx_out) {
        fast::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, dx_out);
        ::residual_backward(df, dx, dt, (size_t)N * C, GradOut::Write);
    }

    // The reductions of the diagnostics (diagnostics.h), in double.
    static constexpr auto sum_of_squares = ::sum_of_squares<float>;                // the reference
    static constexpr auto stream_statistics = ::stream_statistics<float>;          // the reference
    static constexpr auto attention_logit_max = diag::attention_logit_max<float>;  // the reference
    static constexpr auto logit_statistics = diag::logit_statistics<float>;        // the reference
};

// The two tables offer the same ops, under the same names and with the same types (in float):
// an op missing from either, or typed differently, stops the build here.
#define CPU_OP_SETS_AGREE_ON(op)                                                                    \
    static_assert(std::is_same<decltype(+ReferenceOps<float>::op), decltype(+FastOps::op)>::value, \
                  "ReferenceOps and FastOps differ in " #op)
CPU_OP_SETS_AGREE_ON(attention_saved_size);
CPU_OP_SETS_AGREE_ON(mean);
CPU_OP_SETS_AGREE_ON(norm);
CPU_OP_SETS_AGREE_ON(encoder_forward);
CPU_OP_SETS_AGREE_ON(encoder_backward);
CPU_OP_SETS_AGREE_ON(layernorm_forward);
CPU_OP_SETS_AGREE_ON(layernorm_backward);
CPU_OP_SETS_AGREE_ON(matmul_forward);
CPU_OP_SETS_AGREE_ON(matmul_backward);
CPU_OP_SETS_AGREE_ON(attention_forward);
CPU_OP_SETS_AGREE_ON(attention_backward);
CPU_OP_SETS_AGREE_ON(gelu_backward);
CPU_OP_SETS_AGREE_ON(residual_forward);
CPU_OP_SETS_AGREE_ON(crossentropy_forward);
CPU_OP_SETS_AGREE_ON(matmul_gelu_forward);
CPU_OP_SETS_AGREE_ON(matmul_gelu_backward);
CPU_OP_SETS_AGREE_ON(crossentropy_forward_backward);
CPU_OP_SETS_AGREE_ON(residual_layernorm_forward);
CPU_OP_SETS_AGREE_ON(layernorm_backward_residual);
CPU_OP_SETS_AGREE_ON(sum_of_squares);
CPU_OP_SETS_AGREE_ON(stream_statistics);
CPU_OP_SETS_AGREE_ON(attention_logit_max);
CPU_OP_SETS_AGREE_ON(logit_statistics);
#undef CPU_OP_SETS_AGREE_ON

// The CPU model: on the fast ops in float (training, ./eval, sampling, the benchmarks), on the
// reference ops in double (the gradient checks, the stability tests).
template <typename Real>
using CpuModel = Gpt2<std::conditional_t<std::is_same<Real, float>::value, FastOps, ReferenceOps<Real>>>;

// The CPU model as a Backend for ./train and ./eval: the model on the op set Ops (the fast ops
// unless ./train -cpu_ops reference), whose passes ./train calls (Gpt2, gpt2.h), plus AdamW
// moments and the copies in and out.
// (The model's members are this->params and so on: a base that depends on a template's
// parameter is not searched for plain names.)
template <class Ops = FastOps>
class CpuBackend final : public Gpt2<Ops, Backend> {
    static_assert(std::is_same<typename Ops::Acc, float>::value, "the backend's parameters are fp32");

public:
    CpuBackend(const ModelConfig& cfg, int B, int T)
        : Gpt2<Ops, Backend>(cfg, B, T), range{0, this->params.size()}, m(range.size()), v(range.size()) {}

    std::string name() const override {
        const char* ops = std::is_same<Ops, FastOps>::value ? "" : "the textbook ops of cpu_ops.h, ";
        return std::string("cpu (fp32, ") + ops + counted(omp_get_max_threads(), "thread") + ")";
    }
    const ModelConfig& config() const override { return this->cfg; }
    const FusionChoice* fusion() const override { return nullptr; }

    // AdamW over the optimiser range; m and v hold that range only.
    void update(const AdamWHyper& h, int t, double grad_scale) override {
        for_each_tensor_part(this->cfg, range, [&](int i, size_t o, size_t n) {
            AdamWHyper hi = h;
            if (!param_decays(i)) hi.weight_decay = 0;
            adamw_update(this->params.data() + o, this->grads.data() + o, m.data() + (o - range.lo),
                         v.data() + (o - range.lo), n, hi, t, grad_scale);
        });
    }

    void get_params(float* out) override { std::copy(this->params.begin(), this->params.end(), out); }
    void set_params(const float* in) override { std::copy(in, in + this->params.size(), this->params.begin()); }
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
    void sum_grads(ProcessGroup& group) override { group.sum(this->grads.data(), this->grads.size()); }
    void gather_params(ProcessGroup& group) override { group.all_gather(this->params.data(), this->params.size()); }

private:
    Range range;              // the optimiser range (set_optimizer_range)
    std::vector<float> m, v;  // AdamW moments of that range, file order
};

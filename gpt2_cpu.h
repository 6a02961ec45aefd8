// gpt2_cpu.h — the CPU reference model: GPT-2 with Pre-, Post- or Peri-LN and residual step Δt,
// forward and backward, built from the ops in cpu_ops.h; and CpuBackend, which adds AdamW and
// serves ./train and ./eval.
//
// CpuModel<T> is a template so the same code runs in float (training) and double (gradient
// checks). All buffers are allocated once, for micro-batches of shape (B, T).
#pragma once
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend.h"
#include "cpu_ops.h"
#include "diagnostics.h"
#include "model.h"

template <typename T>
class CpuModel {
public:
    // The learnable weights of one LayerNorm (C gains, C biases).
    using Norm = NormWeights<T>;
    // Saved values of one LayerNorm application over N rows: its output and statistics.
    struct NormActs {
        std::vector<T> out, mean, rstd;  // (N,C), (N), (N)
    };
    // Saved values of one residual step x → x' (see NormPlan).
    struct StepActs {
        NormActs in, out, after;     // allocated only when the placement uses them
        std::vector<T> module_out;   // F(u) before any output LN (N,C)
        std::vector<T> sum;          // x + Δt·f (N,C)
    };
    // Saved values of one block.
    struct BlockActs {
        StepActs attn_step, mlp_step;
        std::vector<T> qkv;    // (N,3C)
        std::vector<T> att;    // attention probabilities (B,NH,T,T)
        std::vector<T> heads;  // attention output before its projection (N,C)
        std::vector<T> fc;     // (N,4C) before GELU
        std::vector<T> gelu;   // (N,4C)
    };

    ModelConfig cfg;
    int B, Tn, N;
    std::vector<T> params, grads;  // flat, file order
    ParamTensors<T> p, g;          // named views of params and grads

    CpuModel(const ModelConfig& config, int batch, int seq_len)
        : cfg(config), B(batch), Tn(seq_len), N(batch * seq_len),
          params(num_parameters(config)), grads(num_parameters(config)),
          p(param_tensors(params.data(), config)), g(param_tensors(grads.data(), config)) {
        const size_t C = cfg.C, NC = (size_t)N * C;
        const NormPlan plan = norm_plan(cfg.placement);
        auto alloc_step = [&](StepActs& s) {
            if (plan.input) alloc_norm(s.in);
            if (plan.output) alloc_norm(s.out);
            if (plan.after_add) alloc_norm(s.after);
            s.module_out.resize(NC);
            s.sum.resize(NC);
        };
        blocks.resize(cfg.L);
        for (BlockActs& a : blocks) {
            alloc_step(a.attn_step);
            alloc_step(a.mlp_step);
            a.qkv.resize(3 * NC);
            a.att.resize((size_t)B * cfg.NH * Tn * Tn);
            a.heads.resize(NC);
            a.fc.resize(4 * NC);
            a.gelu.resize(4 * NC);
        }
        embedded.resize(NC);
        alloc_norm(final_norm);
        logits.resize((size_t)N * cfg.Vp);
        losses.resize(N);
        targets_copy.resize(N);
        tokens_copy.resize(N);
        for (std::vector<T>* v : {&d_stream, &d_stream_next, &d_h, &d_sum, &d_f, &d_mod, &d_u, &d_heads})
            v->resize(NC);
        d_qkv.resize(3 * NC);
        d_fc.resize(4 * NC);
        d_gelu.resize(4 * NC);
    }

    // Residual stream X_i (N,C) of the last forward: i = 0 after the embedding, i = l after block l.
    const T* stream(int i) const { return i == 0 ? embedded.data() : block_output(blocks[i - 1]); }

    // The residual stream at half-block resolution, j = 0 .. 2L: j = 2l + 1 after block l's
    // attention step, j = 2l + 2 after its MLP step.
    const T* half_stream(int j) const {
        if (j == 0) return embedded.data();
        const BlockActs& a = blocks[(j - 1) / 2];
        return step_output(j % 2 ? a.attn_step : a.mlp_step, norm_plan(cfg.placement).after_add);
    }

    // When true, backward stores ‖∂loss/∂X‖ at the 2L + 1 half_stream points in stream_grad_norm.
    bool record_stream_grads = false;
    std::vector<double> stream_grad_norm;

    // ---- diagnostics (stability.h, ./eval): run parts of the model on given inputs ----------
    // These reuse block_forward and the residual steps unchanged; each call replaces the saved
    // activations of the block(s) it runs, so a later backward would see them.

    // Logits (N,Vp) and per-position losses (N) of the last forward (backward overwrites logits).
    const T* logits_data() const { return logits.data(); }
    const T* losses_data() const { return losses.data(); }
    // Saved values of block l from the last forward (read by the tangent pass in stability.h).
    const BlockActs& block_activations(int l) const { return blocks[l]; }
    // Runs block l alone on x (N,C); returns its output (N,C), valid until block l runs again.
    const T* run_block(int l, const T* x) {
        block_forward(l, x);
        return block_output(blocks[l]);
    }
    // Runs one residual step of block l (which = 0: attention step, 1: MLP step) on x (N,C);
    // returns x' (N,C), valid until that step runs again.
    const T* run_step(int l, int which, const T* x) {
        BlockActs& a = blocks[l];
        if (which == 0)
            return residual_step_forward(a.attn_step, x, module_norm(l, 0), output_norm(l, 0),
                                         [&](const T* u, T* f) { attention_module_forward(l, u, f); });
        return residual_step_forward(a.mlp_step, x, module_norm(l, 1), output_norm(l, 1),
                                     [&](const T* u, T* f) { mlp_module_forward(l, u, f); });
    }
    // Runs every block from X_0 = x0 (N,C) in place of the embedding; stream(i) then holds X_i.
    // The final LayerNorm, logits and losses are left as they were.
    void run_blocks_from(const T* x0) {
        std::copy(x0, x0 + (size_t)N * cfg.C, embedded.begin());
        for (int l = 0; l < cfg.L; l++) block_forward(l, stream(l));
    }

    // Forward pass: tokens, targets (B·T). Returns the mean cross-entropy; per-position losses
    // stay in `losses` and the logits (N,Vp) in `logits`.
    T forward(const int32_t* tokens, const int32_t* targets) {
        const int C = cfg.C;
        std::copy(tokens, tokens + N, tokens_copy.begin());
        std::copy(targets, targets + N, targets_copy.begin());
        encoder_forward(embedded.data(), tokens, p.wte, p.wpe, B, Tn, C);
        for (int l = 0; l < cfg.L; l++) block_forward(l, stream(l));
        const T* x_last = stream(cfg.L);
        layernorm_forward(final_norm.out.data(), final_norm.mean.data(), final_norm.rstd.data(), x_last,
                          p.lnfw, p.lnfb, N, C);
        matmul_forward(logits.data(), final_norm.out.data(), p.wte, (const T*)nullptr, N, C, cfg.Vp);
        crossentropy_forward(losses.data(), logits.data(), targets, N, cfg.V, cfg.Vp);
        T total = 0;
        for (T l : losses) total += l;
        return total / N;
    }

    // Backward pass of the last forward: grads += loss_weight · d(mean loss)/d(params).
    // Consumes the logits (they become their gradient).
    void backward(T loss_weight) {
        const int C = cfg.C;
        crossentropy_backward_inplace(logits.data(), targets_copy.data(), loss_weight / N, N, cfg.V, cfg.Vp);
        std::fill(d_u.begin(), d_u.end(), T(0));
        matmul_backward(d_u.data(), g.wte, (T*)nullptr, logits.data(), final_norm.out.data(), p.wte, N, C,
                        cfg.Vp);
        std::fill(d_stream.begin(), d_stream.end(), T(0));
        layernorm_backward(d_stream.data(), g.lnfw, g.lnfb, d_u.data(), stream(cfg.L), p.lnfw,
                           final_norm.mean.data(), final_norm.rstd.data(), N, C);
        if (record_stream_grads) stream_grad_norm.assign(2 * cfg.L + 1, 0.0);
        for (int l = cfg.L - 1; l >= 0; l--) {
            if (record_stream_grads) stream_grad_norm[2 * l + 2] = std::sqrt(sum_of_squares(d_stream.data(), d_stream.size()));
            std::fill(d_stream_next.begin(), d_stream_next.end(), T(0));
            block_backward(l, stream(l), d_stream.data(), d_stream_next.data());
            if (record_stream_grads) stream_grad_norm[2 * l + 1] = std::sqrt(sum_of_squares(d_h.data(), d_h.size()));
            std::swap(d_stream, d_stream_next);
        }
        if (record_stream_grads) stream_grad_norm[0] = std::sqrt(sum_of_squares(d_stream.data(), d_stream.size()));
        encoder_backward(g.wte, g.wpe, d_stream.data(), tokens_copy.data(), B, Tn, C);
    }

private:
    std::vector<BlockActs> blocks;
    std::vector<T> embedded;  // X_0 (N,C)
    NormActs final_norm;      // LNf
    std::vector<T> logits;    // (N,Vp), gradient after backward
    std::vector<T> losses;    // (N)
    std::vector<int32_t> tokens_copy, targets_copy;
    // Gradient scratch, reused by every block (all (N,C) unless noted).
    std::vector<T> d_stream, d_stream_next, d_h, d_sum, d_f, d_mod, d_u, d_heads;
    std::vector<T> d_qkv;          // (N,3C)
    std::vector<T> d_fc, d_gelu;   // (N,4C)

    void alloc_norm(NormActs& n) {
        n.out.resize((size_t)N * cfg.C);
        n.mean.resize(N);
        n.rstd.resize(N);
    }

    static const T* step_output(const StepActs& s, bool after_add) {
        return after_add ? s.after.out.data() : s.sum.data();
    }
    const T* block_output(const BlockActs& a) const {
        return step_output(a.mlp_step, norm_plan(cfg.placement).after_add);
    }

    // LayerNorm weights of block l and their gradients: which = 0 for ln1 / ln1o, 1 for ln2 / ln2o.
    Norm module_norm(int l, int which) const { return block_norm(p, l, cfg.C, which, false); }
    Norm output_norm(int l, int which) const { return block_norm(p, l, cfg.C, which, true); }
    Norm module_norm_grad(int l, int which) const { return block_norm(g, l, cfg.C, which, false); }
    Norm output_norm_grad(int l, int which) const { return block_norm(g, l, cfg.C, which, true); }

    // ---- the block: the three placements side by side -----------------------------------------
    //
    //   Pre-LN:  h = x + Δt·Attn(LN1(x));            x' = h + Δt·MLP(LN2(h))
    //   Post-LN: h = LN1(x + Δt·Attn(x));            x' = LN2(h + Δt·MLP(h))
    //   Peri-LN: h = x + Δt·LN1o(Attn(LN1(x)));      x' = h + Δt·LN2o(MLP(LN2(h)))
    //
    // Both halves are one residual step with the LayerNorms that NormPlan switches on:
    //   u = LN_in(x)?   f = LN_out(F(u))?   s = x + Δt·f   x' = LN_after(s)?

    // Block l forward: x (N,C) → the block's output (kept in blocks[l]).
    void block_forward(int l, const T* x) {
        BlockActs& a = blocks[l];
        const T* h = residual_step_forward(a.attn_step, x, module_norm(l, 0), output_norm(l, 0),
                                           [&](const T* u, T* f) { attention_module_forward(l, u, f); });
        residual_step_forward(a.mlp_step, h, module_norm(l, 1), output_norm(l, 1),
                              [&](const T* u, T* f) { mlp_module_forward(l, u, f); });
    }

    // Block l backward: given d(block output) (N,C), adds d(block input) into dx (N,C).
    void block_backward(int l, const T* x, const T* dout, T* dx) {
        BlockActs& a = blocks[l];
        const NormPlan plan = norm_plan(cfg.placement);
        const T* h = step_output(a.attn_step, plan.after_add);
        zero(d_h);
        residual_step_backward(a.mlp_step, h, dout, d_h.data(), l, 1,
                               [&](const T* u, const T* df, T* du) { mlp_module_backward(l, u, df, du); });
        residual_step_backward(a.attn_step, x, d_h.data(), dx, l, 0,
                               [&](const T* u, const T* df, T* du) { attention_module_backward(l, u, df, du); });
    }

    // One residual step forward; returns x' (N,C).
    template <typename Module>
    const T* residual_step_forward(StepActs& s, const T* x, Norm in_norm, Norm out_norm, Module module) {
        const NormPlan plan = norm_plan(cfg.placement);
        const int C = cfg.C;
        const T* u = x;
        if (plan.input) u = norm_forward(s.in, x, in_norm);
        module(u, s.module_out.data());
        const T* f = s.module_out.data();
        if (plan.output) f = norm_forward(s.out, f, out_norm);
        residual_forward(s.sum.data(), x, f, (T)cfg.dt, (size_t)N * C);
        if (plan.after_add) return norm_forward(s.after, s.sum.data(), in_norm);
        return s.sum.data();
    }

    // One residual step backward: given dx' (N,C), adds dx (N,C). `which` picks ln1 or ln2.
    template <typename ModuleBackward>
    void residual_step_backward(StepActs& s, const T* x, const T* dxout, T* dx, int l, int which,
                                ModuleBackward module_backward) {
        const NormPlan plan = norm_plan(cfg.placement);
        const size_t NC = (size_t)N * cfg.C;
        const T* ds = dxout;
        if (plan.after_add) {
            zero(d_sum);
            norm_backward(d_sum.data(), module_norm_grad(l, which), dxout, s.sum.data(), module_norm(l, which),
                          s.after);
            ds = d_sum.data();
        }
        zero(d_f);
        residual_backward(dx, d_f.data(), ds, (T)cfg.dt, NC);
        const T* dmod = d_f.data();
        if (plan.output) {
            zero(d_mod);
            norm_backward(d_mod.data(), output_norm_grad(l, which), d_f.data(), s.module_out.data(),
                          output_norm(l, which), s.out);
            dmod = d_mod.data();
        }
        const T* u = plan.input ? s.in.out.data() : x;
        if (plan.input) {
            zero(d_u);
            module_backward(u, dmod, d_u.data());
            norm_backward(dx, module_norm_grad(l, which), d_u.data(), x, module_norm(l, which), s.in);
        } else {
            module_backward(u, dmod, dx);
        }
    }

    const T* norm_forward(NormActs& n, const T* x, Norm w) {
        layernorm_forward(n.out.data(), n.mean.data(), n.rstd.data(), x, w.w, w.b, N, cfg.C);
        return n.out.data();
    }
    void norm_backward(T* dx, Norm dw, const T* dout, const T* x, Norm w, const NormActs& n) {
        layernorm_backward(dx, dw.w, dw.b, dout, x, w.w, n.mean.data(), n.rstd.data(), N, cfg.C);
    }
    static void zero(std::vector<T>& v) { std::fill(v.begin(), v.end(), T(0)); }

    // ---- the two modules --------------------------------------------------------------------

    // Attention of block l: u (N,C) → f (N,C) = proj(attention(qkv(u))).
    void attention_module_forward(int l, const T* u, T* f) {
        BlockActs& a = blocks[l];
        const size_t C = cfg.C;
        matmul_forward(a.qkv.data(), u, p.qkvw + l * 3 * C * C, p.qkvb + l * 3 * C, N, (int)C, (int)(3 * C));
        attention_forward(a.heads.data(), a.att.data(), a.qkv.data(), B, Tn, (int)C, cfg.NH);
        matmul_forward(f, a.heads.data(), p.attprojw + l * C * C, p.attprojb + l * C, N, (int)C, (int)C);
    }

    // Given df (N,C), adds du (N,C) and the attention weights' gradients.
    void attention_module_backward(int l, const T* u, const T* df, T* du) {
        BlockActs& a = blocks[l];
        const size_t C = cfg.C;
        zero(d_heads);
        matmul_backward(d_heads.data(), g.attprojw + l * C * C, g.attprojb + l * C, df, a.heads.data(),
                        p.attprojw + l * C * C, N, (int)C, (int)C);
        zero(d_qkv);
        attention_backward(d_qkv.data(), d_heads.data(), a.qkv.data(), a.att.data(), B, Tn, (int)C, cfg.NH);
        matmul_backward(du, g.qkvw + l * 3 * C * C, g.qkvb + l * 3 * C, d_qkv.data(), u, p.qkvw + l * 3 * C * C,
                        N, (int)C, (int)(3 * C));
    }

    // MLP of block l: u (N,C) → f (N,C) = fcproj(GELU(fc(u))).
    void mlp_module_forward(int l, const T* u, T* f) {
        BlockActs& a = blocks[l];
        const size_t C = cfg.C;
        matmul_forward(a.fc.data(), u, p.fcw + l * 4 * C * C, p.fcb + l * 4 * C, N, (int)C, (int)(4 * C));
        gelu_forward(a.gelu.data(), a.fc.data(), (size_t)N * 4 * C);
        matmul_forward(f, a.gelu.data(), p.fcprojw + l * 4 * C * C, p.fcprojb + l * C, N, (int)(4 * C), (int)C);
    }

    // Given df (N,C), adds du (N,C) and the MLP weights' gradients.
    void mlp_module_backward(int l, const T* u, const T* df, T* du) {
        BlockActs& a = blocks[l];
        const size_t C = cfg.C;
        zero(d_gelu);
        matmul_backward(d_gelu.data(), g.fcprojw + l * 4 * C * C, g.fcprojb + l * C, df, a.gelu.data(),
                        p.fcprojw + l * 4 * C * C, N, (int)(4 * C), (int)C);
        zero(d_fc);
        gelu_backward(d_fc.data(), d_gelu.data(), a.fc.data(), (size_t)N * 4 * C);
        matmul_backward(du, g.fcw + l * 4 * C * C, g.fcb + l * 4 * C, d_fc.data(), u, p.fcw + l * 4 * C * C, N,
                        (int)C, (int)(4 * C));
    }
};

// The CPU reference as a Backend for ./train and ./eval: CpuModel<float> plus AdamW moments.
class CpuBackend : public Backend {
public:
    CpuBackend(const ModelConfig& cfg, int B, int T)
        : model(cfg, B, T), m(model.params.size()), v(model.params.size()) {}

    std::string name() const override {
        return "cpu (fp32, " + std::to_string(omp_get_max_threads()) + " threads)";
    }
    const ModelConfig& config() const override { return model.cfg; }
    int batch_size() const override { return model.B; }
    int seq_len() const override { return model.Tn; }

    float forward(const int32_t* inputs, const int32_t* targets) override { return model.forward(inputs, targets); }
    void zero_grad() override { std::fill(model.grads.begin(), model.grads.end(), 0.0f); }
    void backward(float loss_weight) override { model.backward(loss_weight); }
    double grad_norm() override { return std::sqrt(sum_of_squares(model.grads.data(), model.grads.size())); }

    void update(const AdamWHyper& h, int t, double grad_scale) override {
        const auto sizes = param_sizes(model.cfg);
        const auto offsets = param_offsets(model.cfg);
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
            AdamWHyper hi = h;
            if (!param_decays(i)) hi.weight_decay = 0;
            const size_t o = offsets[i];
            adamw_update(model.params.data() + o, model.grads.data() + o, m.data() + o, v.data() + o, sizes[i], hi,
                         t, grad_scale);
        }
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

    std::vector<StreamStats> stream_stats() override {
        std::vector<StreamStats> out;
        for (int j = 0; j <= 2 * model.cfg.L; j++)
            out.push_back(stream_statistics(model.half_stream(j), model.N, model.cfg.C));
        return out;
    }
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
    std::vector<float> m, v;  // AdamW moments, file order
};

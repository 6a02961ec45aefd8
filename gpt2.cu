// gpt2.cu — the CUDA backend: GPT-2 with Pre-, Post- or Peri-LN and residual step Δt on one
// GPU, forward, backward and AdamW, serving ./train and ./eval through the Backend interface.
//
// CudaModel<T> follows CpuModel<T> (gpt2_cpu.h) function for function: the same block, written
// once for the three placements with NormPlan, the same residual step, the same two modules, the
// same order of gradient accumulation. Only the ops differ: here they are the kernels of the
// .cuh files (namespace gpu) and cuBLAS.
//
// T is the element type of the weights the passes read and of every activation:
//   bf16 (the default): bf16 weights and activations; fp32 master weights, gradients of the
//                       parameters and AdamW moments; AdamW refreshes the bf16 weights;
//   float:              everything fp32, matrix products included (no TF32).
// LayerNorm statistics, softmax and loss sums, norms and weight-gradient reductions are fp32
// in both modes.
//
// Device memory, allocated once for micro-batches of shape (B, T), N = B·T:
//   params, grads, m, v     fp32, num_parameters floats each, in checkpoint order (model.h)
//   weights                 bf16 mode only: the bf16 copy of params
//   per block               the activations CpuModel keeps (T), LayerNorm mean/rstd (fp32)
//   shared by all blocks    gradients of activations, attention scratch, reduction scratch
// Everything runs in order on one CUDA stream; the host waits only for the loss, the norms and
// the statistics it returns.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "adamw.cuh"
#include "attention.cuh"
#include "backend.h"
#include "block_norms.h"
#include "cuda_common.cuh"
#include "diagnostics.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"
#include "loss.cuh"
#include "matmul.cuh"
#include "model.h"
#include "stats.cuh"

template <typename T>
class CudaModel {
public:
    // The weights of one LayerNorm as forward and backward read them, and their gradients.
    struct Norm {
        const T *w, *b;
    };
    using NormGrad = NormWeights<float>;
    // Saved values of one LayerNorm application over N rows: its output and statistics.
    struct NormActs {
        DeviceArray<T> out;            // (N,C)
        DeviceArray<float> mean, rstd; // (N)
    };
    // Saved values of one residual step x → x' (see NormPlan).
    struct StepActs {
        NormActs in, out, after;     // allocated only when the placement uses them
        DeviceArray<T> module_out;   // F(u) before any output LN (N,C)
        DeviceArray<T> sum;          // x + Δt·f (N,C)
    };
    // Saved values of one block.
    struct BlockActs {
        StepActs attn_step, mlp_step;
        DeviceArray<T> qkv;    // (N,3C)
        DeviceArray<T> att;    // attention probabilities (B,NH,T,T)
        DeviceArray<T> heads;  // attention output before its projection (N,C)
        DeviceArray<T> fc;     // (N,4C) before GELU
        DeviceArray<T> gelu;   // (N,4C)
    };

    ModelConfig cfg;
    int B, Tn, N;
    cudaStream_t cuda_stream = nullptr;
    cublasHandle_t cublas = nullptr;
    DeviceArray<float> params, grads;  // fp32 master weights and their gradients, file order
    ParamTensors<T> p;                 // named views of the weights forward and backward read
    ParamTensors<float> g;             // named views of grads

    // When true, backward stores ‖∂loss/∂X‖ at the 2L + 1 half_stream points in stream_grad_norm.
    bool record_stream_grads = false;
    std::vector<double> stream_grad_norm;

    CudaModel(const ModelConfig& config, int batch, int seq_len)
        : cfg(config), B(batch), Tn(seq_len), N(batch * seq_len), params(num_parameters(config)),
          grads(params.size()), attention_scratch(batch, seq_len, config.C, config.NH), buckets(batch * seq_len) {
        cudaCheck(cudaStreamCreate(&cuda_stream));
        cublasCheck(cublasCreate(&cublas));
        cublasCheck(cublasSetStream(cublas, cuda_stream));
        cublasCheck(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH));  // fp32 products stay fp32
        if (!std::is_same<T, float>::value) weights = DeviceArray<T>(params.size());
        p = param_tensors(weight_storage(), cfg);
        g = param_tensors(grads.data(), cfg);
        cudaCheck(cudaMemsetAsync(params.data(), 0, params.size() * sizeof(float), cuda_stream));
        cudaCheck(cudaMemsetAsync(grads.data(), 0, grads.size() * sizeof(float), cuda_stream));
        sync_weights();

        const size_t C = cfg.C, NC = (size_t)N * C;
        const NormPlan plan = norm_plan(cfg.placement);
        auto alloc_step = [&](StepActs& s) {
            if (plan.input) alloc_norm(s.in);
            if (plan.output) alloc_norm(s.out);
            if (plan.after_add) alloc_norm(s.after);
            s.module_out = DeviceArray<T>(NC);
            s.sum = DeviceArray<T>(NC);
        };
        blocks.resize(cfg.L);
        for (BlockActs& a : blocks) {
            alloc_step(a.attn_step);
            alloc_step(a.mlp_step);
            a.qkv = DeviceArray<T>(3 * NC);
            a.att = DeviceArray<T>((size_t)B * cfg.NH * Tn * Tn);
            a.heads = DeviceArray<T>(NC);
            a.fc = DeviceArray<T>(4 * NC);
            a.gelu = DeviceArray<T>(4 * NC);
        }
        embedded = DeviceArray<T>(NC);
        alloc_norm(final_norm);
        logits = DeviceArray<T>((size_t)N * cfg.Vp);
        losses = DeviceArray<float>(N);
        lse = DeviceArray<float>(N);
        tokens = DeviceArray<int32_t>(N);
        targets = DeviceArray<int32_t>(N);
        for (DeviceArray<T>* v : {&d_stream, &d_stream_next, &d_h, &d_sum, &d_f, &d_mod, &d_u, &d_heads})
            *v = DeviceArray<T>(NC);
        d_qkv = DeviceArray<T>(3 * NC);
        d_fc = DeviceArray<T>(4 * NC);
        d_gelu = DeviceArray<T>(4 * NC);
        partial = DeviceArray<float>((size_t)MAX_ROW_CHUNKS * 4 * C);
        norm_partial = DeviceArray<float>(gpu::SUMSQ_MAX_BLOCKS);
        cudaCheck(cudaStreamSynchronize(cuda_stream));
    }

    ~CudaModel() {
        cublasDestroy(cublas);
        cudaStreamDestroy(cuda_stream);
    }
    CudaModel(const CudaModel&) = delete;
    CudaModel& operator=(const CudaModel&) = delete;

    // After params changed: the bf16 weights become their rounded copy (nothing to do in fp32).
    void sync_weights() {
        if (!std::is_same<T, float>::value) convert(weights.data(), params.data(), params.size(), cuda_stream);
    }

    // In bf16 mode the bf16 weights at file offset o, which AdamW refreshes; else null.
    T* weight_copy(size_t o) { return std::is_same<T, float>::value ? nullptr : weights.data() + o; }

    // Residual stream X_i (N,C) of the last forward: i = 0 after the embedding, i = l after block l.
    const T* stream(int i) const { return i == 0 ? embedded.data() : block_output(blocks[i - 1]); }

    // The residual stream at half-block resolution, j = 0 .. 2L: j = 2l + 1 after block l's
    // attention step, j = 2l + 2 after its MLP step.
    const T* half_stream(int j) const {
        if (j == 0) return embedded.data();
        const BlockActs& a = blocks[(j - 1) / 2];
        return step_output(j % 2 ? a.attn_step : a.mlp_step, norm_plan(cfg.placement).after_add);
    }

    // Saved values of block l and the logits (N,Vp) of the last forward, as in CpuModel (read by
    // the diagnostics; backward overwrites the logits).
    const BlockActs& block_activations(int l) const { return blocks[l]; }
    const T* logits_data() const { return logits.data(); }

    // Forward pass: tokens, targets (B·T, host memory). Returns the mean cross-entropy.
    float forward(const int32_t* host_tokens, const int32_t* host_targets) {
        const int C = cfg.C;
        tokens.upload(host_tokens, cuda_stream);
        targets.upload(host_targets, cuda_stream);
        buckets.build(host_tokens, N, cuda_stream);
        gpu::encoder_forward(embedded.data(), tokens.data(), p.wte, p.wpe, B, Tn, C, cuda_stream);
        for (int l = 0; l < cfg.L; l++) block_forward(l, stream(l));
        gpu::layernorm_forward(final_norm.out.data(), final_norm.mean.data(), final_norm.rstd.data(), stream(cfg.L),
                               p.lnfw, p.lnfb, N, C, cuda_stream);
        gpu::matmul_forward(cublas, logits.data(), final_norm.out.data(), p.wte, (const T*)nullptr, N, C, cfg.Vp,
                            cuda_stream);
        gpu::crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, cfg.V, cfg.Vp,
                                  cuda_stream);
        std::vector<float> host_losses(N);
        losses.download(host_losses.data(), cuda_stream);
        double total = 0;
        for (float l : host_losses) total += l;
        return (float)(total / N);
    }

    // Backward pass of the last forward: grads += loss_weight · d(mean loss)/d(params).
    // Consumes the logits (they become their gradient).
    void backward(float loss_weight) {
        const int C = cfg.C;
        gpu::crossentropy_backward_inplace(logits.data(), lse.data(), targets.data(), loss_weight / N, N, cfg.V, cfg.Vp,
                                           cuda_stream);
        zero(d_u);
        gpu::matmul_backward(cublas, d_u.data(), g.wte, (float*)nullptr, logits.data(), final_norm.out.data(), p.wte, N,
                             C, cfg.Vp, partial.data(), cuda_stream);
        zero(d_stream);
        gpu::layernorm_backward(d_stream.data(), g.lnfw, g.lnfb, d_u.data(), stream(cfg.L), p.lnfw,
                                final_norm.mean.data(), final_norm.rstd.data(), N, C, partial.data(), cuda_stream);
        if (record_stream_grads) stream_grad_norm.assign(2 * cfg.L + 1, 0.0);
        for (int l = cfg.L - 1; l >= 0; l--) {
            if (record_stream_grads) stream_grad_norm[2 * l + 2] = norm_of(d_stream);
            zero(d_stream_next);
            block_backward(l, stream(l), d_stream.data(), d_stream_next.data());
            if (record_stream_grads) stream_grad_norm[2 * l + 1] = norm_of(d_h);
            d_stream.swap(d_stream_next);
        }
        if (record_stream_grads) stream_grad_norm[0] = norm_of(d_stream);
        gpu::encoder_backward(g.wte, g.wpe, d_stream.data(), buckets, B, Tn, C, cuda_stream);
    }

    // Global L2 norm of all parameter gradients.
    double grad_norm() {
        return std::sqrt(gpu::sum_of_squares(grads.data(), grads.size(), norm_partial.data(), cuda_stream));
    }

private:
    DeviceArray<T> weights;  // bf16 mode: the bf16 copy of params; empty in fp32 mode
    std::vector<BlockActs> blocks;
    DeviceArray<T> embedded;      // X_0 (N,C)
    NormActs final_norm;          // LNf
    DeviceArray<T> logits;        // (N,Vp), gradient after backward
    DeviceArray<float> losses;    // (N)
    DeviceArray<float> lse;       // (N) log Σ exp(logits), for the loss backward
    DeviceArray<int32_t> tokens, targets;
    // Gradient scratch, reused by every block (all (N,C) unless noted).
    DeviceArray<T> d_stream, d_stream_next, d_h, d_sum, d_f, d_mod, d_u, d_heads;
    DeviceArray<T> d_qkv;         // (N,3C)
    DeviceArray<T> d_fc, d_gelu;  // (N,4C)
    gpu::AttentionScratch<T> attention_scratch;
    gpu::TokenBuckets buckets;    // this batch's positions grouped by token, for the wte gradient
    DeviceArray<float> partial;   // column-sum partials, MAX_ROW_CHUNKS·4C
    DeviceArray<float> norm_partial;  // sum-of-squares partials

    T* weight_storage() {
        if constexpr (std::is_same<T, float>::value) return params.data();
        else return weights.data();
    }

    void alloc_norm(NormActs& n) {
        n.out = DeviceArray<T>((size_t)N * cfg.C);
        n.mean = DeviceArray<float>(N);
        n.rstd = DeviceArray<float>(N);
    }

    static const T* step_output(const StepActs& s, bool after_add) {
        return after_add ? s.after.out.data() : s.sum.data();
    }
    const T* block_output(const BlockActs& a) const {
        return step_output(a.mlp_step, norm_plan(cfg.placement).after_add);
    }

    // LayerNorm weights of block l and their gradients: which = 0 for ln1 / ln1o, 1 for ln2 / ln2o.
    Norm module_norm(int l, int which) const { return read_only(block_norm(p, l, cfg.C, which, false)); }
    Norm output_norm(int l, int which) const { return read_only(block_norm(p, l, cfg.C, which, true)); }
    NormGrad module_norm_grad(int l, int which) const { return block_norm(g, l, cfg.C, which, false); }
    NormGrad output_norm_grad(int l, int which) const { return block_norm(g, l, cfg.C, which, true); }
    static Norm read_only(NormWeights<T> n) { return {n.w, n.b}; }

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
        const T* u = x;
        if (plan.input) u = norm_forward(s.in, x, in_norm);
        module(u, s.module_out.data());
        const T* f = s.module_out.data();
        if (plan.output) f = norm_forward(s.out, f, out_norm);
        gpu::residual_forward(s.sum.data(), x, f, cfg.dt, (size_t)N * cfg.C, cuda_stream);
        if (plan.after_add) return norm_forward(s.after, s.sum.data(), in_norm);
        return s.sum.data();
    }

    // One residual step backward: given dx' (N,C), adds dx (N,C). `which` picks ln1 or ln2.
    template <typename ModuleBackward>
    void residual_step_backward(StepActs& s, const T* x, const T* dxout, T* dx, int l, int which,
                                ModuleBackward module_backward) {
        const NormPlan plan = norm_plan(cfg.placement);
        const T* ds = dxout;
        if (plan.after_add) {
            zero(d_sum);
            norm_backward(d_sum.data(), module_norm_grad(l, which), dxout, s.sum.data(), module_norm(l, which),
                          s.after);
            ds = d_sum.data();
        }
        zero(d_f);
        gpu::residual_backward(dx, d_f.data(), ds, cfg.dt, (size_t)N * cfg.C, cuda_stream);
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
        gpu::layernorm_forward(n.out.data(), n.mean.data(), n.rstd.data(), x, w.w, w.b, N, cfg.C, cuda_stream);
        return n.out.data();
    }
    void norm_backward(T* dx, NormGrad dw, const T* dout, const T* x, Norm w, const NormActs& n) {
        gpu::layernorm_backward(dx, dw.w, dw.b, dout, x, w.w, n.mean.data(), n.rstd.data(), N, cfg.C, partial.data(),
                                cuda_stream);
    }
    void zero(DeviceArray<T>& a) { cudaCheck(cudaMemsetAsync(a.data(), 0, a.size() * sizeof(T), cuda_stream)); }
    double norm_of(const DeviceArray<T>& a) {
        return std::sqrt(gpu::sum_of_squares(a.data(), a.size(), norm_partial.data(), cuda_stream));
    }

    // ---- the two modules --------------------------------------------------------------------

    // Attention of block l: u (N,C) → f (N,C) = proj(attention(qkv(u))).
    void attention_module_forward(int l, const T* u, T* f) {
        BlockActs& a = blocks[l];
        const size_t C = cfg.C;
        gpu::matmul_forward(cublas, a.qkv.data(), u, p.qkvw + l * 3 * C * C, p.qkvb + l * 3 * C, N, (int)C,
                            (int)(3 * C), cuda_stream);
        gpu::attention_forward(cublas, a.heads.data(), a.att.data(), a.qkv.data(), attention_scratch, B, Tn, (int)C,
                               cfg.NH, cuda_stream);
        gpu::matmul_forward(cublas, f, a.heads.data(), p.attprojw + l * C * C, p.attprojb + l * C, N, (int)C, (int)C,
                            cuda_stream);
    }

    // Given df (N,C), adds du (N,C) and the attention weights' gradients.
    void attention_module_backward(int l, const T* u, const T* df, T* du) {
        BlockActs& a = blocks[l];
        const size_t C = cfg.C;
        zero(d_heads);
        gpu::matmul_backward(cublas, d_heads.data(), g.attprojw + l * C * C, g.attprojb + l * C, df, a.heads.data(),
                             p.attprojw + l * C * C, N, (int)C, (int)C, partial.data(), cuda_stream);
        zero(d_qkv);
        gpu::attention_backward(cublas, d_qkv.data(), d_heads.data(), a.qkv.data(), a.att.data(), attention_scratch, B,
                                Tn, (int)C, cfg.NH, cuda_stream);
        gpu::matmul_backward(cublas, du, g.qkvw + l * 3 * C * C, g.qkvb + l * 3 * C, d_qkv.data(), u,
                             p.qkvw + l * 3 * C * C, N, (int)C, (int)(3 * C), partial.data(), cuda_stream);
    }

    // MLP of block l: u (N,C) → f (N,C) = fcproj(GELU(fc(u))).
    void mlp_module_forward(int l, const T* u, T* f) {
        BlockActs& a = blocks[l];
        const size_t C = cfg.C;
        gpu::matmul_forward(cublas, a.fc.data(), u, p.fcw + l * 4 * C * C, p.fcb + l * 4 * C, N, (int)C, (int)(4 * C),
                            cuda_stream);
        gpu::gelu_forward(a.gelu.data(), a.fc.data(), (size_t)N * 4 * C, cuda_stream);
        gpu::matmul_forward(cublas, f, a.gelu.data(), p.fcprojw + l * 4 * C * C, p.fcprojb + l * C, N, (int)(4 * C),
                            (int)C, cuda_stream);
    }

    // Given df (N,C), adds du (N,C) and the MLP weights' gradients.
    void mlp_module_backward(int l, const T* u, const T* df, T* du) {
        BlockActs& a = blocks[l];
        const size_t C = cfg.C;
        zero(d_gelu);
        gpu::matmul_backward(cublas, d_gelu.data(), g.fcprojw + l * 4 * C * C, g.fcprojb + l * C, df, a.gelu.data(),
                             p.fcprojw + l * 4 * C * C, N, (int)(4 * C), (int)C, partial.data(), cuda_stream);
        zero(d_fc);
        gpu::gelu_backward(d_fc.data(), d_gelu.data(), a.fc.data(), (size_t)N * 4 * C, cuda_stream);
        gpu::matmul_backward(cublas, du, g.fcw + l * 4 * C * C, g.fcb + l * 4 * C, d_fc.data(), u,
                             p.fcw + l * 4 * C * C, N, (int)C, (int)(4 * C), partial.data(), cuda_stream);
    }
};

// The model on the GPU as a Backend for ./train and ./eval: CudaModel<T> plus AdamW moments.
template <typename T>
class CudaBackend : public Backend {
public:
    CudaBackend(const ModelConfig& cfg, int B, int T_, const std::string& device)
        : model(cfg, B, T_), m(model.params.size()), v(model.params.size()), device(device),
          stats_scratch(gpu::stream_statistics_scratch(B * T_, cfg.C)),
          diag_scratch(std::max<size_t>(gpu::diagnostics_scratch(B, T_, cfg.NH), gpu::SUMSQ_MAX_BLOCKS)) {
        cudaCheck(cudaMemsetAsync(m.data(), 0, m.size() * sizeof(float), model.cuda_stream));
        cudaCheck(cudaMemsetAsync(v.data(), 0, v.size() * sizeof(float), model.cuda_stream));
        cudaCheck(cudaStreamSynchronize(model.cuda_stream));
    }

    std::string name() const override {
        const char* precision = std::is_same<T, float>::value ? "fp32" : "bf16, fp32 master weights";
        return std::string("cuda (") + precision + ", " + device + ")";
    }
    const ModelConfig& config() const override { return model.cfg; }
    int batch_size() const override { return model.B; }
    int seq_len() const override { return model.Tn; }

    float forward(const int32_t* inputs, const int32_t* targets) override { return model.forward(inputs, targets); }
    void zero_grad() override {
        cudaCheck(cudaMemsetAsync(model.grads.data(), 0, model.grads.size() * sizeof(float), model.cuda_stream));
    }
    void backward(float loss_weight) override { model.backward(loss_weight); }
    double grad_norm() override { return model.grad_norm(); }

    void update(const AdamWHyper& h, int t, double grad_scale) override {
        const auto sizes = param_sizes(model.cfg);
        const auto offsets = param_offsets(model.cfg);
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
            AdamWHyper hi = h;
            if (!param_decays(i)) hi.weight_decay = 0;
            const size_t o = offsets[i];
            gpu::adamw_update(model.params.data() + o, model.weight_copy(o), model.grads.data() + o, m.data() + o,
                              v.data() + o, sizes[i], hi, t, grad_scale, model.cuda_stream);
        }
    }

    void get_params(float* out) override { model.params.download(out, model.cuda_stream); }
    void set_params(const float* in) override {
        model.params.upload(in, model.cuda_stream);
        model.sync_weights();
    }
    void get_moments(float* m_out, float* v_out) override {
        m.download(m_out, model.cuda_stream);
        v.download(v_out, model.cuda_stream);
    }
    void set_moments(const float* m_in, const float* v_in) override {
        m.upload(m_in, model.cuda_stream);
        v.upload(v_in, model.cuda_stream);
    }

    std::vector<StreamStats> stream_stats() override {
        std::vector<StreamStats> out;
        for (int j = 0; j <= 2 * model.cfg.L; j++)
            out.push_back(gpu::stream_statistics(model.half_stream(j), model.N, model.cfg.C, stats_scratch.data(),
                                                 model.cuda_stream));
        return out;
    }
    void record_stream_grads(bool on) override { model.record_stream_grads = on; }
    std::vector<double> stream_grad_norms() override { return model.stream_grad_norm; }
    std::vector<double> stream_rms() override {
        std::vector<double> out;
        for (int j = 0; j <= 2 * model.cfg.L; j++) out.push_back(rms(model.half_stream(j), (size_t)model.N * model.cfg.C));
        return out;
    }
    std::vector<double> mlp_hidden_rms() override {
        std::vector<double> out;
        for (int l = 0; l < model.cfg.L; l++) {
            const DeviceArray<T>& gelu = model.block_activations(l).gelu;
            out.push_back(rms(gelu.data(), gelu.size()));
        }
        return out;
    }
    std::vector<double> block_param_norms() override {
        return diag::block_norms_by(model.cfg, [&](size_t offset, size_t n) { return sum_sq(model.params.data() + offset, n); });
    }
    std::vector<double> fcproj_grad_norms() override {
        const size_t size = (size_t)4 * model.cfg.C * model.cfg.C;
        std::vector<double> out;
        for (int l = 0; l < model.cfg.L; l++) out.push_back(std::sqrt(sum_sq(model.g.fcprojw + l * size, size)));
        return out;
    }
    std::vector<double> attn_logit_max() override {
        std::vector<double> out;
        for (int l = 0; l < model.cfg.L; l++)
            out.push_back(gpu::attention_logit_max(model.block_activations(l).qkv.data(), model.B, model.Tn,
                                                   model.cfg.C, model.cfg.NH, diag_scratch.data(), model.cuda_stream));
        return out;
    }
    LogitStats logit_stats() override {
        return gpu::logit_statistics(model.logits_data(), model.N, model.cfg.V, model.cfg.Vp, diag_scratch.data(),
                                     model.cuda_stream);
    }

    // The parameter gradients (num_parameters floats, file order); for the tests.
    void get_grads(float* out) { model.grads.download(out, model.cuda_stream); }

    CudaModel<T> model;

private:
    DeviceArray<float> m, v;  // AdamW moments, file order
    std::string device;       // the GPU's description
    DeviceArray<float> stats_scratch;
    DeviceArray<float> diag_scratch;  // the diagnostics: sums of squares, per-row maxima

    // Σ x² and sqrt(mean x²) of n device elements.
    template <typename E>
    double sum_sq(const E* x, size_t n) {
        return gpu::sum_of_squares(x, n, diag_scratch.data(), model.cuda_stream);
    }
    template <typename E>
    double rms(const E* x, size_t n) {
        return std::sqrt(sum_sq(x, n) / n);
    }
};

bool cuda_device_available(std::string* description) {
    int count = 0;  // without a driver the call fails and leaves count alone
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count <= 0) {
        cudaGetLastError();  // clear the error for later calls
        if (description) *description = err != cudaSuccess ? cudaGetErrorString(err) : "0 devices";
        return false;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        cudaGetLastError();
        if (description) *description = "CUDA device 0 unreadable";
        return false;
    }
    const std::string arch = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
    if (description) {
        *description = std::string(prop.name) + " (" + arch + ", " +
                       std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
        if (prop.major < 8) *description += ": bf16 tensor cores need sm_80 or newer";
    }
    return prop.major >= 8;
}

std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& cfg, int B, int T, bool use_bf16) {
    std::string device;
    if (!cuda_device_available(&device)) throw InputError("-device cuda: " + device);
    if (B <= 0 || T <= 0 || T > cfg.maxT)
        throw InputError("cuda backend: need B >= 1 and 1 <= T <= maxT = " + std::to_string(cfg.maxT));
    cudaCheck(cudaSetDevice(0));
    if (use_bf16) return std::make_unique<CudaBackend<bf16>>(cfg, B, T, device);
    return std::make_unique<CudaBackend<float>>(cfg, B, T, device);
}

// gpt2.h — the model, written once for both backends: GPT-2 with Pre-, Post- or Peri-LN and
// residual step Δt (docs/model.md §1), its activations, forward and backward passes and the
// residual steps of its blocks. docs/block.md walks through it line by line.
//
// Gpt2<Ops> runs on whatever the ops object `Ops` provides; every op has the same name and
// arguments in each set:
//   * the CPU ops (gpt2_cpu.h): the textbook reference of cpu_ops.h (CpuModel<double> for the
//     gradient checks, ./train -cpu_ops reference) or the fast ops of cpu_fast_ops.h
//     (CpuModel<float>, for training);
//   * the CUDA ops (cuda_ops.cuh): each launches the kernels of its .cuh file or calls cuBLAS; the
//     ops object holds the cuBLAS handles, the stream and the scratch memory the kernels need.
// The model calls one op per equation of docs/block.md, except for two pairs of adjacent
// equations it calls as one op, which the CUDA ops run as one kernel (docs/cuda.md §3) and the
// CPU ops as the two ops in turn: residual_layernorm_forward, the residual add s = x + Δt·f and
// the LayerNorm that reads s next, and layernorm_backward_residual, a LayerNorm backward that
// finishes ds and the step's df = Δt·ds. Every op runs when the model calls it.
// Ops also names the types that differ between backends, and nothing else:
//   Act       activations and the weights the passes read (CPU: Real, the op set's float or
//             double; CUDA: float or bf16);
//   Acc       master weights, their gradients, LayerNorm statistics and losses (CPU: Real;
//             CUDA: fp32);
//   Array<U>  an owning buffer of U (std::vector on the CPU, DeviceArray on the GPU).
// Two more are Acc in every backend, so the model does not ask the ops for them:
//   Stream    the residual stream X, the residual sums, the after-add LayerNorm's output and
//             the stream's gradients (fp32 on CUDA in both precisions, docs/cuda.md §2);
//   att       what attention keeps for its backward (BlockActs::att), attention_saved_size(B, T,
//             NH) values (CPU: the probabilities (B,NH,T,T); CUDA: the log-sum-exp per row
//             (B,NH,T)).
//
// All buffers are allocated once, for micro-batches of shape (B, T); N = B·T positions. Before
// each group of allocations the model tells the ops its MemoryCategory (util/memory_plan.h), so the
// CUDA ops can count the bytes of each category (./bench_gpu -plan) as well as allocate them.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backend.h"
#include "util/memory_plan.h"
#include "model.h"

// No interface: Gpt2<Ops> is the model alone (the gradient checks' CpuModel<double>, the sampler's).
struct NoInterface {};

// Interface = Backend (backend.h) makes the model a backend's base: its passes and diagnostics
// below are the ones Backend declares, so ./train's model.backward(...) is Gpt2::backward
// (CpuBackend, CudaBackend add AdamW, the copies and the collectives).
template <class Ops, class Interface = NoInterface>
class Gpt2 : public Interface {
public:
    using Act = typename Ops::Act;
    using Acc = typename Ops::Acc;
    template <class U>
    using Array = typename Ops::template Array<U>;
    using Stream = Acc;
    // True when the stream is kept in another type than the activations (CUDA bf16).
    static constexpr bool separate_stream = !std::is_same<Act, Stream>::value;

    // What one LayerNorm over the N rows keeps for its backward: its output, of type E, and
    // its statistics.
    template <class E>
    struct NormActs {
        Array<E> out;           // (N,C)
        Array<Acc> mean, rstd;  // (N)
    };
    // What one residual step x → x' keeps (docs/block.md §1), in the order of its lines; only
    // the LayerNorms its placement uses are allocated.
    struct StepActs {
        NormActs<Act> in;        // u = LN_in(x)                                          (N,C)
        Array<Act> module_in;    // u = x rounded to Act, when there is no LN_in and the
                                 // stream has its own type                               (N,C)
        Array<Act> module_out;   // F = module(u)                                         (N,C)
        NormActs<Act> out;       // f = LN_out(F)                                         (N,C)
        Array<Stream> sum;       // s = x + Δt·f                                          (N,C)
        NormActs<Stream> after;  // x' = LN_after(s)                                      (N,C)
    };
    // What one block keeps: its two steps, and inside their modules
    struct BlockActs {
        StepActs attn_step, mlp_step;
        Array<Act> qkv;          // u·Wqkvᵀ + bqkv = [q | k | v]                           (N,3C)
        Array<Acc> att;          // what attention keeps for its backward (see above)
        Array<Act> heads;        // the heads' outputs, before the projection             (N,C)
        Array<Act> fc;           // u·Wfcᵀ + bfc, before GELU                             (N,4C)
        Array<Act> gelu;         // GELU(fc)                                              (N,4C)
        const StepActs& step(Half half) const { return half == Half::Attention ? attn_step : mlp_step; }
        StepActs& step(Half half) { return half == Half::Attention ? attn_step : mlp_step; }
    };

    // A LayerNorm that reads the stream, a step's LN_in or LNf: what it keeps, and its gain and
    // bias (step_forward runs it with the add before it).
    struct StreamNorm {
        NormActs<Act>* norm = nullptr;
        NormWeights<Act> w{};
    };

    Ops ops;  // declared first: built before, and destroyed after, every buffer it allocates
    ModelConfig cfg;
    NormPlan plan;             // the placement's LayerNorms of each step
    int B, T, N;               // micro-batch, sequence length, positions N = B·T
    Array<Acc> params, grads;  // master weights and their gradients, flat, file order (model.h)
    ParamTensors<Act> p;       // named views of the weights the passes read
    ParamTensors<Acc> g;       // named views of grads

    Gpt2(const ModelConfig& config, int batch, int seq_len)
        : ops(config, batch, seq_len), cfg(config), plan(norm_plan(config.placement)), B(batch), T(seq_len),
          N(batch * seq_len), params(alloc<Acc>(MemoryCategory::Parameters, num_parameters(config))),
          grads(alloc<Acc>(MemoryCategory::Parameters, num_parameters(config))) {
        if constexpr (separate_weights) weights = alloc<Act>(MemoryCategory::Parameters, params.size());
        p = param_tensors(weight_storage(), cfg);
        g = param_tensors(grads.data(), cfg);
        const size_t NC = (size_t)N * cfg.C;
        const auto act = MemoryCategory::Activations;
        blocks.resize(cfg.L);
        for (BlockActs& a : blocks) {
            for (StepActs* s : {&a.attn_step, &a.mlp_step}) {
                if (plan.input) alloc_norm(s->in);
                if (separate_stream && !plan.input) s->module_in = alloc<Act>(act, NC);
                s->module_out = alloc<Act>(act, NC);
                if (plan.output) alloc_norm(s->out);
                s->sum = alloc<Stream>(act, NC);
                if (plan.after_add) alloc_norm(s->after);
            }
            a.qkv = alloc<Act>(act, 3 * NC);
            a.att = alloc<Acc>(MemoryCategory::AttentionState, Ops::attention_saved_size(B, T, cfg.NH));
            a.heads = alloc<Act>(act, NC);
            a.fc = alloc<Act>(act, 4 * NC);
            a.gelu = alloc<Act>(act, 4 * NC);
        }
        embedded = alloc<Stream>(act, NC);
        alloc_norm(final_norm);
        logits = alloc<Act>(MemoryCategory::Logits, (size_t)N * cfg.Vp);
        losses = alloc<Acc>(MemoryCategory::Logits, N);
        tokens = alloc<int32_t>(act, N);
        targets = alloc<int32_t>(act, N);
        const auto scratch = MemoryCategory::Scratch;
        d_stream = alloc<Stream>(scratch, NC);
        if (plan.after_add) d_sum = alloc<Stream>(scratch, NC);
        for (Array<Act>* v : {&d_f, &d_mod, &d_u, &d_heads}) *v = alloc<Act>(scratch, NC);
        d_qkv = alloc<Act>(scratch, 3 * NC);
        d_fc = alloc<Act>(scratch, 4 * NC);
        ops.finish();
    }

    // After params changed: the weights the passes read become their rounded copy (nothing to
    // do when they are params itself).
    void sync_weights() {
        if constexpr (separate_weights) ops.convert(weights.data(), params.data(), params.size());
    }
    // The rounded copy of the weights at file offset o, which an optimiser step refreshes along
    // with params; null when the passes read params itself.
    Act* weight_copy(size_t o) {
        if constexpr (separate_weights) return weights.data() + o;
        else return nullptr;
    }

    // ---- the whole model ----------------------------------------------------------------------

    // Forward pass up to the logits, as a training step runs it: tokens, targets (B·T, host
    // memory; the targets are kept for backward, which computes the loss together with its
    // gradient in one pass over the logits).
    //   X_0 = wte[token] + wpe[t];   X_{l+1} = block_l(X_l), its two residual steps, X_j at
    //   half-block point j (half_stream);   logits = LNf(X_L)·wteᵀ
    // Pre-/Peri-LN: the LayerNorm that reads X_j (the next step's LN_in, LNf after the last step)
    // runs in one op with the add that makes X_j (step_forward); only X_0's runs alone. Post-LN:
    // each step's LN_after runs with its add, and LNf reads X_L alone.
    void forward_to_logits(const int32_t* host_tokens, const int32_t* host_targets) {
        const int C = cfg.C;
        ops.load_batch(tokens, targets, host_tokens, host_targets);
        ops.encoder_forward(embedded.data(), tokens.data(), p.wte, p.wpe, B, T, C);
        if (plan.input) stream_norm_forward(stream_norm(0), embedded.data());  // u = LN_in(X_0) of the first step
        for (int j = 0; j < 2 * cfg.L; j++) step_forward(j / 2, Half(j % 2), half_stream(j), stream_norm(j + 1));
        if (plan.after_add) stream_norm_forward(stream_norm(2 * cfg.L), stream(cfg.L));  // LNf(X_L), Post-LN
        ops.matmul_forward(logits.data(), final_norm.out.data(), p.wte, (const Act*)nullptr, N, C, cfg.Vp);
    }

    // Forward pass with the loss (evaluation): forward_to_logits, then the per-position losses;
    // the logits are kept. Returns the mean cross-entropy, loss = CE(logits, target).
    double forward(const int32_t* host_tokens, const int32_t* host_targets) {
        forward_to_logits(host_tokens, host_targets);
        ops.crossentropy_forward(losses.data(), logits.data(), targets.data(), N, cfg.V, cfg.Vp);
        return ops.mean(losses);
    }

    void zero_grad() { ops.zero(grads); }

    // Backward pass of the last forward (either one): grads += loss_weight · d(mean loss)/d(params).
    // Its first op computes the per-position losses and, in the same pass over the logits, turns
    // the logits into their gradient (they are consumed); returns the mean loss. Each gradient
    // scratch buffer is written by the op that produces it first (GradOut::Write, or an op that
    // always stores, as attention's backward does d_qkv) and added into by the later ones, so
    // none is zeroed (docs/block.md §2).
    double backward(double loss_weight) {
        const int C = cfg.C;
        ops.crossentropy_forward_backward(losses.data(), logits.data(), targets.data(), (Acc)loss_weight / N, N,
                                          cfg.V, cfg.Vp);
        ops.matmul_backward(d_u.data(), g.wte, (Acc*)nullptr, logits.data(), final_norm.out.data(), p.wte, N, C,
                            cfg.Vp, GradOut::Write);
        // d_stream = ∂loss/∂X_L = LNf'(d_u); Pre-/Peri-LN: and the last step's d_f = Δt·d_stream, in one op
        const Acc *mean = final_norm.mean.data(), *rstd = final_norm.rstd.data();
        if (plan.after_add)
            ops.layernorm_backward(d_stream.data(), g.lnfw, g.lnfb, d_u.data(), stream(cfg.L), p.lnfw, mean, rstd, N,
                                   C, GradOut::Write);
        else
            ops.layernorm_backward_residual(d_stream.data(), d_f.data(), cfg.dt, g.lnfw, g.lnfb, d_u.data(),
                                            stream(cfg.L), p.lnfw, mean, rstd, N, C, GradOut::Write);
        if (recording_stream_grads) stream_grad_norm.assign(2 * cfg.L + 1, 0.0);
        for (int l = cfg.L - 1; l >= 0; l--) {
            record_stream_grad(2 * l + 2);
            step_backward(l, Half::Mlp, step_output(blocks[l].attn_step), true);
            record_stream_grad(2 * l + 1);
            step_backward(l, Half::Attention, stream(l), l > 0);
        }
        record_stream_grad(0);
        ops.encoder_backward(g.wte, g.wpe, d_stream.data(), tokens.data(), B, T, C);
        return ops.mean(losses);
    }

    // Global L2 norm of all parameter gradients.
    double grad_norm() { return ops.norm(grads); }

    // When on, backward stores ‖∂loss/∂X‖ at the 2L + 1 half_stream points (stream_grad_norms).
    void record_stream_grads(bool on) { recording_stream_grads = on; }
    std::vector<double> stream_grad_norms() const { return stream_grad_norm; }

    // ---- one residual step -------------------------------------------------------------------
    //
    //   Pre-LN:  h = x + Δt·Attn(LN1(x));            x' = h + Δt·MLP(LN2(h))
    //   Post-LN: h = LN1(x + Δt·Attn(x));            x' = LN2(h + Δt·MLP(h))
    //   Peri-LN: h = x + Δt·LN1o(Attn(LN1(x)));      x' = h + Δt·LN2o(MLP(LN2(h)))
    //
    // Each half of a block is one residual step around its module, with the LayerNorms NormPlan
    // switches on (docs/block.md §1):
    //
    //   u = LN_in(x)?    F = module(u)    f = LN_out(F)?    s = x + Δt·f    x' = LN_after(s)?

    // One residual step of block l forward on its input x (N,C); returns x' (N,C) and keeps what
    // backward needs in blocks[l].step(half). `next` is the LayerNorm that reads the step's sum
    // next where the step has no LN_after (the next step's LN_in, or LNf; none: nothing reads it
    // here): the step runs it in one op with the add (docs/block.md §1). So the step's own LN_in
    // has already run, with the add of the step before or on its own before the first step.
    const Stream* step_forward(int l, Half half, const Stream* x, const StreamNorm& next) {
        StepActs& a = blocks[l].step(half);
        const int C = cfg.C;
        if constexpr (separate_stream)  // u = x rounded to Act, where there is no LN_in (one (N,C) pass)
            if (!plan.input) ops.convert(a.module_in.data(), x, (size_t)N * C);
        const Act* u = plan.input ? a.in.out.data() : module_input(a, x);  // u = LN_in(x), done before; or x
        Act* F = a.module_out.data();
        BlockActs& m = blocks[l];  // what the module keeps
        const size_t Cs = C;  // the weights' offsets of block l are size_t
        if (half == Half::Attention) {  // F = proj(attention(qkv(u)))
            ops.matmul_forward(m.qkv.data(), u, p.qkvw + l * 3 * Cs * Cs, p.qkvb + l * 3 * Cs, N, C, 3 * C);
            ops.attention_forward(m.heads.data(), m.att.data(), m.qkv.data(), B, T, C, cfg.NH);
            ops.matmul_forward(F, m.heads.data(), p.attprojw + l * Cs * Cs, p.attprojb + l * Cs, N, C, C);
        } else {  // F = fcproj(GELU(fc(u)))
            ops.matmul_gelu_forward(m.gelu.data(), m.fc.data(), u, p.fcw + l * 4 * Cs * Cs, p.fcb + l * 4 * Cs, N, C,
                                    4 * C);
            ops.matmul_forward(F, m.gelu.data(), p.fcprojw + l * 4 * Cs * Cs, p.fcprojb + l * Cs, N, 4 * C, C);
        }
        const Act* f = F;
        if (plan.output) {  // f = LN_out(F)
            const NormWeights<Act> w = norm_weights(l, half, StepNorm::Output);
            ops.layernorm_forward(a.out.out.data(), a.out.mean.data(), a.out.rstd.data(), F, w.w, w.b, N, C);
            f = a.out.out.data();
        }
        Stream* s = a.sum.data();
        if (plan.after_add) {  // s = x + Δt·f and x' = LN_after(s), in one op
            const NormWeights<Act> w = norm_weights(l, half, StepNorm::AfterAdd);
            ops.residual_layernorm_forward(s, a.after.out.data(), a.after.mean.data(), a.after.rstd.data(), x, f,
                                           cfg.dt, w.w, w.b, N, C);
            return a.after.out.data();
        }
        if (next.norm)  // s = x + Δt·f and the LayerNorm that reads it next, in one op
            ops.residual_layernorm_forward(s, next.norm->out.data(), next.norm->mean.data(), next.norm->rstd.data(),
                                           x, f, cfg.dt, next.w.w, next.w.b, N, C);
        else
            ops.residual_forward(s, x, f, cfg.dt, (size_t)N * C);  // s = x + Δt·f
        return s;
    }

    // One residual step of block l backward, on the same input x (N,C) as its forward: d_stream
    // (N,C) holds dx' and becomes dx, in place. The forward's lines in reverse (docs/block.md §2):
    //   ds = LN_after'(dx')?   df = Δt·ds   dF = LN_out'(df)?   du = F'(dF)   dx = ds + LN_in'(du)?
    // df = Δt·ds is formed in one op with the LayerNorm backward that finishes ds: the step's
    // LN_after' (Post-LN), else the LN_in' of the step after or LNf', which left it in d_f before
    // this step; so where `step_before`, the step's own LN_in' also forms the d_f of the step
    // before it. The add's identity branch, dx = ds + ..., costs nothing: ds stays in d_stream
    // and the module's path adds into it.
    void step_backward(int l, Half half, const Stream* x, bool step_before) {
        const StepActs& a = blocks[l].step(half);
        const int C = cfg.C;
        if (plan.after_add) {  // ds = LN_after'(dx') into d_sum, which then becomes d_stream, and df = Δt·ds
            const NormWeights<Act> w = norm_weights(l, half, StepNorm::AfterAdd);
            const NormWeights<Acc> dw = norm_grads(l, half, StepNorm::AfterAdd);
            ops.layernorm_backward_residual(d_sum.data(), d_f.data(), cfg.dt, dw.w, dw.b, d_stream.data(),
                                            a.sum.data(), w.w, a.after.mean.data(), a.after.rstd.data(), N, C,
                                            GradOut::Write);
            d_stream.swap(d_sum);
        }
        const Act* dF = d_f.data();
        if (plan.output) {  // dF = LN_out'(df)
            const NormWeights<Act> w = norm_weights(l, half, StepNorm::Output);
            const NormWeights<Acc> dw = norm_grads(l, half, StepNorm::Output);
            ops.layernorm_backward(d_mod.data(), dw.w, dw.b, d_f.data(), a.module_out.data(), w.w, a.out.mean.data(),
                                   a.out.rstd.data(), N, C, GradOut::Write);
            dF = d_mod.data();
        }
        // du = F'(dF): the module's lines in reverse down to its first product (qkv or fc), with
        // the weights' gradients on the way; that product's backward, below, gives du.
        const BlockActs& m = blocks[l];  // what the module kept
        const size_t Cs = C;  // the weights' offsets of block l are size_t
        if (half == Half::Attention) {  // F = proj(attention(qkv(u)))
            ops.matmul_backward(d_heads.data(), g.attprojw + l * Cs * Cs, g.attprojb + l * Cs, dF, m.heads.data(),
                                p.attprojw + l * Cs * Cs, N, C, C, GradOut::Write);
            ops.attention_backward(d_qkv.data(), d_heads.data(), m.qkv.data(), m.heads.data(), m.att.data(), B, T, C,
                                   cfg.NH);
        } else {  // F = fcproj(GELU(fc(u))): fcproj's backward, its input gradient taken through GELU' to d_fc
            ops.matmul_gelu_backward(d_fc.data(), g.fcprojw + l * 4 * Cs * Cs, g.fcprojb + l * Cs, dF, m.gelu.data(),
                                     p.fcprojw + l * 4 * Cs * Cs, m.fc.data(), N, 4 * C, C);
        }
        const FirstProduct first = first_product(l, half);
        if (plan.input) {  // du into d_u, then dx = ds + LN_in'(du), and the step before's df = Δt·dx
            ops.matmul_backward(d_u.data(), first.dw, first.db, first.d_out, a.in.out.data(), first.w, N, C, first.OC,
                                GradOut::Write);
            const NormWeights<Act> w = norm_weights(l, half, StepNorm::Input);
            const NormWeights<Acc> dw = norm_grads(l, half, StepNorm::Input);
            const Acc *mean = a.in.mean.data(), *rstd = a.in.rstd.data();
            if (step_before)
                ops.layernorm_backward_residual(d_stream.data(), d_f.data(), cfg.dt, dw.w, dw.b, d_u.data(), x, w.w,
                                                mean, rstd, N, C, GradOut::Add);
            else
                ops.layernorm_backward(d_stream.data(), dw.w, dw.b, d_u.data(), x, w.w, mean, rstd, N, C,
                                       GradOut::Add);
        } else {  // u = x: du is the rest of dx, added straight into d_stream
            ops.matmul_backward(d_stream.data(), first.dw, first.db, first.d_out, module_input(a, x), first.w, N, C,
                                first.OC, GradOut::Add);
        }
    }

    // ---- the diagnostics (docs/experiments.md, *Diagnostics*) ---------------------------------
    // Reductions of the ops: stream_statistics (docs/statistics.md §1), sum_of_squares,
    // attention_logit_max and logit_statistics (diagnostics.h on the CPU, stats.cuh and
    // diagnostics.cuh on CUDA).

    // All of a `stats` record of the last forward (backend.h, ForwardStats).
    ForwardStats forward_stats() {
        const int C = cfg.C;
        const size_t NC = (size_t)N * C;
        ForwardStats f;
        for (int j = 0; j <= 2 * cfg.L; j++) {
            f.stream.push_back(ops.stream_statistics(half_stream(j), N, C));
            f.rms.push_back(rms(half_stream(j), NC));
        }
        for (const BlockActs& a : blocks) {
            f.attn_logit_max.push_back(ops.attention_logit_max(a.qkv.data(), B, T, C, cfg.NH));
            f.mlp_hidden_rms.push_back(rms(a.gelu.data(), a.gelu.size()));
        }
        f.param_norm.assign(cfg.L, 0.0);  // sqrt of the sum over the block's parts
        for (const BlockPart& part : block_param_parts(cfg))
            f.param_norm[part.block] += ops.sum_of_squares(params.data() + part.offset, part.size);
        for (double& norm : f.param_norm) norm = std::sqrt(norm);
        f.logits = ops.logit_statistics(logits.data(), N, cfg.V, cfg.Vp);
        return f;
    }

    // ‖∂loss/∂W_fcproj‖ of each block: the MLP's output projection weight (4C×C, bias excluded),
    // as accumulated since zero_grad.
    std::vector<double> fcproj_grad_norms() {
        const size_t size = (size_t)4 * cfg.C * cfg.C;
        std::vector<double> out;
        for (int l = 0; l < cfg.L; l++) out.push_back(std::sqrt(ops.sum_of_squares(g.fcprojw + l * size, size)));
        return out;
    }

    // ---- what the diagnostics read (measure/stability.h, ./eval) ------------------------------

    // Residual stream X_i (N,C) of the last forward: i = 0 after the embedding, i = l after block l.
    const Stream* stream(int i) const { return i == 0 ? embedded.data() : step_output(blocks[i - 1].mlp_step); }

    // The residual stream at half-block resolution, j = 0 .. 2L: j = 2l + 1 after block l's
    // attention step, j = 2l + 2 after its MLP step.
    const Stream* half_stream(int j) const {
        if (j == 0) return embedded.data();
        const BlockActs& a = blocks[(j - 1) / 2];
        return step_output(j % 2 ? a.attn_step : a.mlp_step);
    }
    // The input (N,C) that one half of block l saw in the last forward: X_l for the attention
    // step, the attention step's output for the MLP step.
    const Stream* step_input(int l, Half half) const {
        return half == Half::Attention ? stream(l) : half_stream(2 * l + 1);
    }
    // What block l kept in the last forward (the tangent pass of measure/stability.h reads it).
    const BlockActs& block_activations(int l) const { return blocks[l]; }
    // Logits (N,Vp) of the last forward (backward overwrites them with their gradient).
    const Act* logits_data() const { return logits.data(); }
    // Per-position losses (N) of the last forward (./eval's per-sequence perplexity).
    const Acc* losses_data() const { return losses.data(); }

    // Runs every block from X_0 = x0 (N,C) in place of the embedding; stream(i) then holds X_i,
    // and the blocks' saved activations are those of this run. The final LayerNorm, logits and
    // losses are left as they were.
    void run_blocks_from(const Stream* x0) {
        ops.copy(embedded.data(), x0, (size_t)N * cfg.C);
        if (plan.input) stream_norm_forward(stream_norm(0), embedded.data());
        for (int j = 0; j < 2 * cfg.L; j++)
            step_forward(j / 2, Half(j % 2), half_stream(j), j + 1 < 2 * cfg.L ? stream_norm(j + 1) : StreamNorm{});
    }

    // One residual step of block l alone on x (N,C), as the stability tests run it: its LN_in,
    // the step, its sum formed on its own. Returns x' (N,C), valid until the step runs again.
    const Stream* run_step(int l, Half half, const Stream* x) {
        if (plan.input) stream_norm_forward(stream_norm(2 * l + (int)half), x);
        return step_forward(l, half, x, StreamNorm{});
    }

private:
    static constexpr bool separate_weights = !std::is_same<Act, Acc>::value;

    bool recording_stream_grads = false;    // record_stream_grads
    std::vector<double> stream_grad_norm;  // ‖∂loss/∂X_j‖, j = 0 .. 2L, when recording

    Array<Act> weights;  // the rounded copy of params the passes read, when Act is not Acc
    std::vector<BlockActs> blocks;
    Array<Stream> embedded;          // X_0                                                   (N,C)
    NormActs<Act> final_norm;        // LNf(X_L)                                              (N,C)
    Array<Act> logits;               // LNf(X_L)·wteᵀ; their gradient after backward          (N,Vp)
    Array<Acc> losses;               // per position                                          (N)
    Array<int32_t> tokens, targets;  // this batch, where the ops read them                   (B·T)
    // Gradient scratch, reused by every block (all (N,C) unless noted): of the stream (d_stream
    // holds ∂loss/∂X at the point backward has reached, updated in place; d_sum, Post-LN only,
    // receives the after-add LayerNorm's input gradient and is then swapped in), and of the
    // activations: d_f = ∂loss/∂f, d_mod = ∂loss/∂F (Peri-LN), d_u = ∂loss/∂u, d_heads, d_qkv
    // (N,3C) and d_fc (N,4C) inside the modules.
    Array<Stream> d_stream, d_sum;
    Array<Act> d_f, d_mod, d_u, d_heads;
    Array<Act> d_qkv;
    Array<Act> d_fc;

    template <class U>
    Array<U> alloc(MemoryCategory category, size_t n) {
        ops.memory_category(category);
        return ops.template alloc<U>(n);
    }
    template <class E>
    void alloc_norm(NormActs<E>& n) {
        n.out = alloc<E>(MemoryCategory::Activations, (size_t)N * cfg.C);
        n.mean = alloc<Acc>(MemoryCategory::Activations, N);
        n.rstd = alloc<Acc>(MemoryCategory::Activations, N);
    }
    Act* weight_storage() {
        if constexpr (separate_weights) return weights.data();
        else return params.data();
    }

    // The output x' of a step of the last forward.
    const Stream* step_output(const StepActs& s) const { return plan.after_add ? s.after.out.data() : s.sum.data(); }

    // When recording, stores ‖d_stream‖ as the stream gradient at half-block point j.
    void record_stream_grad(int j) {
        if (recording_stream_grads) stream_grad_norm[j] = ops.norm(d_stream);
    }

    // The LayerNorm that reads X_j (half-block point j, half_stream) in Pre- and Peri-LN: the LN_in
    // of the step from X_j, or LNf for j = 2L.
    StreamNorm stream_norm(int j) {
        if (j == 2 * cfg.L) return {&final_norm, {p.lnfw, p.lnfb}};
        const Half half = Half(j % 2);
        return {&blocks[j / 2].step(half).in, norm_weights(j / 2, half, StepNorm::Input)};
    }
    // n = that LayerNorm of x (N,C), run alone.
    void stream_norm_forward(const StreamNorm& n, const Stream* x) {
        ops.layernorm_forward(n.norm->out.data(), n.norm->mean.data(), n.norm->rstd.data(), x, n.w.w, n.w.b, N, cfg.C);
    }

    // Gain and bias of LayerNorm `which` of one half of block l, and their gradients.
    NormWeights<Act> norm_weights(int l, Half half, StepNorm which) const {
        return step_norm(p, l, cfg.C, half, which);
    }
    NormWeights<Acc> norm_grads(int l, Half half, StepNorm which) const {
        return step_norm(g, l, cfg.C, half, which);
    }

    // sqrt(mean x²) over n elements of the model's memory, through the ops.
    template <class E>
    double rms(const E* x, size_t n) {
        return std::sqrt(ops.sum_of_squares(x, n) / (double)n);
    }

    // The input u the module of step s multiplied: x itself, or its rounded copy module_in.
    const Act* module_input(const StepActs& s, const Stream* x) const {
        if constexpr (separate_stream) return s.module_in.data();
        else return x;
    }

    // The first matrix product of block l's module in one half (qkv in attention, fc in the
    // MLP): its weights (OC,C), their gradients, its width OC and its output's gradient
    // (N,OC) as the module's backward leaves it (d_qkv, d_fc).
    struct FirstProduct {
        const Act* w;
        Acc *dw, *db;
        const Act* d_out;
        int OC;
    };
    FirstProduct first_product(int l, Half half) {
        const size_t C = cfg.C;
        if (half == Half::Attention)
            return {p.qkvw + l * 3 * C * C, g.qkvw + l * 3 * C * C, g.qkvb + l * 3 * C, d_qkv.data(), (int)(3 * C)};
        return {p.fcw + l * 4 * C * C, g.fcw + l * 4 * C * C, g.fcb + l * 4 * C, d_fc.data(), (int)(4 * C)};
    }
};

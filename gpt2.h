// gpt2.h — the model, written once for both backends: GPT-2 with Pre-, Post- or Peri-LN and
// residual step Δt (docs/model.md §1), its activations, forward and backward passes, the block
// with its two residual steps, and the attention and MLP modules. docs/block.md walks through it.
//
// Gpt2<Ops> runs on whatever the ops object `Ops` provides; every op has the same name and
// arguments in each set:
//   * the CPU ops (gpt2_cpu.h): the textbook reference of cpu_ops.h (CpuModel<double>, for the
//     gradient checks) or the fast ops of cpu_fast_ops.h (CpuModel<float>, for training);
//   * the CUDA ops (gpt2.cu): the kernels of the .cuh files and cuBLAS; the ops object holds
//     the cuBLAS handle, the stream and the scratch memory the kernels need.
// Ops also names the element types and the array type:
//   Act       activations and the weights the passes read (CPU: T; CUDA: float or bf16);
//   Acc       master weights, their gradients, LayerNorm statistics and losses (CPU: T; CUDA: fp32);
//   Stream    the residual stream X, the residual sums, the after-add LayerNorm's output and
//             the stream's gradients (CPU: T; CUDA: fp32 in both precisions, docs/cuda.md §2);
//   Array<U>  an owning buffer of U (std::vector on the CPU, DeviceArray on the GPU);
//   AttentionSaved  what attention keeps for its backward, attention_saved_size(B, T, NH) of them
//             (CPU: the probabilities (B,NH,T,T) in T; CUDA: the log-sum-exp per row (B,NH,T), fp32).
//
// All buffers are allocated once, for micro-batches of shape (B, T); N = B·T positions. Before
// each group of allocations the model tells the ops its MemoryCategory (memory_plan.h), so the
// CUDA ops can count the bytes of each category (./bench_gpu -plan) as well as allocate them.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "memory_plan.h"
#include "model.h"

// One residual step x → x' as a sequence of its pieces, with the LayerNorms that NormPlan
// switches on (docs/block.md §1):
//
//   u = LN_in(x)?    F = module(u)    f = LN_out(F)?    s = x + Δt·f    x' = LN_after(s)?
//
// `pass` says what each piece does to its values: the forward pass computes them (Gpt2's
// ForwardStep), the tangent pass of stability.h pushes a direction through them. Both walk
// this one description.
// The stream values x, s, x' may be of another type than u, F, f (the CUDA model keeps the
// stream in fp32 under bf16), so each LayerNorm is named at compile time.
template <class Pass, class Value>
Value residual_step(const NormPlan& plan, Pass& pass, Value x) {
    auto f = plan.input ? pass.module(pass.template norm<StepNorm::Input>(x)) : pass.module(x);
    if (plan.output) f = pass.template norm<StepNorm::Output>(f);
    Value s = pass.add(x, f);
    return plan.after_add ? pass.template norm<StepNorm::AfterAdd>(s) : s;
}

template <class Ops>
class Gpt2 {
public:
    using Act = typename Ops::Act;
    using Acc = typename Ops::Acc;
    using Stream = typename Ops::Stream;
    template <class U>
    using Array = typename Ops::template Array<U>;
    // True when the stream is kept in another type than the activations (CUDA bf16).
    static constexpr bool separate_stream = !std::is_same<Act, Stream>::value;

    // Saved values of one LayerNorm application over N rows: its output (of type E) and
    // statistics.
    template <class E>
    struct NormActs {
        Array<E> out;           // (N,C)
        Array<Acc> mean, rstd;  // (N)
    };
    // Saved values of one residual step x → x' (only the LayerNorms its placement uses are
    // allocated).
    struct StepActs {
        NormActs<Act> in, out;    // LN_in, LN_out: inputs of a matrix product or of the add
        NormActs<Stream> after;   // LN_after: its output is the stream
        Array<Act> module_in;     // the module's input u = x rounded to Act, when there is no
                                  // LN_in and the stream has its own type (N,C)
        Array<Act> module_out;    // F(u) before any output LN (N,C)
        Array<Stream> sum;        // s = x + Δt·f (N,C)
        template <StepNorm which>
        const auto& norm() const {
            if constexpr (which == StepNorm::Input) return in;
            else if constexpr (which == StepNorm::Output) return out;
            else return after;
        }
        template <StepNorm which>
        auto& norm() {
            if constexpr (which == StepNorm::Input) return in;
            else if constexpr (which == StepNorm::Output) return out;
            else return after;
        }
    };
    // Saved values of one block.
    struct BlockActs {
        StepActs attn_step, mlp_step;
        Array<Act> qkv;    // (N,3C)
        Array<typename Ops::AttentionSaved> att;  // what attention saves for its backward (see above)
        Array<Act> heads;  // attention output before its projection (N,C)
        Array<Act> fc;     // (N,4C) before GELU
        Array<Act> gelu;   // (N,4C)
        const StepActs& step(Half half) const { return half == Half::Attention ? attn_step : mlp_step; }
        StepActs& step(Half half) { return half == Half::Attention ? attn_step : mlp_step; }
    };

    Ops ops;  // declared first: built before, and destroyed after, every buffer it allocates
    ModelConfig cfg;
    int B, Tn, N;
    Array<Acc> params, grads;  // master weights and their gradients, flat, file order
    ParamTensors<Act> p;       // named views of the weights the passes read
    ParamTensors<Acc> g;       // named views of grads

    // When true, backward stores ‖∂loss/∂X‖ at the 2L + 1 half_stream points in stream_grad_norm.
    bool record_stream_grads = false;
    std::vector<double> stream_grad_norm;

    Gpt2(const ModelConfig& config, int batch, int seq_len)
        : ops(config, batch, seq_len), cfg(config), B(batch), Tn(seq_len), N(batch * seq_len),
          params(alloc<Acc>(MemoryCategory::Parameters, num_parameters(config))),
          grads(alloc<Acc>(MemoryCategory::Parameters, num_parameters(config))) {
        if constexpr (!std::is_same<Act, Acc>::value) weights = alloc<Act>(MemoryCategory::Parameters, params.size());
        p = param_tensors(weight_storage(), cfg);
        g = param_tensors(grads.data(), cfg);
        const size_t C = cfg.C, NC = (size_t)N * C;
        const NormPlan plan = norm_plan(cfg.placement);
        const auto act = MemoryCategory::Activations;
        blocks.resize(cfg.L);
        for (BlockActs& a : blocks) {
            for (StepActs* s : {&a.attn_step, &a.mlp_step}) {
                if (plan.input) alloc_norm(s->in);
                if (plan.output) alloc_norm(s->out);
                if (plan.after_add) alloc_norm(s->after);
                if (separate_stream && !plan.input) s->module_in = alloc<Act>(act, NC);
                s->module_out = alloc<Act>(act, NC);
                s->sum = alloc<Stream>(act, NC);
            }
            a.qkv = alloc<Act>(act, 3 * NC);
            a.att = alloc<typename Ops::AttentionSaved>(MemoryCategory::AttentionState,
                                                        Ops::attention_saved_size(B, Tn, cfg.NH));
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
        if constexpr (!std::is_same<Act, Acc>::value) ops.convert(weights.data(), params.data(), params.size());
    }
    // The rounded copy of the weights at file offset o, which an optimiser step refreshes along
    // with params; null when the passes read params itself.
    Act* weight_copy(size_t o) {
        if constexpr (std::is_same<Act, Acc>::value) return nullptr;
        else return weights.data() + o;
    }

    // Residual stream X_i (N,C) of the last forward: i = 0 after the embedding, i = l after block l.
    const Stream* stream(int i) const { return i == 0 ? embedded.data() : block_output(blocks[i - 1]); }

    // The residual stream at half-block resolution, j = 0 .. 2L: j = 2l + 1 after block l's
    // attention step, j = 2l + 2 after its MLP step.
    const Stream* half_stream(int j) const {
        if (j == 0) return embedded.data();
        const BlockActs& a = blocks[(j - 1) / 2];
        return step_output(j % 2 ? a.attn_step : a.mlp_step);
    }

    // Hidden-state statistics (docs/statistics.md §1) of the last forward at the 2L + 1
    // half_stream points.
    std::vector<StreamStats> half_stream_stats() {
        std::vector<StreamStats> out;
        for (int j = 0; j <= 2 * cfg.L; j++) out.push_back(ops.stream_statistics(half_stream(j), N, cfg.C));
        return out;
    }

    // Global L2 norm of all parameter gradients.
    double grad_norm() { return ops.norm(grads); }

    // ---- diagnostics (stability.h, ./eval): run parts of the model on given inputs ----------
    // These reuse the block and its residual steps unchanged; each call replaces the saved
    // activations of the block(s) it runs, so a later backward would see them.

    // Logits (N,Vp) of the last forward (backward overwrites them with their gradient).
    const Act* logits_data() const { return logits.data(); }
    // Per-position losses (N) of the last forward (./eval's per-sequence perplexity).
    const Acc* losses_data() const { return losses.data(); }
    // Saved values of block l from the last forward (read by the tangent pass in stability.h).
    const BlockActs& block_activations(int l) const { return blocks[l]; }
    // The input (N,C) that one half of block l saw in the last forward: X_l for the attention
    // step, the attention step's output for the MLP step.
    const Stream* step_input(int l, Half half) const {
        return half == Half::Attention ? stream(l) : half_stream(2 * l + 1);
    }
    // Runs block l alone on x (N,C); returns its output (N,C), valid until block l runs again.
    const Stream* run_block(int l, const Stream* x) {
        block_forward(l, x);
        settle_stream();
        return block_output(blocks[l]);
    }
    // Runs one residual step of block l on x (N,C); returns x' (N,C), valid until that step
    // runs again. (half as an int: 0 attention, 1 MLP.)
    const Stream* run_step(int l, Half half, const Stream* x) {
        const Stream* out = step_forward(l, half, x);
        settle_stream();
        return out;
    }
    const Stream* run_step(int l, int half, const Stream* x) { return run_step(l, (Half)half, x); }
    // Runs every block from X_0 = x0 (N,C) in place of the embedding; stream(i) then holds X_i.
    // The final LayerNorm, logits and losses are left as they were.
    void run_blocks_from(const Stream* x0) {
        ops.copy(embedded.data(), x0, (size_t)N * cfg.C);
        for (int l = 0; l < cfg.L; l++) block_forward(l, stream(l));
        settle_stream();
    }

    // ---- the whole model -----------------------------------------------------------------------

    // Forward pass up to the logits, as a training step runs it: tokens, targets (B·T, host
    // memory; the targets are kept for backward, which computes the loss together with its
    // gradient in one pass over the logits).
    //   X_0 = wte[token] + wpe[t];  X_{l+1} = block_l(X_l);  logits = LNf(X_L)·wteᵀ
    void forward_to_logits(const int32_t* host_tokens, const int32_t* host_targets) {
        const int C = cfg.C;
        ops.load_batch(tokens, targets, host_tokens, host_targets);
        ops.encoder_forward(embedded.data(), tokens.data(), p.wte, p.wpe, B, Tn, C);
        for (int l = 0; l < cfg.L; l++) block_forward(l, stream(l));
        layernorm_of(final_norm, stream(cfg.L), NormWeights<Act>{p.lnfw, p.lnfb});
        ops.matmul_forward(logits.data(), final_norm.out.data(), p.wte, (const Act*)nullptr, N, C, cfg.Vp);
    }

    // Forward pass with the loss (evaluation): forward_to_logits, then the per-position losses;
    // the logits are kept. Returns the mean cross-entropy, loss = CE(logits, target).
    Acc forward(const int32_t* host_tokens, const int32_t* host_targets) {
        forward_to_logits(host_tokens, host_targets);
        ops.crossentropy_forward(losses.data(), logits.data(), targets.data(), N, cfg.V, cfg.Vp);
        return ops.mean(losses);
    }

    // Backward pass of the last forward (either one): grads += loss_weight · d(mean loss)/d(params).
    // Its first op computes the per-position losses and, in the same pass over the logits, turns
    // the logits into their gradient (they are consumed); returns the mean loss. Each gradient
    // scratch buffer is written by the op that produces it first (GradOut::Write, or an op that
    // always stores, as attention's backward does d_qkv) and added into by the later ones, so
    // none is zeroed (docs/block.md §2).
    Acc backward(Acc loss_weight) {
        const int C = cfg.C;
        ops.crossentropy_forward_backward(losses.data(), logits.data(), targets.data(), loss_weight / N, N, cfg.V,
                                          cfg.Vp);
        ops.matmul_backward(d_u.data(), g.wte, (Acc*)nullptr, logits.data(), final_norm.out.data(), p.wte, N, C,
                            cfg.Vp, GradOut::Write);
        // LNf's backward writes the stream gradient and, when the last step has no LN_after of
        // its own, that step's module gradient Δt·x̄_L (see step_backward).
        if (norm_plan(cfg.placement).after_add)
            ops.layernorm_backward(d_stream.data(), g.lnfw, g.lnfb, d_u.data(), stream(cfg.L), p.lnfw,
                                   final_norm.mean.data(), final_norm.rstd.data(), N, C, GradOut::Write);
        else
            ops.layernorm_backward_residual(d_stream.data(), d_f.data(), cfg.dt, g.lnfw, g.lnfb, d_u.data(),
                                            stream(cfg.L), p.lnfw, final_norm.mean.data(), final_norm.rstd.data(), N,
                                            C, GradOut::Write);
        if (record_stream_grads) stream_grad_norm.assign(2 * cfg.L + 1, 0.0);
        for (int l = cfg.L - 1; l >= 0; l--) {
            record_stream_grad(2 * l + 2);
            block_backward(l);
        }
        record_stream_grad(0);
        ops.encoder_backward(g.wte, g.wpe, d_stream.data(), tokens.data(), B, Tn, C);
        return ops.mean(losses);
    }

private:
    Array<Act> weights;  // the rounded copy of params the passes read, when Act is not Acc
    std::vector<BlockActs> blocks;
    Array<Stream> embedded;  // X_0 (N,C)
    NormActs<Act> final_norm;  // LNf
    Array<Act> logits;      // (N,Vp), gradient after backward
    Array<Acc> losses;      // (N)
    Array<int32_t> tokens, targets;  // this batch (B·T), where the ops read them
    // Gradient scratch, reused by every block (all (N,C) unless noted): of the stream (d_stream
    // holds ∂loss/∂X at the point backward has reached, updated in place; d_sum, Post-LN only,
    // receives the after-add LayerNorm's input gradient and is then swapped in), and of the
    // activations.
    Array<Stream> d_stream, d_sum;
    Array<Act> d_f, d_mod, d_u, d_heads;
    Array<Act> d_qkv;         // (N,3C)
    Array<Act> d_fc;          // (N,4C)

    // The residual sum s = x + Δt·f of the forward pass that no op has computed yet
    // (docs/block.md §1, "The add and the LayerNorm after it"): ForwardStep::add leaves its sum
    // here, and its first reader computes it. A LayerNorm of s (the next step's LN_in, Post-LN's
    // LN_after, the final LNf) computes s and its own output in one op; any other reader calls
    // settle_stream() first. Nothing is pending after forward or any run_* call.
    struct PendingSum {
        Stream* sum = nullptr;       // where s goes (StepActs::sum); null: nothing pending
        const Stream* x = nullptr;   // its terms
        const Act* f = nullptr;
    };
    PendingSum pending;

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
        if constexpr (std::is_same<Act, Acc>::value) return params.data();
        else return weights.data();
    }

    const Stream* step_output(const StepActs& s) const {
        return norm_plan(cfg.placement).after_add ? s.after.out.data() : s.sum.data();
    }
    const Stream* block_output(const BlockActs& a) const { return step_output(a.mlp_step); }
    // The input u the module of step s multiplies: x itself, or its rounded copy module_in
    // when the stream has its own type (x is the stream here: the step has no LN_in).
    const Act* module_input(const StepActs& s, const Stream* x) const {
        if constexpr (separate_stream) return s.module_in.data();
        else return x;
    }

    // ---- the block ------------------------------------------------------------------------------
    //
    //   Pre-LN:  h = x + Δt·Attn(LN1(x));            x' = h + Δt·MLP(LN2(h))
    //   Post-LN: h = LN1(x + Δt·Attn(x));            x' = LN2(h + Δt·MLP(h))
    //   Peri-LN: h = x + Δt·LN1o(Attn(LN1(x)));      x' = h + Δt·LN2o(MLP(LN2(h)))
    //
    // Each half is one residual step (residual_step above) around its module.

    // Block l forward: x (N,C) → the block's output (kept in blocks[l]).
    void block_forward(int l, const Stream* x) {
        const Stream* h = step_forward(l, Half::Attention, x);
        step_forward(l, Half::Mlp, h);
    }

    // Block l backward: d_stream (N,C) holds d(block output) and becomes d(block input); the
    // gradient between the two halves is recorded at half-block point 2l + 1.
    void block_backward(int l) {
        step_backward(l, Half::Mlp, step_output(blocks[l].attn_step));
        record_stream_grad(2 * l + 1);
        step_backward(l, Half::Attention, stream(l));
    }

    // When recording, stores ‖d_stream‖ as the stream gradient at half-block point j.
    void record_stream_grad(int j) {
        if (record_stream_grads) stream_grad_norm[j] = ops.norm(d_stream);
    }

    // The pieces of one residual step as the forward pass runs them, saving what backward needs
    // in blocks[l].step(half).
    struct ForwardStep {
        Gpt2& m;
        int l;
        Half half;
        template <StepNorm which, class In>
        const auto* norm(const In* x) { return m.template norm_forward<which>(l, half, x); }
        // The module on u: the LN_in output, or the stream itself (rounded to Act first when
        // the stream has its own type: one extra (N,C) pass and buffer per step).
        template <class In>
        const Act* module(const In* u) {
            m.settle_stream();
            StepActs& s = m.blocks[l].step(half);
            const Act* in = s.module_in.data();
            if constexpr (std::is_same<In, Act>::value) in = u;
            else m.ops.convert(s.module_in.data(), u, (size_t)m.N * m.cfg.C);
            Act* f = s.module_out.data();
            if (half == Half::Attention) m.attention_forward(l, in, f);
            else m.mlp_forward(l, in, f);
            return f;
        }
        // s = x + Δt·f, left pending for its first reader.
        const Stream* add(const Stream* x, const Act* f) {
            m.settle_stream();
            Stream* s = m.blocks[l].step(half).sum.data();
            m.pending = {s, x, f};
            return s;
        }
    };

    // One residual step of block l forward, on its input x (N,C); returns x' (N,C), which may
    // be the pending sum.
    const Stream* step_forward(int l, Half half, const Stream* x) {
        ForwardStep pass{*this, l, half};
        return residual_step(norm_plan(cfg.placement), pass, x);
    }

    // One residual step of block l backward, on the same input x (N,C) as its forward: d_stream
    // (N,C) holds dx' and becomes dx, in place. The forward's pieces in reverse (docs/block.md §2):
    //   ds = LN_after'(dx')?   df = Δt·ds   dF = LN_out'(df)?   du = F'(dF)   dx = ds + LN_in'(du)?
    // The add's identity branch costs nothing: ds stays where it is and the module's path adds
    // into it. Post-LN's ds is a new tensor: written into d_sum, which then becomes d_stream.
    // The add's other branch, df = Δt·ds, is no pass of its own either: ds is always finished
    // by a LayerNorm backward (every placement has LN_in or LN_after), which writes df into d_f
    // in the same pass: the step's own LN_after, else the LN_in of the step after it, or LNf.
    void step_backward(int l, Half half, const Stream* x) {
        const NormPlan plan = norm_plan(cfg.placement);
        const StepActs& s = blocks[l].step(half);
        if (plan.after_add) {
            norm_backward<StepNorm::AfterAdd>(l, half, d_sum.data(), d_stream.data(), s.sum.data(), GradOut::Write,
                                              d_f.data());
            d_stream.swap(d_sum);
        }
        Stream* ds = d_stream.data();
        const Act* dmod = d_f.data();  // df = Δt·ds
        if (plan.output) {
            norm_backward<StepNorm::Output>(l, half, d_mod.data(), d_f.data(), s.module_out.data(), GradOut::Write);
            dmod = d_mod.data();
        }
        if (plan.input) {
            module_backward(l, half, s.in.out.data(), dmod, d_u.data(), GradOut::Write);
            // dx is finished here: df for the step before, unless it has its own LN_after or
            // this is the first step.
            const bool first = l == 0 && half == Half::Attention;
            norm_backward<StepNorm::Input>(l, half, ds, d_u.data(), x, GradOut::Add,
                                           plan.after_add || first ? nullptr : d_f.data());
        } else {
            module_backward(l, half, module_input(s, x), dmod, ds, GradOut::Add);
        }
    }

    // LayerNorm with gain and bias w of x (N,C), saved in n. When x is the pending residual sum,
    // one op computes the sum and the LayerNorm of it.
    template <class E, class In>
    void layernorm_of(NormActs<E>& n, const In* x, const NormWeights<Act>& w) {
        if constexpr (std::is_same<In, Stream>::value) {
            if (pending.sum && x == pending.sum) {
                ops.residual_layernorm_forward(pending.sum, n.out.data(), n.mean.data(), n.rstd.data(), pending.x,
                                               pending.f, cfg.dt, w.w, w.b, N, cfg.C);
                pending = {};
                return;
            }
        }
        ops.layernorm_forward(n.out.data(), n.mean.data(), n.rstd.data(), x, w.w, w.b, N, cfg.C);
    }
    // Computes the pending residual sum, if any, on its own.
    void settle_stream() {
        if (!pending.sum) return;
        ops.residual_forward(pending.sum, pending.x, pending.f, cfg.dt, (size_t)N * cfg.C);
        pending = {};
    }
    // LayerNorm `which` of one half of block l on x (N,C); returns its output, saved in blocks[l].
    template <StepNorm which, class In>
    const auto* norm_forward(int l, Half half, const In* x) {
        auto& n = blocks[l].step(half).template norm<which>();
        layernorm_of(n, x, step_norm(p, l, cfg.C, half, which));
        return n.out.data();
    }
    // Its backward: given dout (N,C) and the forward's input x, writes or adds (dx_out) dx (N,C)
    // and adds the gradients of its gain and bias; with df, also writes df (N,C) = Δt·dx, the
    // module gradient of the residual step whose sum dx is the gradient of.
    template <StepNorm which, class D, class G, class X>
    void norm_backward(int l, Half half, D* dx, const G* dout, const X* x, GradOut dx_out, Act* df = nullptr) {
        const auto& n = blocks[l].step(half).template norm<which>();
        const NormWeights<Act> w = step_norm(p, l, cfg.C, half, which);
        const NormWeights<Acc> dw = step_norm(g, l, cfg.C, half, which);
        if (df)
            ops.layernorm_backward_residual(dx, df, cfg.dt, dw.w, dw.b, dout, x, w.w, n.mean.data(), n.rstd.data(), N,
                                            cfg.C, dx_out);
        else
            ops.layernorm_backward(dx, dw.w, dw.b, dout, x, w.w, n.mean.data(), n.rstd.data(), N, cfg.C, dx_out);
    }

    // The module's backward: given df (N,C), writes or adds (du_out) du (N,C) and adds its
    // weights' gradients.
    template <class D>
    void module_backward(int l, Half half, const Act* u, const Act* df, D* du, GradOut du_out) {
        if (half == Half::Attention) attention_backward(l, u, df, du, du_out);
        else mlp_backward(l, u, df, du, du_out);
    }

    // ---- the two modules ------------------------------------------------------------------------

    // Attention of block l: u (N,C) → f (N,C) = proj(attention(qkv(u))).
    void attention_forward(int l, const Act* u, Act* f) {
        BlockActs& a = blocks[l];
        const size_t C = cfg.C;
        ops.matmul_forward(a.qkv.data(), u, p.qkvw + l * 3 * C * C, p.qkvb + l * 3 * C, N, (int)C, (int)(3 * C));
        ops.attention_forward(a.heads.data(), a.att.data(), a.qkv.data(), B, Tn, (int)C, cfg.NH);
        ops.matmul_forward(f, a.heads.data(), p.attprojw + l * C * C, p.attprojb + l * C, N, (int)C, (int)C);
    }

    // Given df (N,C), writes or adds (du_out) du (N,C) and adds the attention weights' gradients.
    template <class D>
    void attention_backward(int l, const Act* u, const Act* df, D* du, GradOut du_out) {
        BlockActs& a = blocks[l];
        const size_t C = cfg.C;
        ops.matmul_backward(d_heads.data(), g.attprojw + l * C * C, g.attprojb + l * C, df, a.heads.data(),
                            p.attprojw + l * C * C, N, (int)C, (int)C, GradOut::Write);
        ops.attention_backward(d_qkv.data(), d_heads.data(), a.qkv.data(), a.heads.data(), a.att.data(), B, Tn,
                               (int)C, cfg.NH);
        ops.matmul_backward(du, g.qkvw + l * 3 * C * C, g.qkvb + l * 3 * C, d_qkv.data(), u, p.qkvw + l * 3 * C * C, N,
                            (int)C, (int)(3 * C), du_out);
    }

    // MLP of block l: u (N,C) → f (N,C) = fcproj(GELU(fc(u))).
    void mlp_forward(int l, const Act* u, Act* f) {
        BlockActs& a = blocks[l];
        const size_t C = cfg.C;
        ops.matmul_gelu_forward(a.gelu.data(), a.fc.data(), u, p.fcw + l * 4 * C * C, p.fcb + l * 4 * C, N, (int)C,
                                (int)(4 * C));
        ops.matmul_forward(f, a.gelu.data(), p.fcprojw + l * 4 * C * C, p.fcprojb + l * C, N, (int)(4 * C), (int)C);
    }

    // Given df (N,C), writes or adds (du_out) du (N,C) and adds the MLP weights' gradients.
    template <class D>
    void mlp_backward(int l, const Act* u, const Act* df, D* du, GradOut du_out) {
        BlockActs& a = blocks[l];
        const size_t C = cfg.C;
        // fcproj's backward, its input gradient taken through GELU' to d_fc in the same op.
        ops.matmul_gelu_backward(d_fc.data(), g.fcprojw + l * 4 * C * C, g.fcprojb + l * C, df, a.gelu.data(),
                                 p.fcprojw + l * 4 * C * C, a.fc.data(), N, (int)(4 * C), (int)C);
        ops.matmul_backward(du, g.fcw + l * 4 * C * C, g.fcb + l * 4 * C, d_fc.data(), u, p.fcw + l * 4 * C * C, N,
                            (int)C, (int)(4 * C), du_out);
    }
};

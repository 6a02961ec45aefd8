// gpt2.cu — the model on one GPU: the CUDA ops the model of gpt2.h runs on, and CudaBackend,
// which adds AdamW and serves ./train and ./eval through the Backend interface.
//
// CudaModel<T> is the same Gpt2 as CpuModel (gpt2_cpu.h): the same block, residual step and
// modules, the same order of gradient accumulation. Only the ops differ: here they are the
// kernels of the .cuh files (namespace gpu) and cuBLAS.
//
// T is the element type of the weights the passes read and of the activations between them:
//   bf16 (the default): mixed precision as PyTorch's autocast does it (docs/cuda.md §2): bf16
//                       weights, LayerNorm outputs and matrix-product inputs and outputs; the
//                       residual stream, its adds and its gradients fp32; fp32 master weights,
//                       gradients of the parameters and AdamW moments; AdamW refreshes the
//                       bf16 weights;
//   float:              everything fp32, matrix products included (no TF32).
// LayerNorm statistics, softmax and loss sums, norms and weight-gradient reductions are fp32
// in both modes (docs/model.md §6).
//
// Device memory, allocated once for micro-batches of shape (B, T), N = B·T (cuda_memory_plan
// counts it without allocating, docs/cuda.md §4):
//   params, grads, m, v     fp32, num_parameters floats each, in checkpoint order (model.h)
//   weights                 bf16 mode only: the bf16 copy of params
//   per block               the activations Gpt2 keeps (T; the stream fp32), LayerNorm mean/rstd and
//                           attention's log-sum-exp per row (fp32)
//   shared by all blocks    gradients of activations, attention's row sums, reduction scratch
// Everything runs in order on one CUDA stream; the host waits only for the loss, the norms and
// the statistics it returns.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "adamw.cuh"
#include "attention.cuh"
#include "backend.h"
#include "cuda_common.cuh"
#include "nccl_comm.cuh"
#include "diagnostics.cuh"
#include "diagnostics.h"
#include "encoder.cuh"
#include "gelu.cuh"
#include "gpt2.h"
#include "kernel_costs.h"
#include "layernorm.cuh"
#include "loss.cuh"
#include "matmul.cuh"
#include "model.h"
#include "residual.cuh"
#include "stats.cuh"

// An op's name in ./bench_gpu's tables: `op`, then `pass` ("qkv matmul", " fwd"). A null op is
// a transfer between host and device or a diagnostic, which is no launch of the training step.
struct OpName {
    OpName(const char* op, const char* pass = "") : op(op), pass(pass) {}
    const char* op;
    const char* pass;
    std::string str() const { return std::string(op) + pass; }
};

// How CudaOps runs each op (every op goes through CudaOps::run): Launch, the backend's, runs it;
// step_timing.cuh's runner records CUDA events around it and step_traffic.cuh's notes its
// launches instead of running it (./bench_gpu). `traffic` returns the launches the op makes
// (traffic.h).
struct Launch {
    template <class Kernels, class Traffic>
    void operator()(const OpName& /*name*/, Kernels kernels, Traffic /*traffic*/, cudaStream_t /*stream*/) {
        kernels();
    }
};

// The CUDA ops as the model calls them: the kernels on DeviceArray buffers, activations in Act,
// the residual stream, statistics, losses and parameter gradients in fp32. The object owns the
// stream every op runs on, the cuBLAS and cuBLASLt handles (gpu::Blas) and the scratch memory
// the kernels need between and within ops. Built while device memory is being counted
// (cuda_common.cuh), it only counts: no stream, no handle, no launch.
//
// Two pairs of adjacent ops run as one kernel, because each pair would otherwise write a
// stream-sized tensor and read it straight back (docs/cuda.md §3):
//   * residual_forward, s = x + Δt·f, and the LayerNorm that reads s (the next step's LN_in,
//     Post-LN's LN_after, LNf): residual_layernorm_forward;
//   * a LayerNorm backward that finishes ds, and residual_backward, df = Δt·ds:
//     layernorm_backward_residual.
// So residual_forward and layernorm_backward are held back (`held`) until the next op: the
// partner above runs the fused kernel; any other op first runs the held one alone (flush).
// Every op goes through run(), which flushes first, so no kernel ever reads a sum or a
// gradient that is still held back.
template <typename Activation, class Runner = Launch>
class CudaOps {
public:
    using Act = Activation;
    using Acc = float;
    using Stream = float;
    template <class U>
    using Array = DeviceArray<U>;
    // Attention keeps the log-sum-exp of each (b, h, t) row, fp32 (attention.cuh).
    using AttentionSaved = float;
    static size_t attention_saved_size(int B, int T, int NH) { return gpu::attention_saved_size(B, T, NH); }

    cudaStream_t stream = nullptr;
    std::unique_ptr<gpu::Blas> blas;  // cuBLAS and cuBLASLt on `stream`
    Runner runner;

    CudaOps(const ModelConfig& cfg, int B, int T)
        : cfg(cfg), attention_delta(gpu::attention_saved_size(B, T, cfg.NH)), token_order(B * T, cfg.C),
          partial(std::max((size_t)MAX_ROW_CHUNKS * 4 * cfg.C, gpu::layernorm_backward_scratch(cfg.C))),
          norm_partial(gpu::SUMSQ_MAX_BLOCKS), stats_scratch(gpu::stream_statistics_scratch(B * T, cfg.C)),
          diag_scratch(std::max<size_t>(gpu::diagnostics_scratch(B, T, cfg.NH), gpu::SUMSQ_MAX_BLOCKS)),
          blas_workspace(gpu::Blas::LT_WORKSPACE_BYTES) {
        if (counting_device_memory()) return;
        cudaCheck(cudaStreamCreate(&stream));
        blas = std::make_unique<gpu::Blas>(stream, blas_workspace.data(), blas_workspace.size());
    }
    ~CudaOps() {
        blas.reset();
        if (stream) cudaStreamDestroy(stream);
    }
    CudaOps(const CudaOps&) = delete;
    CudaOps& operator=(const CudaOps&) = delete;

    // Buffers and copies. The buffers the model allocates next count under `category`.
    void memory_category(MemoryCategory category) { device_ledger().category = category; }
    template <class U>
    Array<U> alloc(size_t n) {  // zero-filled
        Array<U> a(n);
        if (!counting_device_memory()) cudaCheck(cudaMemsetAsync(a.data(), 0, n * sizeof(U), stream));
        return a;
    }
    template <class U>
    void zero(Array<U>& a) {
        run("memset (gradients)", [&] { cudaCheck(cudaMemsetAsync(a.data(), 0, a.size() * sizeof(U), stream)); },
            [&] { return Launches{{"memset", 0, (double)a.size() * sizeof(U)}}; });
    }
    template <class U>
    void copy(U* dst, const U* src, size_t n) {
        run("copy", [&] { cudaCheck(cudaMemcpyAsync(dst, src, n * sizeof(U), cudaMemcpyDeviceToDevice, stream)); },
            [&] { return Launches{{"copy", (double)n * sizeof(U), (double)n * sizeof(U)}}; });
    }
    // Waits until every op so far has run on the device.
    void finish() {
        flush();
        if (!counting_device_memory()) cudaCheck(cudaStreamSynchronize(stream));
    }
    // dst = src rounded to T (the bf16 weights from params, a matrix product's input from the stream).
    void convert(Act* dst, const float* src, size_t n) {
        run("convert", [&] { ::convert(dst, src, n, stream); },
            [&] { return Launches{convert_traffic<Act, float>(n)}; });
    }
    // Uploads the batch.
    void load_batch(Array<int32_t>& tokens, Array<int32_t>& targets, const int32_t* host_tokens,
                    const int32_t* host_targets) {
        run(nullptr, [&] {
            tokens.upload(host_tokens, stream);
            targets.upload(host_targets, stream);
        }, no_launches);
        host_batch.assign(host_tokens, host_tokens + tokens.size());
    }

    // The mean of the per-position losses (summed on the host in double); the L2 norm of a buffer.
    float mean(const Array<float>& losses) {
        double total = 0;
        run(nullptr, [&] {
            std::vector<float> host(losses.size());
            losses.download(host.data(), stream);
            for (float l : host) total += l;
        }, no_launches);
        return (float)(total / losses.size());
    }
    template <class U>
    double norm(const Array<U>& a) {
        double sum = 0;
        run("grad norm", [&] { sum = gpu::sum_of_squares(a.data(), a.size(), norm_partial.data(), stream); },
            [&] { return Launches{gpu::sum_of_squares_traffic<U>(a.size())}; });
        return std::sqrt(sum);
    }

    // The model's ops (the .cuh files). The stream (X_0, residual sums, the after-add LayerNorm's
    // output and their gradients) is float; a LayerNorm's input, output and their gradients are
    // the stream's or the activations' type, whichever the model hands it (I, O, D, G below).
    void encoder_forward(float* out, const int32_t* tokens, const Act* wte, const Act* wpe, int B, int T, int C) {
        run("encoder fwd", [&] { gpu::encoder_forward(out, tokens, wte, wpe, B, T, C, stream); },
            [&] { return Launches{gpu::encoder_forward_traffic<float, Act>(B, T, C)}; });
    }
    // tokens: the batch of the last load_batch (device memory), sorted by token on the device.
    void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) {
        run("encoder bwd", [&] { gpu::encoder_backward(dwte, dwpe, dout, tokens, token_order, B, T, C, stream); },
            [&] { return gpu::encoder_backward_traffic<float>(B, T, C, gpu::token_runs(host_batch.data(), B * T)); });
    }
    template <class O, class I>
    void layernorm_forward(O* out, float* mean, float* rstd, const I* x, const Act* w, const Act* b, int N, int C) {
        if constexpr (std::is_same<I, float>::value) {
            if (held.add.sum == x) {  // s = x + Δt·f and LayerNorm(s) in one kernel
                const HeldAdd add = held.add;
                held = {};
                run("residual + layernorm fwd",
                    [&] { gpu::residual_layernorm_forward(add.sum, out, mean, rstd, add.x, add.f, add.dt, w, b, N, C,
                                                          stream); },
                    [&] { return Launches{gpu::residual_layernorm_forward_traffic<float, Act, O, Act>(N, C)}; });
                return;
            }
        }
        run("layernorm fwd", [&] { gpu::layernorm_forward(out, mean, rstd, x, w, b, N, C, stream); },
            [&] { return Launches{gpu::layernorm_forward_traffic<O, I, Act>(N, C)}; });
    }
    // Held back: run by the next op, fused with it when that is residual_backward of dx.
    template <class D, class G, class I>
    void layernorm_backward(D* dx, float* dw, float* db, const G* dout, const I* x, const Act* w, const float* mean,
                            const float* rstd, int N, int C, GradOut dx_out) {
        flush();
        float* scratch = partial.data();
        held.norm_backward_dx = dx;
        held.norm_backward = [=](Act* df, float dt) {
            if (df)  // and df (N,C) = Δt·dx, written in the same pass
                run("layernorm + residual bwd",
                    [&] { gpu::layernorm_backward_residual(dx, df, dt, dw, db, dout, x, w, mean, rstd, N, C, scratch,
                                                           stream, dx_out); },
                    [&] { return gpu::layernorm_backward_residual_traffic<D, Act, G, I, Act>(N, C, dx_out); });
            else
                run("layernorm bwd",
                    [&] { gpu::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, scratch, stream, dx_out); },
                    [&] { return gpu::layernorm_backward_traffic<D, G, I, Act>(N, C, dx_out); });
        };
    }
    void matmul_forward(Act* out, const Act* inp, const Act* w, const Act* bias, int N, int IC, int OC) {
        run({matmul_layer(IC, OC), " fwd"}, [&] { gpu::matmul_forward(*blas, out, inp, w, bias, N, IC, OC, stream); },
            [&] { return gpu::matmul_forward_traffic<Act>(N, IC, OC, bias != nullptr); });
    }
    // dinp is T, or float where it is the stream's gradient (a module without an input LayerNorm).
    template <class D>
    void matmul_backward(D* dinp, float* dw, float* dbias, const Act* dout, const Act* inp, const Act* w, int N, int IC,
                         int OC, GradOut dinp_out) {
        run({matmul_layer(IC, OC), " bwd"},
            [&] { gpu::matmul_backward(*blas, dinp, dw, dbias, dout, inp, w, N, IC, OC, partial.data(), stream,
                                       dinp_out); },
            [&] { return gpu::matmul_backward_traffic<Act, D>(N, IC, OC, dbias != nullptr, dinp_out); });
    }
    void attention_forward(Act* out, float* lse, const Act* qkv, int B, int T, int C, int NH) {
        run("attention fwd", [&] { gpu::attention_forward(out, lse, qkv, B, T, C, NH, stream); },
            [&] { return gpu::attention_forward_traffic<Act>(B, T, C, NH); });
    }
    void attention_backward(Act* dqkv, const Act* dout, const Act* qkv, const Act* out, const float* lse, int B, int T,
                            int C, int NH) {
        run("attention bwd",
            [&] { gpu::attention_backward(dqkv, dout, qkv, out, lse, attention_delta.data(), B, T, C, NH, stream); },
            [&] { return gpu::attention_backward_traffic<Act>(B, T, C, NH); });
    }
    void matmul_gelu_forward(Act* out, Act* pre, const Act* inp, const Act* w, const Act* bias, int N, int IC, int OC) {
        run("fc matmul + bias + gelu fwd",
            [&] { gpu::matmul_bias_gelu_forward(*blas, out, pre, inp, w, bias, N, IC, OC, stream); },
            [&] { return gpu::matmul_bias_gelu_forward_traffic<Act>(N, IC, OC); });
    }
    void matmul_gelu_backward(Act* dpre, float* dw, float* dbias, const Act* dout, const Act* inp, const Act* w,
                              const Act* pre, int N, int IC, int OC) {
        run({matmul_layer(IC, OC), " + gelu bwd"},
            [&] { gpu::matmul_gelu_backward(*blas, dpre, dw, dbias, dout, inp, w, pre, N, IC, OC, partial.data(),
                                            stream); },
            [&] { return gpu::matmul_gelu_backward_traffic<Act>(N, IC, OC, dbias != nullptr); });
    }
    // Held back: run by the next op, fused with it when that is a LayerNorm of s.
    void residual_forward(float* s, const float* x, const Act* f, float dt, size_t n) {
        flush();
        held.add = {s, x, f, dt, n};
    }
    void residual_backward(Act* df, const float* ds, float dt, size_t n, GradOut df_out) {
        if (held.norm_backward && held.norm_backward_dx == ds && df_out == GradOut::Write) {
            const auto norm_backward = std::move(held.norm_backward);
            held = {};
            norm_backward(df, dt);
            return;
        }
        run("residual bwd", [&] { gpu::residual_backward(df, ds, dt, n, df_out, stream); },
            [&] { return Launches{gpu::residual_backward_traffic<Act, float>(n, df_out)}; });
    }
    void crossentropy_forward(float* losses, const Act* logits, const int32_t* targets, int N, int V, int Vp) {
        run("crossentropy fwd", [&] { gpu::crossentropy_forward(losses, logits, targets, N, V, Vp, stream); },
            [&] { return Launches{gpu::crossentropy_forward_traffic<Act>(N, V, Vp)}; });
    }
    void crossentropy_forward_backward(float* losses, Act* logits, const int32_t* targets, float dloss, int N, int V,
                                       int Vp) {
        run("crossentropy fwd+bwd",
            [&] { gpu::crossentropy_forward_backward(losses, logits, targets, dloss, N, V, Vp, stream); },
            [&] { return Launches{gpu::crossentropy_forward_backward_traffic<Act>(N, V, Vp)}; });
    }

    // AdamW over [lo, hi) of the parameters (CudaBackend::update), refreshing their copy in T.
    void adamw_update(float* params, Act* copy, const float* grads, float* m, float* v, size_t lo, size_t hi,
                      const AdamWHyper& h, int t, double grad_scale) {
        run("adamw",
            [&] { gpu::adamw_update(params, copy, grads, m, v, gpu::adamw_table(cfg), lo, hi, h, t, grad_scale,
                                    stream); },
            [&] { return Launches{gpu::adamw_update_traffic<Act>(hi - lo, copy != nullptr)}; });
    }

    // Runs the op held back, if any, on its own.
    void flush() {
        if (held.add.sum) {
            const HeldAdd add = held.add;
            held = {};
            run("residual fwd", [&] { gpu::residual_forward(add.sum, add.x, add.f, add.dt, add.n, stream); },
                [&] { return Launches{gpu::residual_forward_traffic<float, Act>(add.n)}; });
        } else if (held.norm_backward) {
            const auto norm_backward = std::move(held.norm_backward);
            held = {};
            norm_backward(nullptr, 0.0f);
        }
    }

    // The reductions of the diagnostics (diagnostics.h); each waits for its result.
    template <class U>
    double sum_of_squares(const U* x, size_t n) {
        double sum = 0;
        run(nullptr, [&] { sum = gpu::sum_of_squares(x, n, diag_scratch.data(), stream); }, no_launches);
        return sum;
    }
    StreamStats stream_statistics(const float* x, int N, int C) {
        StreamStats st;
        run(nullptr, [&] { st = gpu::stream_statistics(x, N, C, stats_scratch.data(), stream); }, no_launches);
        return st;
    }
    double attention_logit_max(const Act* qkv, int B, int T, int C, int NH) {
        double best = 0;
        run(nullptr, [&] { best = gpu::attention_logit_max(qkv, B, T, C, NH, diag_scratch.data(), stream); },
            no_launches);
        return best;
    }
    LogitStats logit_statistics(const Act* logits, int N, int V, int Vp) {
        LogitStats st;
        run(nullptr, [&] { st = gpu::logit_statistics(logits, N, V, Vp, diag_scratch.data(), stream); }, no_launches);
        return st;
    }

private:
    ModelConfig cfg;
    // The last load_batch's tokens on the host (B·T): how they repeat decides the traffic of the
    // embedding backward (the traffic model's; no kernel reads them).
    std::vector<int32_t> host_batch;
    // The op held back (see the top of the class): at most one at a time.
    struct HeldAdd {
        float* sum = nullptr;  // s = x + Δt·f, n elements
        const float* x = nullptr;
        const Act* f = nullptr;
        float dt = 0;
        size_t n = 0;
    };
    struct Held {
        HeldAdd add;                                         // residual_forward, when add.sum is set
        const void* norm_backward_dx = nullptr;              // layernorm_backward's dx, when it is held,
        std::function<void(Act* df, float dt)> norm_backward;  // and what runs it (with df: fused)
    } held;

    DeviceArray<float> attention_delta;  // (B,NH,T) Σ dout·out per row, for attention_backward
    gpu::TokenOrder token_order;        // the batch's positions sorted by token, for the wte gradient
    DeviceArray<float> partial;         // column-sum partials: MAX_ROW_CHUNKS·4C, or LayerNorm's if more
    DeviceArray<float> norm_partial;    // sum-of-squares partials of norm
    DeviceArray<float> stats_scratch;   // for stream_statistics
    DeviceArray<float> diag_scratch;    // the other diagnostics: sums of squares, per-row maxima
    DeviceArray<unsigned char> blas_workspace;  // cuBLASLt's, for the fused products

    static Launches no_launches() { return {}; }

    // Every op: first the op held back, then this one, through the runner.
    template <class Kernels, class Traffic>
    void run(const OpName& name, Kernels kernels, Traffic traffic) {
        flush();
        runner(name, kernels, traffic, stream);
    }

    // The linear layer a matrix product (N,IC)·(OC,IC)ᵀ belongs to, told apart by its shape.
    const char* matmul_layer(int IC, int OC) const {
        if (OC == cfg.Vp) return "lm head matmul";
        if (OC == 3 * cfg.C) return "qkv matmul";
        if (OC == 4 * cfg.C) return "fc matmul";
        if (IC == 4 * cfg.C) return "fcproj matmul";
        return "attproj matmul";
    }
};

template <typename T>
using CudaModel = Gpt2<CudaOps<T>>;

// The model on the GPU as a Backend for ./train and ./eval: CudaModel<Act> plus AdamW moments.
template <typename Act>
class CudaBackend : public Backend {
public:
    CudaBackend(const ModelConfig& cfg, int B, int T, const std::string& device, std::shared_ptr<NcclComm> comm = nullptr)
        : model(cfg, B, T), range{0, model.params.size()}, m(moment_buffer(range.size())),
          v(moment_buffer(range.size())), device(device), comm(std::move(comm)) {
        model.ops.finish();
    }

    std::string name() const override {
        const char* precision = std::is_same<Act, float>::value ? "fp32" : "bf16, fp32 master weights";
        return std::string("cuda (") + precision + ", " + device + ", " + RANK_COLLECTIVES + ")";
    }
    const ModelConfig& config() const override { return model.cfg; }

    // The model's passes and its diagnostics (backend.h).
    double forward(const int32_t* inputs, const int32_t* targets) override { return model.forward(inputs, targets); }
    void forward_to_logits(const int32_t* inputs, const int32_t* targets) override {
        model.forward_to_logits(inputs, targets);
    }
    void zero_grad() override { model.zero_grad(); }
    double backward(double loss_weight) override { return model.backward(loss_weight); }
    double grad_norm() override { return model.grad_norm(); }
    ForwardStats forward_stats() override { return diag::forward_stats(model); }
    void record_stream_grads(bool on) override { model.record_stream_grads = on; }
    std::vector<double> stream_grad_norms() override { return model.stream_grad_norm; }
    std::vector<double> fcproj_grad_norms() override { return diag::fcproj_grad_norms(model); }

    // Every tensor of the optimiser range in one launch; m and v hold that range only.
    void update(const AdamWHyper& h, int t, double grad_scale) override {
        model.ops.adamw_update(model.params.data(), model.weight_copy(0), model.grads.data(), m.data(), v.data(),
                               range.lo, range.hi, h, t, grad_scale);
    }

    // Data parallelism (README "Training on several GPUs or nodes"): over NCCL on the device
    // buffers where built with it, else through the host: the buffers go down, through the
    // process group's collectives and back up.
    void set_optimizer_range(Range r) override {
        range = r;
        m = moment_buffer(r.size());
        v = moment_buffer(r.size());
    }
#ifdef USE_NCCL
    static constexpr const char* RANK_COLLECTIVES = "ranks over NCCL";
    void sum_grads(ProcessGroup& group) override {
        if (group.size() == 1) return;
        nccl().sum(model.grads.data(), model.grads.size(), model.ops.stream);
    }
    void gather_params(ProcessGroup& group) override {
        if (group.size() == 1) return;
        nccl().all_gather(model.params.data(), model.params.size(), model.ops.stream);
        model.sync_weights();
    }
#else
    static constexpr const char* RANK_COLLECTIVES = "ranks through host memory";
    void sum_grads(ProcessGroup& group) override {
        if (group.size() == 1) return;
        std::vector<float> host(model.grads.size());
        model.grads.download(host.data(), model.ops.stream);
        group.sum(host.data(), host.size());
        model.grads.upload(host.data(), model.ops.stream);
    }
    void gather_params(ProcessGroup& group) override {
        if (group.size() == 1) return;
        std::vector<float> host(model.params.size());
        get_params(host.data());
        group.all_gather(host.data(), host.size());
        set_params(host.data());
    }
#endif

    void get_params(float* out) override { model.params.download(out, model.ops.stream); }
    void set_params(const float* in) override {
        model.params.upload(in, model.ops.stream);
        model.sync_weights();
    }
    void get_moments(float* m_out, float* v_out) override {
        m.download(m_out, model.ops.stream);
        v.download(v_out, model.ops.stream);
    }
    void set_moments(const float* m_in, const float* v_in) override {
        m.upload(m_in, model.ops.stream);
        v.upload(v_in, model.ops.stream);
    }

    CudaModel<Act> model;

private:
    Range range;              // the optimiser range (set_optimizer_range)
    DeviceArray<float> m, v;  // AdamW moments of that range, file order
    std::string device;       // the GPU's description
    std::shared_ptr<NcclComm> comm;  // the ranks' communicator (make_cuda_comm); null for one rank

#ifdef USE_NCCL
    NcclComm& nccl() {
        if (!comm) throw CollectiveError("the CUDA backend of several ranks was made without their communicator");
        return *comm;
    }
#endif

    // n zeroed floats of AdamW moments (counted with the parameters in a memory plan).
    DeviceArray<float> moment_buffer(size_t n) {
        model.ops.memory_category(MemoryCategory::Parameters);
        return model.ops.template alloc<float>(n);
    }
};

// The index among `count` visible GPUs that local rank `gpu` uses: its own, or the only one
// visible (srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES per rank), whatever its rank; -1 when
// there are fewer.
static int visible_gpu_index(int gpu, int count) { return count == 1 ? 0 : gpu < count ? gpu : -1; }

// What is missing when visible_gpu_index finds no GPU for local rank `gpu`.
static std::string gpu_not_visible(int gpu, int count) {
    return "local rank " + std::to_string(gpu) + " needs GPU " + std::to_string(gpu) + " but " + std::to_string(count) +
           " are visible (one GPU per rank on each node)";
}

bool cuda_device_available(std::string* description, int gpu) {
    int count = 0;  // without a driver the call fails and leaves count alone
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count <= 0) {
        cudaGetLastError();  // clear the error for later calls
        if (description) *description = err != cudaSuccess ? cudaGetErrorString(err) : "0 devices";
        return false;
    }
    const int index = visible_gpu_index(gpu, count);
    if (index < 0) {
        if (description) *description = gpu_not_visible(gpu, count);
        return false;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
        cudaGetLastError();
        if (description) *description = "CUDA device " + std::to_string(index) + " unreadable";
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

// The device memory a CudaBackend for micro-batches (B, T) allocates, by category: the backend
// built while counting (cuda_common.cuh), so no device is needed and none is touched.
MemoryPlan cuda_memory_plan(const ModelConfig& cfg, int B, int T, bool use_bf16) {
    MemoryPlan plan;
    CountingScope counting(&plan);
    if (use_bf16) CudaBackend<bf16>(cfg, B, T, "plan");
    else CudaBackend<float>(cfg, B, T, "plan");
    return plan;
}

// Makes the GPU of local rank `gpu` current (visible_gpu_index) and returns its index.
static int select_cuda_device(int gpu) {
    int count = 0;
    cudaCheck(cudaGetDeviceCount(&count));
    const int index = visible_gpu_index(gpu, count);
    if (index < 0) throw InputError("-device cuda: " + gpu_not_visible(gpu, count));
    cudaCheck(cudaSetDevice(index));
    return index;
}

uint64_t cuda_free_memory(int gpu) {
    size_t free = 0, total = 0;
    select_cuda_device(gpu);
    cudaCheck(cudaMemGetInfo(&free, &total));
    return free;
}

std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& cfg, int B, int T, bool use_bf16, int gpu,
                                           std::shared_ptr<NcclComm> comm) {
    std::string device;
    if (!cuda_device_available(&device, gpu)) throw InputError("-device cuda: " + device);
    if (B <= 0 || T <= 0 || T > cfg.maxT)
        throw InputError("cuda backend: need B >= 1 and 1 <= T <= maxT = " + std::to_string(cfg.maxT));
    select_cuda_device(gpu);
    if (use_bf16) return std::make_unique<CudaBackend<bf16>>(cfg, B, T, device, std::move(comm));
    return std::make_unique<CudaBackend<float>>(cfg, B, T, device, std::move(comm));
}

std::shared_ptr<NcclComm> make_cuda_comm(ProcessGroup& group, int gpu, size_t num_parameters, double timeout_s) {
    if (group.size() == 1) return nullptr;
#ifdef USE_NCCL
    select_cuda_device(gpu);
    auto comm = std::make_shared<NcclComm>(group, timeout_s);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    {
        DeviceArray<float> warm_up(num_parameters);  // the step's collectives at their own size
        cudaCheck(cudaMemsetAsync(warm_up.data(), 0, num_parameters * sizeof(float), stream));
        comm->sum(warm_up.data(), num_parameters, stream);
        comm->all_gather(warm_up.data(), num_parameters, stream);
    }
    cudaCheck(cudaStreamDestroy(stream));
    return comm;
#else
    return nullptr;
#endif
}

#include "step_timing.cuh"   // needs CudaOps
#include "step_traffic.cuh"  // needs CudaOps

// gpt2.cu — the model on one GPU: the CUDA ops the model of gpt2.h runs on, and CudaBackend,
// which adds AdamW and serves ./train and ./eval through the Backend interface.
//
// CudaModel<T> is the same Gpt2 as CpuModel (gpt2_cpu.h): the same block, residual step and
// modules, the same order of gradient accumulation. Only the ops differ: here they are the
// kernels of the .cuh files (namespace gpu) and cuBLAS, each launched when the model calls its
// op; the two ops the model calls for a pair of adjacent equations, residual_layernorm_forward
// and layernorm_backward_residual, are one kernel each (docs/cuda.md §3).
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

// What watches the ops of a training step for ./bench_gpu: step_timing.cuh's Timer records CUDA
// events around each op, step_traffic.cuh's Recorder notes the launches each declares (traffic.h).
// CudaOps tells it an op's name ("qkv matmul fwd") and declared launches before launching them,
// and the op's end after. Transfers between host and device and the diagnostics are not told.
struct OpObserver {
    virtual void begin(const std::string& op, Launches launches) = 0;
    virtual void end() = 0;

protected:
    ~OpObserver() = default;
};

// The CUDA ops as the model calls them: the kernels on DeviceArray buffers, activations in Act,
// the residual stream, statistics, losses and parameter gradients in fp32. The object owns the
// stream every op runs on, the cuBLAS and cuBLASLt handles (gpu::Blas) and the scratch memory
// the kernels need between and within ops. Built while device memory is being counted
// (cuda_common.cuh), it only counts: no stream, no handle, no launch (launching()).
//
// Every op is the same few lines: its name and declared launches (the launcher's `*_traffic`
// function) to the observer, if there is one; the launcher of the .cuh file, unless device
// memory is only being counted; the op's end to the observer.
template <typename Activation>
class CudaOps {
public:
    using Act = Activation;
    using Acc = float;
    template <class U>
    using Array = DeviceArray<U>;
    static size_t attention_saved_size(int B, int T, int NH) { return gpu::attention_saved_size(B, T, NH); }

    cudaStream_t stream = nullptr;
    std::unique_ptr<gpu::Blas> blas;  // cuBLAS and cuBLASLt on `stream`
    OpObserver* observer = nullptr;   // null in training

    CudaOps(const ModelConfig& cfg, int B, int T)
        : cfg(cfg), attention_delta(gpu::attention_saved_size(B, T, cfg.NH)), token_order(B * T, cfg.C),
          partial(std::max((size_t)MAX_ROW_CHUNKS * 4 * cfg.C, gpu::layernorm_backward_scratch(cfg.C))),
          norm_partial(gpu::SUMSQ_MAX_BLOCKS), stats_scratch(gpu::stream_statistics_scratch(B * T, cfg.C)),
          diag_scratch(std::max<size_t>(gpu::diagnostics_scratch(B, T, cfg.NH), gpu::SUMSQ_MAX_BLOCKS)),
          blas_workspace(gpu::Blas::LT_WORKSPACE_BYTES) {
        if (!launching()) return;
        cudaCheck(cudaStreamCreate(&stream));
        blas = std::make_unique<gpu::Blas>(stream, blas_workspace.data(), blas_workspace.size());
    }
    ~CudaOps() {
        blas.reset();
        if (stream) cudaStreamDestroy(stream);
    }
    CudaOps(const CudaOps&) = delete;
    CudaOps& operator=(const CudaOps&) = delete;

    // Whether ops run on the device: not while device memory is only counted (step_traffic.cuh).
    static bool launching() { return !counting_device_memory(); }

    // Buffers and copies. The buffers the model allocates next count under `category`.
    void memory_category(MemoryCategory category) { device_ledger().category = category; }
    template <class U>
    Array<U> alloc(size_t n) {  // zero-filled
        Array<U> a(n);
        if (launching()) cudaCheck(cudaMemsetAsync(a.data(), 0, n * sizeof(U), stream));
        return a;
    }
    template <class U>
    void zero(Array<U>& a) {
        if (observer) observer->begin("memset (gradients)", {{"memset", 0, (double)a.size() * sizeof(U)}});
        if (launching()) cudaCheck(cudaMemsetAsync(a.data(), 0, a.size() * sizeof(U), stream));
        end_op();
    }
    template <class U>
    void copy(U* dst, const U* src, size_t n) {
        if (observer) observer->begin("copy", {{"copy", (double)n * sizeof(U), (double)n * sizeof(U)}});
        if (launching()) cudaCheck(cudaMemcpyAsync(dst, src, n * sizeof(U), cudaMemcpyDeviceToDevice, stream));
        end_op();
    }
    // Waits until every op so far has run on the device.
    void finish() {
        if (launching()) cudaCheck(cudaStreamSynchronize(stream));
    }
    // dst = src rounded to T (the bf16 weights from params, a matrix product's input from the stream).
    void convert(Act* dst, const float* src, size_t n) {
        if (observer) observer->begin("convert", {convert_traffic<Act, float>(n)});
        if (launching()) ::convert(dst, src, n, stream);
        end_op();
    }
    // Uploads the batch.
    void load_batch(Array<int32_t>& tokens, Array<int32_t>& targets, const int32_t* host_tokens,
                    const int32_t* host_targets) {
        if (launching()) {
            tokens.upload(host_tokens, stream);
            targets.upload(host_targets, stream);
        }
        host_batch.assign(host_tokens, host_tokens + tokens.size());
    }

    // The mean of the per-position losses (summed on the host in double); the L2 norm of a buffer.
    float mean(const Array<float>& losses) {
        double total = 0;
        if (launching()) {
            std::vector<float> host(losses.size());
            losses.download(host.data(), stream);
            for (float l : host) total += l;
        }
        return (float)(total / losses.size());
    }
    template <class U>
    double norm(const Array<U>& a) {
        double sum = 0;
        if (observer) observer->begin("grad norm", {gpu::sum_of_squares_traffic<U>(a.size())});
        if (launching()) sum = gpu::sum_of_squares(a.data(), a.size(), norm_partial.data(), stream);
        end_op();
        return std::sqrt(sum);
    }

    // The model's ops (the .cuh files). The stream (X_0, residual sums, the after-add LayerNorm's
    // output and their gradients) is float; a LayerNorm's input, output and their gradients are
    // the stream's or the activations' type, whichever the model hands it (I, O, D, G below).
    void encoder_forward(float* out, const int32_t* tokens, const Act* wte, const Act* wpe, int B, int T, int C) {
        if (observer) observer->begin("encoder fwd", {gpu::encoder_forward_traffic<float, Act>(B, T, C)});
        if (launching()) gpu::encoder_forward(out, tokens, wte, wpe, B, T, C, stream);
        end_op();
    }
    // tokens: the batch of the last load_batch (device memory), sorted by token on the device.
    void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) {
        if (observer)
            observer->begin("encoder bwd", gpu::encoder_backward_traffic<float>(
                                                B, T, C, gpu::token_runs(host_batch.data(), B * T)));
        if (launching()) gpu::encoder_backward(dwte, dwpe, dout, tokens, token_order, B, T, C, stream);
        end_op();
    }
    template <class O, class I>
    void layernorm_forward(O* out, float* mean, float* rstd, const I* x, const Act* w, const Act* b, int N, int C) {
        if (observer) observer->begin("layernorm fwd", {gpu::layernorm_forward_traffic<O, I, Act>(N, C)});
        if (launching()) gpu::layernorm_forward(out, mean, rstd, x, w, b, N, C, stream);
        end_op();
    }
    // s (N,C) = x + Δt·f, then out = LayerNorm(s), in one kernel: s is not read back from memory.
    template <class O>
    void residual_layernorm_forward(float* s, O* out, float* mean, float* rstd, const float* x, const Act* f,
                                    float dt, const Act* w, const Act* b, int N, int C) {
        if (observer)
            observer->begin("residual + layernorm fwd",
                            {gpu::residual_layernorm_forward_traffic<float, Act, O, Act>(N, C)});
        if (launching()) gpu::residual_layernorm_forward(s, out, mean, rstd, x, f, dt, w, b, N, C, stream);
        end_op();
    }
    template <class D, class G, class I>
    void layernorm_backward(D* dx, float* dw, float* db, const G* dout, const I* x, const Act* w, const float* mean,
                            const float* rstd, int N, int C, GradOut dx_out) {
        if (observer) observer->begin("layernorm bwd", gpu::layernorm_backward_traffic<D, G, I, Act>(N, C, dx_out));
        if (launching())
            gpu::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, partial.data(), stream, dx_out);
        end_op();
    }
    // layernorm_backward, and df (N,C) = Δt·dx (written) in the same pass: dx is not read back.
    template <class D, class G, class I>
    void layernorm_backward_residual(D* dx, Act* df, float dt, float* dw, float* db, const G* dout, const I* x,
                                     const Act* w, const float* mean, const float* rstd, int N, int C,
                                     GradOut dx_out) {
        if (observer)
            observer->begin("layernorm + residual bwd",
                            gpu::layernorm_backward_residual_traffic<D, Act, G, I, Act>(N, C, dx_out));
        if (launching())
            gpu::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, partial.data(), stream, dx_out, df, dt);
        end_op();
    }
    void matmul_forward(Act* out, const Act* inp, const Act* w, const Act* bias, int N, int IC, int OC) {
        if (observer)
            observer->begin(matmul_layer(IC, OC) + " fwd",
                            gpu::matmul_forward_traffic<Act>(N, IC, OC, bias != nullptr));
        if (launching()) gpu::matmul_forward(*blas, out, inp, w, bias, N, IC, OC, stream);
        end_op();
    }
    // dinp is T, or float where it is the stream's gradient (a module without an input LayerNorm).
    template <class D>
    void matmul_backward(D* dinp, float* dw, float* dbias, const Act* dout, const Act* inp, const Act* w, int N, int IC,
                         int OC, GradOut dinp_out) {
        if (observer)
            observer->begin(matmul_layer(IC, OC) + " bwd",
                            gpu::matmul_backward_traffic<Act, D>(N, IC, OC, dbias != nullptr, dinp_out));
        if (launching())
            gpu::matmul_backward(*blas, dinp, dw, dbias, dout, inp, w, N, IC, OC, partial.data(), stream, dinp_out);
        end_op();
    }
    void attention_forward(Act* out, float* lse, const Act* qkv, int B, int T, int C, int NH) {
        if (observer) observer->begin("attention fwd", gpu::attention_forward_traffic<Act>(B, T, C, NH));
        if (launching()) gpu::attention_forward(out, lse, qkv, B, T, C, NH, stream);
        end_op();
    }
    void attention_backward(Act* dqkv, const Act* dout, const Act* qkv, const Act* out, const float* lse, int B, int T,
                            int C, int NH) {
        if (observer) observer->begin("attention bwd", gpu::attention_backward_traffic<Act>(B, T, C, NH));
        if (launching())
            gpu::attention_backward(dqkv, dout, qkv, out, lse, attention_delta.data(), B, T, C, NH, stream);
        end_op();
    }
    void matmul_gelu_forward(Act* out, Act* pre, const Act* inp, const Act* w, const Act* bias, int N, int IC, int OC) {
        if (observer)
            observer->begin("fc matmul + bias + gelu fwd", gpu::matmul_bias_gelu_forward_traffic<Act>(N, IC, OC));
        if (launching()) gpu::matmul_bias_gelu_forward(*blas, out, pre, inp, w, bias, N, IC, OC, stream);
        end_op();
    }
    void matmul_gelu_backward(Act* dpre, float* dw, float* dbias, const Act* dout, const Act* inp, const Act* w,
                              const Act* pre, int N, int IC, int OC) {
        if (observer)
            observer->begin(matmul_layer(IC, OC) + " + gelu bwd",
                            gpu::matmul_gelu_backward_traffic<Act>(N, IC, OC, dbias != nullptr));
        if (launching())
            gpu::matmul_gelu_backward(*blas, dpre, dw, dbias, dout, inp, w, pre, N, IC, OC, partial.data(), stream);
        end_op();
    }
    // s = x + Δt·f alone, where no LayerNorm reads s (the end of run_blocks_from).
    void residual_forward(float* s, const float* x, const Act* f, float dt, size_t n) {
        if (observer) observer->begin("residual fwd", {gpu::residual_forward_traffic<float, Act>(n)});
        if (launching()) gpu::residual_forward(s, x, f, dt, n, stream);
        end_op();
    }
    void crossentropy_forward(float* losses, const Act* logits, const int32_t* targets, int N, int V, int Vp) {
        if (observer) observer->begin("crossentropy fwd", {gpu::crossentropy_forward_traffic<Act>(N, V, Vp)});
        if (launching()) gpu::crossentropy_forward(losses, logits, targets, N, V, Vp, stream);
        end_op();
    }
    void crossentropy_forward_backward(float* losses, Act* logits, const int32_t* targets, float dloss, int N, int V,
                                       int Vp) {
        if (observer)
            observer->begin("crossentropy fwd+bwd", {gpu::crossentropy_forward_backward_traffic<Act>(N, V, Vp)});
        if (launching()) gpu::crossentropy_forward_backward(losses, logits, targets, dloss, N, V, Vp, stream);
        end_op();
    }

    // AdamW over [lo, hi) of the parameters (CudaBackend::update), refreshing their copy in T.
    void adamw_update(float* params, Act* copy, const float* grads, float* m, float* v, size_t lo, size_t hi,
                      const AdamWHyper& h, int t, double grad_scale) {
        if (observer) observer->begin("adamw", {gpu::adamw_update_traffic<Act>(hi - lo, copy != nullptr)});
        if (launching())
            gpu::adamw_update(params, copy, grads, m, v, gpu::adamw_table(cfg), lo, hi, h, t, grad_scale, stream);
        end_op();
    }

    // The reductions of the diagnostics (diagnostics.h); each waits for its result.
    template <class U>
    double sum_of_squares(const U* x, size_t n) {
        return gpu::sum_of_squares(x, n, diag_scratch.data(), stream);
    }
    StreamStats stream_statistics(const float* x, int N, int C) {
        return gpu::stream_statistics(x, N, C, stats_scratch.data(), stream);
    }
    double attention_logit_max(const Act* qkv, int B, int T, int C, int NH) {
        return gpu::attention_logit_max(qkv, B, T, C, NH, diag_scratch.data(), stream);
    }
    LogitStats logit_statistics(const Act* logits, int N, int V, int Vp) {
        return gpu::logit_statistics(logits, N, V, Vp, diag_scratch.data(), stream);
    }

private:
    ModelConfig cfg;
    // The last load_batch's tokens on the host (B·T): how they repeat decides the traffic of the
    // embedding backward (the traffic model's; no kernel reads them).
    std::vector<int32_t> host_batch;

    DeviceArray<float> attention_delta;  // (B,NH,T) Σ dout·out per row, for attention_backward
    gpu::TokenOrder token_order;        // the batch's positions sorted by token, for the wte gradient
    DeviceArray<float> partial;         // column-sum partials: MAX_ROW_CHUNKS·4C, or LayerNorm's if more
    DeviceArray<float> norm_partial;    // sum-of-squares partials of norm
    DeviceArray<float> stats_scratch;   // for stream_statistics
    DeviceArray<float> diag_scratch;    // the other diagnostics: sums of squares, per-row maxima
    DeviceArray<unsigned char> blas_workspace;  // cuBLASLt's, for the fused products

    // Tells the observer, if any, that the op just launched has ended.
    void end_op() {
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

template <typename T>
using CudaModel = Gpt2<CudaOps<T>>;

// The model on the GPU as a Backend for ./train and ./eval: CudaModel<Act>, whose passes ./train
// calls (Gpt2, gpt2.h), plus AdamW moments, the copies in and out and the collectives.
template <typename Act>
class CudaBackend final : public Backend, public CudaModel<Act> {
public:
    // The model, and its members used here by name (a base that depends on the template's
    // parameter is not searched for names otherwise).
    using Model = CudaModel<Act>;
    using Model::cfg;
    using Model::grads;
    using Model::ops;
    using Model::params;

    CudaBackend(const ModelConfig& cfg, int B, int T, const std::string& device, std::shared_ptr<NcclComm> comm = nullptr)
        : Model(cfg, B, T), range{0, params.size()}, m(moment_buffer(range.size())), v(moment_buffer(range.size())),
          device(device), comm(std::move(comm)) {
        ops.finish();
    }

    std::string name() const override {
        const char* precision = std::is_same<Act, float>::value ? "fp32" : "bf16, fp32 master weights";
        return std::string("cuda (") + precision + ", " + device + ", " + RANK_COLLECTIVES + ")";
    }
    const ModelConfig& config() const override { return cfg; }
    ForwardStats forward_stats() override { return diag::forward_stats(static_cast<Model&>(*this)); }
    std::vector<double> fcproj_grad_norms() override { return diag::fcproj_grad_norms(static_cast<Model&>(*this)); }

    // Every tensor of the optimiser range in one launch; m and v hold that range only.
    void update(const AdamWHyper& h, int t, double grad_scale) override {
        ops.adamw_update(params.data(), this->weight_copy(0), grads.data(), m.data(), v.data(),
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
        nccl().sum(grads.data(), grads.size(), ops.stream);
    }
    void gather_params(ProcessGroup& group) override {
        if (group.size() == 1) return;
        nccl().all_gather(params.data(), params.size(), ops.stream);
        this->sync_weights();
    }
#else
    static constexpr const char* RANK_COLLECTIVES = "ranks through host memory";
    void sum_grads(ProcessGroup& group) override {
        if (group.size() == 1) return;
        std::vector<float> host(grads.size());
        grads.download(host.data(), ops.stream);
        group.sum(host.data(), host.size());
        grads.upload(host.data(), ops.stream);
    }
    void gather_params(ProcessGroup& group) override {
        if (group.size() == 1) return;
        std::vector<float> host(params.size());
        get_params(host.data());
        group.all_gather(host.data(), host.size());
        set_params(host.data());
    }
#endif

    void get_params(float* out) override { params.download(out, ops.stream); }
    void set_params(const float* in) override {
        params.upload(in, ops.stream);
        this->sync_weights();
    }
    void get_moments(float* m_out, float* v_out) override {
        m.download(m_out, ops.stream);
        v.download(v_out, ops.stream);
    }
    void set_moments(const float* m_in, const float* v_in) override {
        m.upload(m_in, ops.stream);
        v.upload(v_in, ops.stream);
    }

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
        ops.memory_category(MemoryCategory::Parameters);
        return ops.template alloc<float>(n);
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

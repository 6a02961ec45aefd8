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
#include "block_norms.h"
#include "cuda_common.cuh"
#include "nccl_comm.cuh"
#include "diagnostics.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "gpt2.h"
#include "layernorm.cuh"
#include "loss.cuh"
#include "matmul.cuh"
#include "model.h"
#include "residual.cuh"
#include "stats.cuh"
#include "step_traffic.cuh"

// The CUDA ops as the model calls them: the kernels on DeviceArray buffers, activations in T,
// the residual stream, statistics, losses and parameter gradients in fp32. The object owns the
// stream every op runs on, the cuBLAS and cuBLASLt handles (gpu::Blas) and the scratch memory
// the kernels need between and within ops. Built while device memory is being counted
// (cuda_common.cuh), it only counts: no stream, no handle, no launch.
template <typename T>
class CudaOps {
public:
    using Act = T;
    using Acc = float;
    using Stream = float;
    template <class U>
    using Array = DeviceArray<U>;

    cudaStream_t stream = nullptr;
    std::unique_ptr<gpu::Blas> blas;  // cuBLAS and cuBLASLt on `stream`

    CudaOps(const ModelConfig& cfg, int B, int Tn)
        : attention_delta(gpu::attention_saved_size(B, Tn, cfg.NH)), token_order(B * Tn, cfg.C),
          partial(std::max((size_t)MAX_ROW_CHUNKS * 4 * cfg.C, gpu::layernorm_backward_scratch(cfg.C))),
          norm_partial(gpu::SUMSQ_MAX_BLOCKS),
          stats_scratch(gpu::stream_statistics_scratch(B * Tn, cfg.C)),
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
        zero(a);
        return a;
    }
    template <class U>
    void zero(Array<U>& a) {
        if (!counting_device_memory()) cudaCheck(cudaMemsetAsync(a.data(), 0, a.size() * sizeof(U), stream));
    }
    template <class U>
    void copy(U* dst, const U* src, size_t n) {
        cudaCheck(cudaMemcpyAsync(dst, src, n * sizeof(U), cudaMemcpyDeviceToDevice, stream));
    }
    void finish() {
        if (!counting_device_memory()) cudaCheck(cudaStreamSynchronize(stream));
    }
    // dst = src rounded to T (the bf16 weights from params, a matrix product's input from the stream).
    void convert(T* dst, const float* src, size_t n) { ::convert(dst, src, n, stream); }
    // Uploads the batch.
    void load_batch(Array<int32_t>& tokens, Array<int32_t>& targets, const int32_t* host_tokens,
                    const int32_t* host_targets) {
        tokens.upload(host_tokens, stream);
        targets.upload(host_targets, stream);
    }

    // Reductions: the mean of the per-position losses (summed on the host in double), the L2
    // norm of a buffer, the statistics.
    float mean(const Array<float>& losses) {
        std::vector<float> host(losses.size());
        losses.download(host.data(), stream);
        double total = 0;
        for (float l : host) total += l;
        return (float)(total / host.size());
    }
    template <class U>
    double norm(const Array<U>& a) {
        return std::sqrt(gpu::sum_of_squares(a.data(), a.size(), norm_partial.data(), stream));
    }
    StreamStats stream_statistics(const float* x, int N, int C) {
        return gpu::stream_statistics(x, N, C, stats_scratch.data(), stream);
    }

    // The model's ops (the .cuh files). The stream (X_0, residual sums, the after-add LayerNorm's
    // output and their gradients) is float; a LayerNorm's input, output and their gradients are
    // the stream's or the activations' type, whichever the model hands it (I, O, D, G below).
    void encoder_forward(float* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C) {
        gpu::encoder_forward(out, tokens, wte, wpe, B, Tn, C, stream);
    }
    // tokens: the batch of the last load_batch (device memory), sorted by token on the device.
    void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int Tn, int C) {
        gpu::encoder_backward(dwte, dwpe, dout, tokens, token_order, B, Tn, C, stream);
    }
    template <class O, class I>
    void layernorm_forward(O* out, float* mean, float* rstd, const I* x, const T* w, const T* b, int N, int C) {
        gpu::layernorm_forward(out, mean, rstd, x, w, b, N, C, stream);
    }
    template <class D, class G, class I>
    void layernorm_backward(D* dx, float* dw, float* db, const G* dout, const I* x, const T* w, const float* mean,
                            const float* rstd, int N, int C, GradOut dx_out = GradOut::Add) {
        gpu::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, partial.data(), stream, dx_out);
    }
    // layernorm_backward, and df (N,C) = Δt·dx in the same pass (the residual step's gradient).
    template <class D, class G, class I>
    void layernorm_backward_residual(D* dx, T* df, float dt, float* dw, float* db, const G* dout, const I* x,
                                     const T* w, const float* mean, const float* rstd, int N, int C,
                                     GradOut dx_out = GradOut::Add) {
        gpu::layernorm_backward_residual(dx, df, dt, dw, db, dout, x, w, mean, rstd, N, C, partial.data(), stream,
                                         dx_out);
    }
    void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int IC, int OC) {
        gpu::matmul_forward(*blas, out, inp, w, bias, N, IC, OC, stream);
    }
    // dinp is T, or float where it is the stream's gradient (a module without an input LayerNorm).
    template <class D>
    void matmul_backward(D* dinp, float* dw, float* dbias, const T* dout, const T* inp, const T* w, int N, int IC,
                         int OC, GradOut dinp_out = GradOut::Add) {
        gpu::matmul_backward(*blas, dinp, dw, dbias, dout, inp, w, N, IC, OC, partial.data(), stream, dinp_out);
    }
    // Attention saves the log-sum-exp of each (b, h, t) row, fp32 (attention.cuh).
    using AttentionSaved = float;
    static size_t attention_saved_size(int B, int Tn, int NH) { return gpu::attention_saved_size(B, Tn, NH); }
    void attention_forward(T* out, float* lse, const T* qkv, int B, int Tn, int C, int NH) {
        gpu::attention_forward(out, lse, qkv, B, Tn, C, NH, stream);
    }
    void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int B, int Tn, int C,
                            int NH) {
        gpu::attention_backward(dqkv, dout, qkv, out, lse, attention_delta.data(), B, Tn, C, NH, stream);
    }
    void matmul_gelu_forward(T* out, T* pre, const T* inp, const T* w, const T* bias, int N, int IC, int OC) {
        gpu::matmul_bias_gelu_forward(*blas, out, pre, inp, w, bias, N, IC, OC, stream);
    }
    void matmul_gelu_backward(T* dpre, float* dw, float* dbias, const T* dout, const T* inp, const T* w, const T* pre,
                              int N, int IC, int OC) {
        gpu::matmul_gelu_backward(*blas, dpre, dw, dbias, dout, inp, w, pre, N, IC, OC, partial.data(), stream);
    }
    void residual_forward(float* out, const float* x, const T* f, float dt, size_t n) {
        gpu::residual_forward(out, x, f, dt, n, stream);
    }
    // sum (N,C) = x + Δt·f, then out = LayerNorm(sum) with its mean and rstd, in one launch.
    template <class O>
    void residual_layernorm_forward(float* sum, O* out, float* mean, float* rstd, const float* x, const T* f, float dt,
                                    const T* w, const T* b, int N, int C) {
        gpu::residual_layernorm_forward(sum, out, mean, rstd, x, f, dt, w, b, N, C, stream);
    }
    void crossentropy_forward(float* losses, const T* logits, const int32_t* targets, int N, int V, int Vp) {
        gpu::crossentropy_forward(losses, logits, targets, N, V, Vp, stream);
    }
    void crossentropy_forward_backward(float* losses, T* logits, const int32_t* targets, float dloss, int N, int V,
                                       int Vp) {
        gpu::crossentropy_forward_backward(losses, logits, targets, dloss, N, V, Vp, stream);
    }

private:
    DeviceArray<float> attention_delta;  // (B,NH,T) Σ dout·out per row, for attention_backward
    gpu::TokenOrder token_order;        // the batch's positions sorted by token, for the wte gradient
    DeviceArray<float> partial;         // column-sum partials: MAX_ROW_CHUNKS·4C, or LayerNorm's if more
    DeviceArray<float> norm_partial;    // sum-of-squares partials
    DeviceArray<float> stats_scratch;   // for stream_statistics
    DeviceArray<unsigned char> blas_workspace;  // cuBLASLt's, for the fused products
};

template <typename T>
using CudaModel = Gpt2<CudaOps<T>>;

// The model on the GPU as a Backend for ./train and ./eval: CudaModel<T> plus AdamW moments.
template <typename T>
class CudaBackend : public Backend {
public:
    CudaBackend(const ModelConfig& cfg, int B, int T_, const std::string& device,
                std::shared_ptr<NcclComm> comm = nullptr)
        : model(cfg, B, T_), range{0, model.params.size()}, m(moment_buffer(range.size())), v(moment_buffer(range.size())),
          device(device),
          diag_scratch(scratch_buffer(std::max<size_t>(gpu::diagnostics_scratch(B, T_, cfg.NH), gpu::SUMSQ_MAX_BLOCKS))),
          comm(std::move(comm)) {
        model.ops.finish();
    }

    std::string name() const override {
        const char* precision = std::is_same<T, float>::value ? "fp32" : "bf16, fp32 master weights";
        return std::string("cuda (") + precision + ", " + device + ", " + RANK_COLLECTIVES + ")";
    }
    const ModelConfig& config() const override { return model.cfg; }

    float forward(const int32_t* inputs, const int32_t* targets) override { return model.forward(inputs, targets); }
    void forward_to_logits(const int32_t* inputs, const int32_t* targets) override {
        model.forward_to_logits(inputs, targets);
    }
    void zero_grad() override { model.ops.zero(model.grads); }
    float backward(float loss_weight) override { return model.backward(loss_weight); }
    double grad_norm() override { return model.grad_norm(); }

    // Every tensor of the optimiser range in one launch; m and v hold that range only.
    void update(const AdamWHyper& h, int t, double grad_scale) override {
        gpu::adamw_update(model.params.data(), model.weight_copy(0), model.grads.data(), m.data(), v.data(),
                          gpu::adamw_table(model.cfg), range.lo, range.hi, h, t, grad_scale, model.ops.stream);
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

    std::vector<StreamStats> stream_stats() override { return model.half_stream_stats(); }
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
                                                   model.cfg.C, model.cfg.NH, diag_scratch.data(), model.ops.stream));
        return out;
    }
    LogitStats logit_stats() override {
        return gpu::logit_statistics(model.logits_data(), model.N, model.cfg.V, model.cfg.Vp, diag_scratch.data(),
                                     model.ops.stream);
    }

    // The parameter gradients (num_parameters floats, file order); for the tests.
    void get_grads(float* out) { model.grads.download(out, model.ops.stream); }

    CudaModel<T> model;

private:
    Range range;              // the optimiser range (set_optimizer_range)
    DeviceArray<float> m, v;  // AdamW moments of that range, file order
    std::string device;       // the GPU's description
    DeviceArray<float> diag_scratch;  // the diagnostics: sums of squares, per-row maxima
    std::shared_ptr<NcclComm> comm;   // the ranks' communicator (make_cuda_comm); null for one rank

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
    DeviceArray<float> scratch_buffer(size_t n) {
        model.ops.memory_category(MemoryCategory::Scratch);
        return DeviceArray<float>(n);
    }

    // Σ x² and sqrt(mean x²) of n device elements.
    template <typename E>
    double sum_sq(const E* x, size_t n) {
        return gpu::sum_of_squares(x, n, diag_scratch.data(), model.ops.stream);
    }
    template <typename E>
    double rms(const E* x, size_t n) {
        return std::sqrt(sum_sq(x, n) / n);
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

#include "step_timing.cuh"  // needs CudaOps

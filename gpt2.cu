// gpt2.cu — the model on one GPU: CudaModel<T>, the model of gpt2.h on the CUDA ops of
// cuda_ops.cuh, and CudaBackend, which adds AdamW and serves ./train and ./eval through the
// Backend interface.
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
// the statistics it returns. Before any of it is allocated, -fused auto times the products that
// can be fused on buffers of its own, freed before the model is allocated (choose_cuda_fusion,
// time_fused_products in cuda_ops.cuh).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/nccl_comm.cuh"
#include "cuda_ops.cuh"
#include "gpt2.h"
#include "model.h"

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

    // fusion: the kinds of product its ops ask cuBLASLt for fused (make_cuda_backend decides).
    CudaBackend(const ModelConfig& cfg, int B, int T, const std::string& device, FusionChoice fusion = {},
                std::shared_ptr<NcclComm> comm = nullptr)
        : Model(cfg, B, T), range{0, params.size()}, m(moment_buffer(range.size())), v(moment_buffer(range.size())),
          device(device), fused_products(std::move(fusion)), comm(std::move(comm)) {
        ops.fused = fused_products.kinds;
        ops.finish();
    }

    std::string name() const override {
        const char* precision = std::is_same<Act, float>::value ? "fp32" : "bf16, fp32 master weights";
        return std::string("cuda (") + precision + ", " + device + ", " + RANK_COLLECTIVES + ")";
    }
    const ModelConfig& config() const override { return cfg; }
    const FusionChoice* fusion() const override { return &fused_products; }

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
    FusionChoice fused_products;  // which kinds of product run fused, and why
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
// built while counting (cuda/cuda_common.cuh), so no device is needed and none is touched.
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

std::vector<ProductTiming> time_cuda_fused_products(const ModelConfig& cfg, int B, int T, bool use_bf16) {
    return use_bf16 ? time_fused_products<bf16>(cfg, B, T) : time_fused_products<float>(cfg, B, T);
}

FusionChoice choose_cuda_fusion(const FusionRequest& request, const ModelConfig& cfg, int B, int T, bool use_bf16,
                                int gpu) {
    if (!request.timed) return given_fusion(request, use_bf16);
    select_cuda_device(gpu);
    return faster_products(time_cuda_fused_products(cfg, B, T, use_bf16));
}

std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& cfg, int B, int T, bool use_bf16, int gpu,
                                           std::shared_ptr<NcclComm> comm, FusionChoice fusion) {
    std::string device;
    if (!cuda_device_available(&device, gpu)) throw InputError("-device cuda: " + device);
    if (B <= 0 || T <= 0 || T > cfg.maxT)
        throw InputError("cuda backend: need B >= 1 and 1 <= T <= maxT = " + std::to_string(cfg.maxT));
    select_cuda_device(gpu);
    if (use_bf16) return std::make_unique<CudaBackend<bf16>>(cfg, B, T, device, std::move(fusion), std::move(comm));
    return std::make_unique<CudaBackend<float>>(cfg, B, T, device, std::move(fusion), std::move(comm));
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

#include "bench/step_timing.cuh"   // needs CudaOps
#include "bench/step_traffic.cuh"  // needs CudaOps

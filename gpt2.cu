// gpt2.cu — the model on one GPU: CudaBackend<T>, the model of gpt2.h on the CUDA ops of
// cuda_ops.cuh with AdamW added, which serves ./train and ./eval through the Backend interface.
//
// Its model is the same Gpt2 as CpuModel (gpt2_cpu.h): the same block, residual step and
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
// counts it without allocating, docs/cuda_memory.md):
//   params, grads, m, v     fp32, num_parameters floats each, in checkpoint order (model.h)
//   weights                 bf16 mode only: the bf16 copy of params
//   per block               the activations Gpt2 keeps (T; the stream fp32), LayerNorm mean/rstd and
//                           attention's log-sum-exp per row (fp32)
//   shared by all blocks    gradients of activations, attention's row sums, reduction scratch
// Everything runs in order on one CUDA stream; the host waits only for the loss, the norms and
// the statistics it returns. Before any of it is allocated, -fused auto times the products that
// can be fused on buffers of its own, freed before the model is allocated (choose_cuda_fusion and
// time_fused_products, below).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
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
#include "util/rng.h"

// The model on the GPU as a Backend for ./train and ./eval: Gpt2 on the CUDA ops, whose passes
// ./train calls (gpt2.h), plus AdamW moments, the copies in and out and the collectives. (The
// model's members are this->params and so on: a base that depends on a template's parameter is
// not searched for plain names.)
template <typename Act>
class CudaBackend final : public Gpt2<CudaOps<Act>, Backend> {
public:
    // fusion: the kinds of product its ops run fused (choose_cuda_fusion decides).
    CudaBackend(const ModelConfig& cfg, int B, int T, const std::string& device, FusionChoice fusion = {},
                std::shared_ptr<NcclComm> comm = nullptr)
        : Gpt2<CudaOps<Act>, Backend>(cfg, B, T), range{0, this->params.size()}, m(moment_buffer(range.size())),
          v(moment_buffer(range.size())), device(device), fused_products(std::move(fusion)), comm(std::move(comm)) {
        this->ops.fused = fused_products.kinds;
        this->ops.finish();
    }

    std::string name() const override {
        const char* precision = std::is_same<Act, float>::value ? "fp32" : "bf16, fp32 master weights";
        return std::string("cuda (") + precision + ", " + device + ", " + RANK_COLLECTIVES + ")";
    }
    const ModelConfig& config() const override { return this->cfg; }
    const FusionChoice* fusion() const override { return &fused_products; }

    // Every tensor of the optimiser range in one launch; m and v hold that range only.
    void update(const AdamWHyper& h, int t, double grad_scale) override {
        this->ops.adamw_update(this->params.data(), this->weight_copy(0), this->grads.data(), m.data(), v.data(),
                               range.lo, range.hi, h, t, grad_scale);
    }

    // Data parallelism (docs/distributed.md): over NCCL on the device
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
        nccl().sum(this->grads.data(), this->grads.size(), this->ops.stream);
    }
    void gather_params(ProcessGroup& group) override {
        if (group.size() == 1) return;
        nccl().all_gather(this->params.data(), this->params.size(), this->ops.stream);
        this->sync_weights();
    }
#else
    static constexpr const char* RANK_COLLECTIVES = "ranks through host memory";
    void sum_grads(ProcessGroup& group) override {
        if (group.size() == 1) return;
        std::vector<float> host(this->grads.size());
        this->grads.download(host.data(), this->ops.stream);
        group.sum(host.data(), host.size());
        this->grads.upload(host.data(), this->ops.stream);
    }
    void gather_params(ProcessGroup& group) override {
        if (group.size() == 1) return;
        std::vector<float> host(this->params.size());
        get_params(host.data());
        group.all_gather(host.data(), host.size());
        set_params(host.data());
    }
#endif

    void get_params(float* out) override { this->params.download(out, this->ops.stream); }
    void set_params(const float* in) override {
        this->params.upload(in, this->ops.stream);
        this->sync_weights();
    }
    void get_moments(float* m_out, float* v_out) override {
        m.download(m_out, this->ops.stream);
        v.download(v_out, this->ops.stream);
    }
    void set_moments(const float* m_in, const float* v_in) override {
        m.upload(m_in, this->ops.stream);
        v.upload(v_in, this->ops.stream);
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
        this->ops.memory_category(MemoryCategory::Parameters);
        return this->ops.template alloc<float>(n);
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

// ---------------------------------------------------------------------------------------------
// Fused or plain, timed on the card (-fused auto, cuda/fused_products.h). Every op with a product
// that can be fused runs at the shapes of the model's layers for micro-batches (B, T), with its
// kind fused and with it plain (the other kinds plain both times). The timing:
//   - warms the card up first: every op, fused and plain, runs untimed, again and again until
//     the card has been busy WARM_UP_MS (its clocks rise from idle; the first run of each kind
//     also sets cuBLASLt up for it, or finds it refused);
//   - times REPEATS runs of a candidate back to back between one pair of events, so that the
//     card's work, not the host's enqueue, fills the pair; a run's time is the pair's over
//     REPEATS;
//   - does so in ROUNDS rounds, fused and plain alternating (fused first in even rounds, plain
//     first in odd ones), so that neither always runs on a card warmer than the other's;
//   - gives each candidate the median of its rounds, and the product the spread of its rounds:
//     the larger of the two candidates' (largest − smallest), which faster_products asks fused
//     to beat.
// A kind cuBLASLt refuses, or cannot be asked for (GELU's auxiliary matrix needs a row stride 4C
// that is a multiple of 8), has no fused time (NaN). The buffers hold random values of a step's
// sizes (inputs and pre N(0, 1), weights and biases N(0, 0.02), the weight gradients 0), so that
// the tensor cores work, draw power and throttle as in training, and are freed on return: the
// backend times before it allocates the model, so the two never share the device's memory. They
// are 256-byte aligned, where the model's weights and biases lie at any offset: cuBLASLt may pick
// another algorithm for those. GELU's kinds are timed in bf16 only.

// `a` filled with values drawn from N(0, scale²).
template <typename T>
void fill_normal(DeviceArray<T>& a, float scale, Rng& rng, cudaStream_t stream) {
    std::vector<T> host(a.size());
    for (T& x : host) x = from_float<T>(scale * (float)rng.normal());
    a.upload(host.data(), stream);
}

template <typename Act>
std::vector<ProductTiming> time_fused_products(const ModelConfig& cfg, int B, int T) {
    constexpr int ROUNDS = 5, REPEATS = 8;
    constexpr float WARM_UP_MS = 50;
    CudaOps<Act> ops(cfg, B, T);
    const int N = B * T, C = cfg.C;
    DeviceArray<Act> in((size_t)N * 4 * C), out((size_t)N * 4 * C), pre((size_t)N * 4 * C);  // (N,4C) each
    DeviceArray<Act> w((size_t)4 * C * C), bias(4 * C);                                     // (4C,C), (4C)
    DeviceArray<float> dw((size_t)4 * C * C), dbias(4 * C);
    Rng rng(20251209);
    fill_normal(in, 1.0f, rng, ops.stream);
    fill_normal(pre, 1.0f, rng, ops.stream);
    fill_normal(w, 0.02f, rng, ops.stream);
    fill_normal(bias, 0.02f, rng, ops.stream);
    cudaCheck(cudaMemsetAsync(out.data(), 0, out.size() * sizeof(Act), ops.stream));
    for (DeviceArray<float>* a : {&dw, &dbias})
        cudaCheck(cudaMemsetAsync(a->data(), 0, a->size() * sizeof(float), ops.stream));
    cudaEvent_t start, end;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&end));

    // One product to time: layer `layer`'s op with the kind `kind` fused or plain.
    struct Candidate {
        Epilogue kind;
        const char* layer;
        std::function<void()> op;
        bool refused = false;  // cuBLASLt refused the kind, or cannot be asked for it
    };
    std::vector<Candidate> candidates;
    struct Layer {
        const char* name;
        int IC, OC;
    };
    const Layer qkv{"qkv", C, 3 * C}, attproj{"attproj", C, C}, fc{"fc", C, 4 * C}, fcproj{"fcproj", 4 * C, C};
    // fcproj's backward: dpre (N,4C) into out, dout (N,C) and inp (N,4C) both read from `in`.
    auto fcproj_backward = [&] {
        ops.matmul_gelu_backward(out.data(), dw.data(), dbias.data(), in.data(), in.data(), w.data(), pre.data(), N,
                                 fcproj.IC, fcproj.OC);
    };
    for (const Layer& l : {qkv, attproj, fcproj})
        candidates.push_back({Epilogue::Bias, l.name, [&, l] {
                                  ops.matmul_forward(out.data(), in.data(), w.data(), bias.data(), N, l.IC, l.OC);
                              }});
    if (gpu::gelu_epilogue_allowed<Act>()) {
        candidates.push_back({Epilogue::BiasGelu, fc.name, [&] {
                                  ops.matmul_gelu_forward(out.data(), pre.data(), in.data(), w.data(), bias.data(), N,
                                                          fc.IC, fc.OC);
                              }});
        candidates.push_back({Epilogue::GeluGrad, fcproj.name, fcproj_backward});
    }
    for (const Layer& l : {qkv, attproj, fc})
        candidates.push_back({Epilogue::BiasGrad, l.name, [&, l] {
                                  ops.matmul_backward(out.data(), dw.data(), dbias.data(), in.data(), pre.data(),
                                                      w.data(), N, l.IC, l.OC, GradOut::Write);
                              }});
    candidates.push_back({Epilogue::BiasGrad, fcproj.name, fcproj_backward});

    auto only = [](Epilogue e) {
        FusedKinds kinds = NO_KIND_FUSED;
        kinds[e] = true;
        return kinds;
    };
    // The card's time for `runs` runs of `op` with `kinds` fused, back to back, in ms.
    auto time_runs = [&](const FusedKinds& kinds, const std::function<void()>& op, int runs) {
        ops.fused = kinds;
        cudaCheck(cudaEventRecord(start, ops.stream));
        for (int r = 0; r < runs; r++) op();
        cudaCheck(cudaEventRecord(end, ops.stream));
        cudaCheck(cudaEventSynchronize(end));
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, start, end));
        return (double)ms;
    };
    // The warm-up; its first pass finds the kinds cuBLASLt refuses. (At most MAX_WARM_UP_PASSES
    // passes, should the events time nothing.)
    constexpr int MAX_WARM_UP_PASSES = 1000;
    double busy_ms = 0;
    for (int pass = 0; pass == 0 || (busy_ms < WARM_UP_MS && pass < MAX_WARM_UP_PASSES); pass++) {
        for (Candidate& c : candidates) {
            const bool needs_aux = c.kind == Epilogue::BiasGelu || c.kind == Epilogue::GeluGrad;
            const size_t refused_before = ops.blas->refused_kinds();
            busy_ms += time_runs(only(c.kind), c.op, 1);
            if (ops.blas->refused_kinds() > refused_before || (needs_aux && !gpu::aux_stride_allowed(4 * C)))
                c.refused = true;
            busy_ms += time_runs(NO_KIND_FUSED, c.op, 1);
        }
    }
    auto median = [](std::vector<double> x) {
        std::sort(x.begin(), x.end());
        return x[x.size() / 2];
    };
    auto range = [](const std::vector<double>& x) {
        const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
        return *hi - *lo;
    };
    std::vector<ProductTiming> timings;
    for (const Candidate& c : candidates) {
        std::vector<double> fused_ms, plain_ms;
        for (int round = 0; round < ROUNDS; round++)
            for (const bool fused : {round % 2 == 0, round % 2 != 0}) {
                if (fused && c.refused) continue;
                const double ms = time_runs(fused ? only(c.kind) : NO_KIND_FUSED, c.op, REPEATS) / REPEATS;
                (fused ? fused_ms : plain_ms).push_back(ms);
            }
        const double spread = std::max(range(plain_ms), c.refused ? 0.0 : range(fused_ms));
        timings.push_back({c.kind, c.layer, c.refused ? NAN : median(fused_ms), median(plain_ms), spread});
    }

    cudaEventDestroy(start);
    cudaEventDestroy(end);
    return timings;
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


// backend.h — Backend, the one interface between ./train, ./eval, the benchmarks and tests and a
// backend (CPU or CUDA), so the training loop is written once: the model's passes, its
// diagnostics and the rest of a training step (AdamW, the parameters in and out, data
// parallelism). A backend is the model itself, Gpt2<Ops, Backend> (gpt2.h) on its op set, whose
// methods are the passes declared here, plus what a backend adds: CpuBackend (gpt2_cpu.h) and
// CudaBackend (gpt2.cu). So ./train's model.backward(...) is Gpt2::backward, with no call between.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/fused_products.h"
#include "distributed/process_group.h"
#include "util/memory_plan.h"
#include "model.h"

// The output logits of one forward over N positions, only the V real tokens counted.
struct LogitStats {
    double logit_max = 0;   // the largest logit
    double log_z_mean = 0;  // mean over positions of log Σ_{v<V} exp(logit_v)
};

// What a `stats` record and ./eval report of the last forward of one micro-batch (docs/train.md
// §4, docs/experiments.md *Diagnostics*).
struct ForwardStats {
    // At the 2L + 1 half-block points of the residual stream: j = 0 after the embedding,
    // j = 2l + 1 after block l's attention step and j = 2l + 2 after its MLP step (the block
    // output X_{l+1}; the paper's per-layer X_i are the even j):
    std::vector<StreamStats> stream;  // hidden-state statistics (docs/statistics.md §1)
    std::vector<double> rms;          // sqrt(mean over n, c of X[n,c]²)
    // Per block l (L values):
    std::vector<double> attn_logit_max;  // the largest pre-softmax attention logit q·k/√hs over
                                         // the batch, the heads and the causal pairs t' ≤ t
    std::vector<double> mlp_hidden_rms;  // RMS of the MLP's hidden activation (the GELU output)
    std::vector<double> param_norm;      // the norm of the block's parameters
    LogitStats logits;                   // of the output logits
};

// What ./train, ./eval, the benchmarks and the tests call on a backend (CPU or CUDA), so the
// training loop is written once. A backend owns the model (parameters, their gradients, the
// activations of one micro-batch of fixed shape (B, T)) and the AdamW moments. The passes and
// the diagnostics are Gpt2's (gpt2.h), the same for every backend; the rest is the backend's.
class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;  // e.g. "cpu (fp32, 2 threads)"
    virtual const ModelConfig& config() const = 0;
    // CUDA: which kinds of matrix product run fused with their epilogue, and why (decided at
    // start-up, cuda/fused_products.h); null on the CPU, which fuses none.
    virtual const FusionChoice* fusion() const = 0;

    // ---- the passes of one micro-batch (Gpt2) ----
    // Forward pass of one micro-batch: inputs, targets (B·T token ids). Keeps what backward
    // needs and returns the mean cross-entropy over the B·T positions (evaluation: the logits
    // are kept).
    virtual double forward(const int32_t* inputs, const int32_t* targets) = 0;
    // The forward pass of a training step: as forward, but it stops at the logits; the loss is
    // computed by backward, in the same pass over the logits as its gradient.
    virtual void forward_to_logits(const int32_t* inputs, const int32_t* targets) = 0;
    // Sets every gradient to zero.
    virtual void zero_grad() = 0;
    // Backward pass of the last forward (either one): gradients of loss_weight · (mean loss) are
    // ADDED to the parameter gradients (loss_weight = 1 / micro-steps for gradient
    // accumulation). Returns the mean cross-entropy over the B·T positions.
    virtual double backward(double loss_weight) = 0;
    // Global L2 norm of all parameter gradients.
    virtual double grad_norm() = 0;
    // When on, backward also records ‖∂loss/∂X‖ (Frobenius, over the micro-batch) at the
    // 2L + 1 half-block points; off by default so training pays nothing for it.
    virtual void record_stream_grads(bool on) = 0;
    virtual std::vector<double> stream_grad_norms() const = 0;

    // ---- the diagnostics (docs/experiments.md, *Diagnostics*; Gpt2) ----
    // All of a `stats` record of the last forward; call it before backward, which overwrites
    // the logits.
    virtual ForwardStats forward_stats() = 0;
    // Per block, the norm of the gradient of its W_fcproj (the MLP's output projection weight)
    // as accumulated since zero_grad.
    virtual std::vector<double> fcproj_grad_norms() = 0;

    // ---- the rest of a training step (the backend's own) ----
    // AdamW update at step t (1-based), gradients multiplied by grad_scale first (clipping);
    // weight decay on the 2-D tensors only (docs/model.md §5).
    virtual void update(const AdamWHyper& h, int t, double grad_scale) = 0;

    // Copies between the backend and host fp32 buffers in file order: the parameters
    // (num_parameters floats) and the moments of the optimiser range (its size() floats each).
    virtual void get_params(float* out) = 0;
    virtual void set_params(const float* in) = 0;
    virtual void get_moments(float* m, float* v) = 0;
    virtual void set_moments(const float* m, const float* v) = 0;

    // Data parallelism (docs/distributed.md).
    // The range of the flat parameter array (file order) whose AdamW moments this backend keeps
    // and whose parameters update() changes (ZeRO-1: each rank its own shard); the whole array
    // unless set. Setting it zeroes the moments.
    virtual void set_optimizer_range(Range range) = 0;
    // Replaces every parameter gradient by its sum over the ranks of `group`.
    virtual void sum_grads(ProcessGroup& group) = 0;
    // After update(): every rank's optimiser range of the parameters to every rank.
    virtual void gather_params(ProcessGroup& group) = 0;
};

// Calls f(i, offset, n) for every parameter tensor i that overlaps `range`, with the part
// [offset, offset + n) of the flat array that lies inside it (AdamW over an optimiser range
// keeps the weight decay of each tensor).
template <typename F>
void for_each_tensor_part(const ModelConfig& cfg, Range range, F f) {
    const auto sizes = param_sizes(cfg);
    const auto offsets = param_offsets(cfg);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        const size_t begin = std::max(offsets[i], range.lo), end = std::min(offsets[i] + sizes[i], range.hi);
        if (begin < end) f(i, begin, end - begin);
    }
}

// The CUDA backend (gpt2.cu), linked in when the Makefile finds nvcc (USE_CUDA defined).
// cuda_device_available: true when the device local rank `gpu` uses (visible GPU number `gpu`,
// or the only one visible) exists and is usable (any runtime error, e.g. no driver, counts as
// none); fills `description` with its name or what is missing. make_cuda_backend: the model on
// that device; bf16 = bf16 weights/activations with fp32 master weights, else full fp32; under
// mpirun its collectives run over `comm` (make_cuda_comm); its ops fuse the kinds of product
// `fusion` names (cuda/fused_products.h; every kind unless told otherwise).
class NcclComm;  // cuda/nccl_comm.cuh
bool cuda_device_available(std::string* description, int gpu = 0);
std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& cfg, int B, int T, bool bf16, int gpu = 0,
                                           std::shared_ptr<NcclComm> comm = nullptr, FusionChoice fusion = {});
// The kinds of product a CUDA backend for micro-batches (B, T) on GPU `gpu` fuses: as `request`
// gives them, or timed on the device first (-fused auto), before the backend is made.
FusionChoice choose_cuda_fusion(const FusionRequest& request, const ModelConfig& cfg, int B, int T, bool bf16,
                                int gpu = 0);
// Each kind of product that can be fused, timed fused and plain on the current device at the
// shapes of the model's layers for micro-batches (B, T) (-fused auto; bench_gpu's table).
std::vector<ProductTiming> time_cuda_fused_products(const ModelConfig& cfg, int B, int T, bool bf16);
// The ranks' NCCL communicator on GPU `gpu`, warmed up with one of each collective the backend
// runs on `num_parameters` floats, so that the device memory NCCL takes (it connects its peers
// at the first collective) is already in use when the batch is fitted (docs/cuda_memory.md).
// Collective over `group`; null for one rank, and in a build without NCCL. timeout_s: see
// nccl_timeout_seconds (distributed/process_group.h).
std::shared_ptr<NcclComm> make_cuda_comm(ProcessGroup& group, int gpu, size_t num_parameters, double timeout_s);
// The device memory make_cuda_backend would allocate, counted without a device (docs/cuda_memory.md).
MemoryPlan cuda_memory_plan(const ModelConfig& cfg, int B, int T, bool bf16);
// Free bytes on CUDA device `gpu`.
uint64_t cuda_free_memory(int gpu = 0);

// bench/traffic.h — what one kernel launch or cuBLAS call of the CUDA backend moves and computes
// (docs/cost_model.md, "The traffic model"); bench/cost_model.h says how long that takes on a card.
//
// Every op of the CUDA op set (cuda_ops.cuh) has a `*_traffic` function in bench/kernel_costs.h (one
// section per kernel file) that returns one Traffic per launch the op makes, computed from the same
// sizes.
// The emulated build counts the distinct global-memory bytes each launch really reads and
// writes (test/traffic_test.cu), so the declarations cannot drift from the kernels.
// `./bench_gpu -model` adds them up over the launches of one training step. Plain C++: no CUDA
// needed to include it (bench/kernel_costs.h, which needs the kernel files, includes it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cuda/fused_products.h"
#include "model.h"
#include "util/memory_plan.h"

// What one block of a kernel holds on an SM, for its occupancy: its threads (checked against
// the launch) and the registers and shared bytes ptxas reports for sm_90 (the dynamic shared
// bytes added); test/traffic_test.cu checks each declaration.
struct KernelResources {
    int threads_per_block = 0;
    int registers_per_thread = 0;
    int shared_bytes_per_block = 0;  // static and dynamic
};

// One kernel launch, cuBLAS call, memset or device copy. warp_instructions, shared_wavefronts,
// resources and mma_sync are declared by every kernel of the project (bench/cost_model.h counts its
// issue); 0 for cuBLAS, memset and copies. round_trips is declared by the kernels that walk tiles
// through shared memory (attention_mma.cuh), 0 elsewhere.
struct Traffic {
    const char* kernel = "";  // the kernel (or "gemm", "memset", "copy")
    double bytes_read = 0;    // distinct bytes of device memory read
    double bytes_written = 0; // distinct bytes of device memory written
    double flops = 0;         // floating-point operations on the CUDA cores
    double matmul_flops = 0;  // multiply-adds ×2 of a matrix product (tensor cores in bf16)
    double warp_instructions = 0;  // warp instructions issued
    double shared_wavefronts = 0;  // shared-memory wavefronts, bank conflicts included
    KernelResources resources = {};  // of one block
    bool mma_sync = false;         // matmul_flops run as the kernel's own mma.sync, not cuBLAS
    // Round trips to device memory that a block waits for at a barrier, summed over the blocks:
    // the loads before a __syncthreads() that nothing else of the block overlaps (a tile read
    // and stored, then the barrier; or cp.async copies waited for right after they started).
    // Copies started a tile ahead, with the block's work on the current tile between, are not
    // waited for. The emulator counts them (test/simt/counting.h, round_trips).
    double round_trips = 0;
};
using Launches = std::vector<Traffic>;

// A kernel's warp instructions as the cost model counts them, from the kernel's structure: a
// warp takes `rows` rows (or other units of its work), each a loop of `trips` trips of
// `per_trip` instructions (every pass of the loop over the row together) and `per_row` around
// it, and does `once` more (its indices, its reductions, its results). test/traffic_test.cu
// checks per_trip against the loops of the kernel's sm_90 PTX and the rest against the PTX
// outside its loops.
struct WarpWork {
    double per_trip = 0, per_row = 0, once = 0;
    double instructions(double warps, double rows, double trips) const {
        return warps * (rows * (trips * per_trip + per_row) + once);
    }
};

// `t` with the issue the cost model counts declared: warp instructions, shared-memory wavefronts
// and the resources of one block.
inline Traffic with_issue(Traffic t, double warp_instructions, double shared_wavefronts, KernelResources resources) {
    t.warp_instructions = warp_instructions;
    t.shared_wavefronts = shared_wavefronts;
    t.resources = resources;
    return t;
}

// Appends the launches of `more` to `all`.
inline void append(Launches& all, const Launches& more) { all.insert(all.end(), more.begin(), more.end()); }

// One op of a training step as ./bench_gpu -model groups them ("qkv matmul fwd", "adamw", ...),
// with every launch it made.
struct OpTraffic {
    std::string op;
    Launches launches;
};

// The launches of one training step (zero_grad, forward, backward, gradient norm, AdamW) of
// the CUDA model at micro-batch (B, T) on the batch `tokens` (B·T host tokens: how they repeat
// decides the embedding backward's traffic), recorded by running the model's own forward and
// backward on ops that only note what each op would launch (bench/step_traffic.cuh), with the
// kinds of product `fused` fused (cuda/fused_products.h). Needs no GPU.
std::vector<OpTraffic> cuda_step_traffic(const ModelConfig& cfg, int B, int T, bool bf16, const int32_t* tokens,
                                         const FusedKinds& fused);

// The measured milliseconds of each op (the names of cuda_step_traffic) in one such step on the
// GPU on the batch `tokens` (B·T + 1 host tokens: inputs, and targets one further), averaged
// over `steps` steps after one warm-up, from CUDA events around every op (bench/step_timing.cuh),
// with the kinds of product `fused` fused. Needs a device.
std::map<std::string, double> cuda_step_op_ms(const ModelConfig& cfg, int B, int T, bool bf16, int steps,
                                              const int32_t* tokens, const FusedKinds& fused);

// The device memory that per-op timing allocates (bench/step_timing.cuh: its own model and AdamW
// moments), counted without a device as cuda_memory_plan counts the backend's (backend.h).
MemoryPlan cuda_step_timing_plan(const ModelConfig& cfg, int B, int T, bool bf16);

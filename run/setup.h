// run/setup.h — start-up shared by ./train and ./eval: choosing the backend (-device) and printing
// what a run uses.
#pragma once
#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "dataloader.h"
#include "util/errors.h"
#include "gpt2_cpu.h"
#include "util/json.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

// Makes this thread, and the OpenMP threads it starts later, treat subnormal floats (below
// about 1.2e-38 in magnitude) as zero on x86 (the FTZ and DAZ bits of MXCSR). A network whose
// activations or gradients vanish (a collapsed or diverging run) otherwise spends most of its
// time in slow subnormal arithmetic: about 10x slower steps, measured on the CPU reference
// (docs/cpu_speed.md). Call it before the first parallel region.
inline void flush_subnormals_to_zero() {
#if defined(__SSE__)
    _mm_setcsr(_mm_getcsr() | 0x8040);
#endif
}

// -threads N: N OpenMP threads for the CPU model (0: the default, all cores). More threads than
// the machine has cores only wait for each other (a step 100x slower, measured on 2 cores with
// -threads 999): allowed, with one line saying so.
inline void set_threads(int threads) {
    if (threads <= 0) return;
    omp_set_num_threads(threads);
    if (threads > omp_get_num_procs())
        std::printf("warning: -threads %d is more than the %d cores here; the extra threads only wait (steps are "
                    "slower, not faster)\n", threads, omp_get_num_procs());
}

// True when this binary has the CUDA backend and a device is present; fills `description`.
inline bool cuda_present(std::string* description) {
#ifdef USE_CUDA
    return cuda_device_available(description);
#else
    *description = "this build has no CUDA backend (make found no nvcc or no CUDA runtime library)";
    return false;
#endif
}

// Resolves -device auto|cpu|cuda to "cpu" or "cuda". auto picks CUDA when a device is present
// and otherwise says on one line that it falls back to the CPU; cuda without a device is bad input.
inline std::string resolve_device(const std::string& device) {
    if (device == "cpu") return "cpu";
    std::string description;
    const bool present = cuda_present(&description);
    if (device == "cuda" && !present) throw InputError("flag -device: cuda requested but no CUDA device: " + description);
    if (present) return "cuda";
    std::printf("device: no GPU found, running on the CPU (%s)\n", description.c_str());
    return "cpu";
}

// Refuses -precision bf16 given for a run on the CPU, which computes in fp32 only (as llm.c's
// CPU trainer does): a precision asked for and not used would go unnoticed.
inline void check_precision(const std::string& device, const std::string& precision, bool given) {
    if (device == "cpu" && given && precision == "bf16")
        throw InputError("flag -precision: bf16 is the CUDA backend's mixed precision, but this run is on the CPU, "
                         "which computes in fp32 (leave -precision out, give fp32, or -device cuda)");
}

// Refuses -fused all or none given for a run on the CPU, which has no fused products to choose
// among; -fused auto, the default, is accepted there (nothing to fuse).
inline void check_fused(const std::string& device, const std::string& fused, bool given) {
    if (device == "cpu" && given && fused != "auto")
        throw InputError("flag -fused: " + fused + " chooses how the CUDA backend runs its matrix products, but this "
                         "run is on the CPU (leave -fused out or give auto, or give -device cuda)");
}

// Builds the backend for a resolved device ("cpu" or "cuda"); precision is "bf16" or "fp32"
// (the CPU always computes in fp32); cpu_ops picks the CPU's op set, "fast" or "reference"
// (gpt2_cpu.h); fusion, the CUDA products fused (cuda/fused_products.h); gpu: which of the
// visible GPUs (the local rank under mpirun); comm: the CUDA ranks' communicator
// (make_device_comm).
inline std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& precision,
                                             const std::string& cpu_ops, const FusionRequest& fusion,
                                             const ModelConfig& cfg, int B, int T, int gpu = 0,
                                             std::shared_ptr<NcclComm> comm = nullptr) {
#ifdef USE_CUDA
    if (device == "cuda") {
        const bool bf16 = precision == "bf16";
        return make_cuda_backend(cfg, B, T, bf16, gpu, std::move(comm), choose_cuda_fusion(fusion, cfg, B, T, bf16, gpu));
    }
#else
    (void)fusion;
#endif
    if (cpu_ops == "reference") return std::make_unique<CpuBackend<ReferenceOps<float>>>(cfg, B, T);
    return std::make_unique<CpuBackend<>>(cfg, B, T);
}

// On a resolved device "cuda" with several ranks, their NCCL communicator (make_cuda_comm),
// made before the batch is fitted so that its device memory is counted as used; else null.
// Collective: every rank calls it at the same point, after they agreed on the start. A bad
// GPT2_NCCL_TIMEOUT on any rank is refused on every rank alike.
inline std::shared_ptr<NcclComm> make_device_comm(const std::string& device, ProcessGroup& group,
                                                  size_t num_parameters, int gpu) {
#ifdef USE_CUDA
    if (device == "cuda" && group.size() > 1) {
        std::string error;
        double timeout_s = 0;
        try {
            timeout_s = nccl_timeout_seconds();
        } catch (const InputError& e) {
            error = e.what();
        }
        group.agree(error);
        return make_cuda_comm(group, gpu, num_parameters, timeout_s);
    }
#endif
    return nullptr;
}

// The micro-batch on a resolved device: on CUDA, B (`given` by -B, or the default so far) is
// kept, halved or refused by the device memory plan against the free device memory
// (fit_batch, util/memory_plan.h), before anything is allocated; elsewhere B as it is. gpu: as for
// make_backend.
inline int fit_device_batch(const std::string& device, const std::string& precision, const ModelConfig& cfg, int B,
                            bool given, int T, int gpu = 0) {
#ifdef USE_CUDA
    if (device == "cuda")
        return fit_batch(B, given, cuda_free_memory(gpu),
                         [&](int b) { return cuda_memory_plan(cfg, b, T, precision == "bf16").total(); });
#endif
    return B;
}

// A human-readable parameter count, e.g. "124.4M".
inline std::string format_count(size_t n) {
    char buf[32];
    if (n >= 1000000) std::snprintf(buf, sizeof buf, "%.1fM", n / 1e6);
    else if (n >= 1000) std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
    else std::snprintf(buf, sizeof buf, "%zu", n);
    return buf;
}

// One line describing the model: sizes, placement and Δt.
inline void print_model(const ModelConfig& m, const std::string& origin) {
    std::printf("model: %s, %s parameters (L=%d NH=%d C=%d maxT=%d V=%d Vp=%d), placement %s-LN, dt %g\n",
                origin.c_str(), format_count(num_parameters(m)).c_str(), m.L, m.NH, m.C, m.maxT, m.V, m.Vp,
                placement_name(m.placement), m.dt);
}

// The model's description, the members config.json and eval -json give it: placement, dt, L,
// NH, C, V, Vp, maxT and the parameter count.
inline Json model_json(const ModelConfig& m) {
    Json j = Json::object();
    j.set("placement", Json::string(placement_name(m.placement)));
    j.set("dt", Json::number(json_float(m.dt)));
    j.set("L", Json::integer(m.L));
    j.set("NH", Json::integer(m.NH));
    j.set("C", Json::integer(m.C));
    j.set("V", Json::integer(m.V));
    j.set("Vp", Json::integer(m.Vp));
    j.set("maxT", Json::integer(m.maxT));
    j.set("parameters", Json::number(std::to_string(num_parameters(m))));
    return j;
}

// The micro-batch when -B is not given: `preferred`, halved while one window of B*T+1 tokens
// does not fit in the longest shard of each of `patterns` (./train: the training data and, with
// evaluation on, the validation data; ./eval: the validation data). The bundled validation
// shard's 30,132 tokens take B = 16 at T = 1024, not the GPU default 32. Says so when it halves.
inline int default_batch(int preferred, int T, const std::vector<std::string>& patterns) {
    uint64_t room = UINT64_MAX;
    for (const std::string& p : patterns) room = std::min(room, DataLoader::longest_shard_tokens(p));
    if (room == 0) return preferred;  // no readable shard: the loader will say what is wrong
    int B = preferred;
    while (B > 1 && uint64_t(B) * T + 1 > room) B /= 2;
    if (B != preferred)
        std::printf("batch: default B=%d lowered to %d so that one batch of B*T+1 tokens fits in the data's shards\n",
                    preferred, B);
    return B;
}

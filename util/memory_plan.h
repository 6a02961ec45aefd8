// util/memory_plan.h — device memory by category, and the micro-batch that fits (docs/cuda_memory.md).
//
// The model (gpt2.h) names the category of every buffer it allocates; the CUDA backend can
// build itself in a counting mode that adds up the bytes of each category instead of
// allocating them (cuda_memory_plan in gpt2.cu), so the plan is computed by the code that
// allocates, without a GPU. ./bench_gpu -plan prints it; ./train -device cuda picks or checks
// its micro-batch B with it (fit_batch below).
#pragma once
#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "util/errors.h"

enum class MemoryCategory {
    Parameters,      // master weights, their gradients, AdamW moments, the rounded weight copy
    Activations,     // what the forward pass keeps for the backward, attention's excepted
    AttentionState,  // what attention keeps for its backward
    Logits,          // the logits (their gradient in place) and per-position losses
    Scratch,         // gradients of activations and the kernels' working memory, shared by all layers
};
constexpr int NUM_MEMORY_CATEGORIES = 5;

inline const char* memory_category_name(MemoryCategory c) {
    static const char* names[NUM_MEMORY_CATEGORIES] = {"parameters and optimiser state", "activations",
                                                       "attention statistics", "logits", "scratch"};
    return names[(int)c];
}

// Bytes per category.
struct MemoryPlan {
    std::array<uint64_t, NUM_MEMORY_CATEGORIES> bytes{};

    void add(MemoryCategory c, uint64_t n) { bytes[(int)c] += n; }
    uint64_t of(MemoryCategory c) const { return bytes[(int)c]; }
    uint64_t total() const {
        uint64_t sum = 0;
        for (uint64_t b : bytes) sum += b;
        return sum;
    }
};

inline double gib(uint64_t bytes) { return bytes / (double)(uint64_t(1) << 30); }

// Device memory left beside the plan for what the program does not allocate itself: cuBLAS's
// workspace and the allocator's rounding.
constexpr uint64_t DEVICE_MEMORY_RESERVE = uint64_t(1) << 30;

// The bytes of `available` a plan may take: all but DEVICE_MEMORY_RESERVE.
inline uint64_t room_beside_reserve(uint64_t available) {
    return available > DEVICE_MEMORY_RESERVE ? available - DEVICE_MEMORY_RESERVE : 0;
}

// The largest micro-batch B (up to 2^16) whose plan, `planned(B)`, fits `available` free bytes
// with DEVICE_MEMORY_RESERVE kept free, as fit_batch keeps it; 0 when not even B = 1 fits. The
// plan grows with B, so a doubling then a bisection finds it.
inline int largest_fitting_batch(uint64_t available, const std::function<uint64_t(int)>& planned) {
    const uint64_t room = room_beside_reserve(available);
    auto fits = [&](int B) { return planned(B) <= room; };
    int lo = 0, hi = 1;  // fits(lo) (or lo = 0), !fits(hi)
    while (hi < (1 << 16) && fits(hi)) lo = hi, hi *= 2;
    if (fits(hi)) return hi;
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

// The micro-batch for a device with `available` free bytes, given the plan's total for a batch
// B (`planned`). A B the user gave (`given`) is kept if it fits and refused (InputError) if not;
// otherwise `preferred` is halved until it fits, saying so in one line. Refuses too when even
// B = 1 does not fit.
inline int fit_batch(int preferred, bool given, uint64_t available, const std::function<uint64_t(int)>& planned) {
    const uint64_t room = room_beside_reserve(available);
    auto need = [&](int B) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.2f GiB", gib(planned(B)));
        return std::string(buf);
    };
    char have[64];
    std::snprintf(have, sizeof have, "%.2f GiB", gib(room));
    if (given) {
        if (planned(preferred) <= room) return preferred;
        int largest = preferred;
        while (largest > 1 && planned(largest) > room) largest /= 2;
        throw InputError("flag -B: B=" + std::to_string(preferred) + " needs " + need(preferred) +
                         " of device memory but " + have + " is free" +
                         (planned(largest) <= room ? " (B=" + std::to_string(largest) + " fits)" : ""));
    }
    int B = preferred;
    while (B > 1 && planned(B) > room) B /= 2;
    if (planned(B) > room)
        throw InputError("device memory: the model needs " + need(1) + " at B=1 but " + have + " is free");
    if (B != preferred)
        std::printf("batch: default B=%d lowered to %d so that the planned %s fit the %s of free device memory\n",
                    preferred, B, need(B).c_str(), have);
    return B;
}

// traffic.h — the cost model of the CUDA backend (docs/cuda.md, "The traffic model"): what one
// kernel launch or cuBLAS call moves and computes, and how long that takes on an H200.
//
// Every launcher of the .cuh files has a `*_traffic` function beside it that returns one
// Traffic per launch it makes, computed from the same sizes. The emulated build counts the
// distinct global-memory bytes each launch really reads and writes (test/traffic_test.cu), so
// the declarations cannot drift from the kernels. `./bench_gpu -model` adds them up over the
// launches of one training step. Plain C++: no CUDA needed to include it.
#pragma once
#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "model.h"

// One kernel launch, cuBLAS call, memset or device copy.
struct Traffic {
    const char* kernel = "";  // the kernel (or "gemm", "memset", "copy")
    double bytes_read = 0;    // distinct bytes of device memory read
    double bytes_written = 0; // distinct bytes of device memory written
    double flops = 0;         // floating-point operations on the CUDA cores
    double matmul_flops = 0;  // multiply-adds ×2 of a matrix product (tensor cores in bf16)
};
using Launches = std::vector<Traffic>;

// Appends the launches of `more` to `all`.
inline void append(Launches& all, const Launches& more) { all.insert(all.end(), more.begin(), more.end()); }

// The H200 (SXM) as the model sees it: peaks from the data sheet and the fraction of each that
// a well-written kernel reaches (docs/cuda.md lists the reasons for each number).
struct DeviceModel {
    double bandwidth = 4.8e12;             // HBM3e, bytes/s
    double bf16_matmul_flops = 989e12;     // dense bf16 tensor cores, FLOP/s
    double fp32_flops = 67e12;             // fp32 on the CUDA cores (also fp32 matmuls: no TF32)
    double bandwidth_fraction = 0.8;
    double matmul_fraction = 0.7;
    double fp32_fraction = 0.5;
    double launch_floor_s = 2e-6;          // the shortest a launch takes, however little it does
};

// Modelled seconds of one launch: a roofline, the slower of moving its bytes and doing its
// FLOPs, and never under the launch floor. `bf16` says whether matrix products run on the
// tensor cores (bf16 operands) or on the CUDA cores (fp32 operands).
inline double modelled_seconds(const Traffic& t, bool bf16, const DeviceModel& d = DeviceModel{}) {
    const double memory = (t.bytes_read + t.bytes_written) / (d.bandwidth * d.bandwidth_fraction);
    const double matmul_rate = bf16 ? d.bf16_matmul_flops * d.matmul_fraction : d.fp32_flops * d.fp32_fraction;
    const double compute = t.matmul_flops / matmul_rate + t.flops / (d.fp32_flops * d.fp32_fraction);
    return std::max({memory, compute, d.launch_floor_s});
}

// One op of a training step as ./bench_gpu -model groups them ("qkv matmul fwd", "adamw", ...),
// with every launch it made.
struct OpTraffic {
    std::string op;
    Launches launches;
};

// The launches of one training step (zero_grad, forward, backward, gradient norm, AdamW) of
// the CUDA model at micro-batch (B, T), recorded by running the model's own forward and
// backward on ops that only note what each launcher would do (gpt2.cu). Needs no GPU.
std::vector<OpTraffic> cuda_step_traffic(const ModelConfig& cfg, int B, int T, bool bf16);

// The measured milliseconds of each op (the names of cuda_step_traffic) in one such step on the
// GPU, averaged over `steps` steps after one warm-up, from CUDA events around every op
// (step_timing.cuh). Needs a device.
std::map<std::string, double> cuda_step_op_ms(const ModelConfig& cfg, int B, int T, bool bf16, int steps);

// bench/cost_model.h — how long one kernel launch takes on a card, as `./bench_gpu -model` sees it
// (docs/cost_model.md, "The cost model" and "The cards"): an H200 SXM unless told another, from
// the card's figures (KNOWN_CARDS below) and, on a device, the properties it reports. A launch's Traffic (bench/traffic.h), as the kernel's
// declaration in bench/kernel_costs.h gives it, holds what it moves and computes and, where the kernel
// declares them, the warp instructions it issues, the shared-memory wavefronts it takes and the
// resources of one block; the modelled time is the
// largest of
//
//   memory    bytes / achievable bandwidth                                  (roofline)
//   compute   matrix-product FLOPs / tensor rate + other FLOPs / fp32 rate  (roofline)
//   issue     warp instructions / (SMs · 4 schedulers · clock · issue efficiency)
//   shared    shared-memory wavefronts / (SMs · clock)    (one 128-byte wavefront per cycle)
//   latency   (a block's own issue cycles + round trips · memory latency), over the blocks,
//             / (SMs · resident blocks per SM · clock)
//
// and never below a launch's floor. Issue efficiency is what occupancy allows: a scheduler
// keeps issuing every cycle only with WARPS_FOR_FULL_ISSUE warps to choose from, and issues
// proportionally less with fewer; the resident warps follow from ptxas's registers and shared
// memory per block. The latency term is for kernels whose blocks wait at barriers for device
// memory (Traffic::round_trips): each resident block is a chain of its own instructions, issued
// at the rate its warps alone get, and its waits of MEMORY_LATENCY_CYCLES, and an SM runs as many
// such chains side by side as it holds blocks. Other blocks hide a block's waits only where the
// SM has warps to spare beyond full issue. Plain C++: no CUDA needed to include it.
#pragma once
#include <algorithm>
#include <string>

#include "bench/traffic.h"

// A card as the model sees it: peaks from the data sheet, the fraction of each that a
// well-written kernel reaches, and the SM resources of compute capability 9.0 (CUDA C++
// Programming Guide, "Technical Specifications per Compute Capability"). The defaults are the
// H200 (SXM)'s; device_model() below gives another card's.
struct DeviceModel {
    std::string card = "H200";          // the name -model's heading gives it
    double bandwidth = 4.8e12;          // HBM3e, bytes/s
    double bf16_matmul_flops = 989e12;  // dense bf16 tensor cores, FLOP/s
    double fp32_flops = 67e12;          // fp32 on the CUDA cores (also fp32 matmuls: no TF32)
    double bandwidth_fraction = 0.8;
    double matmul_fraction = 0.7;       // cuBLAS's products (wgmma)
    // mma.sync, the warp-level instruction of the project's own kernels, reaches about 2/3 of
    // Hopper's tensor peak (the rest needs wgmma: Shah et al. 2024, FlashAttention-3).
    double mma_sync_fraction = 2.0 / 3.0;
    double fp32_fraction = 0.5;
    double launch_floor_s = 2e-6;       // the shortest a launch takes, however little it does
    int sms = 132;
    double clock_hz = 1.98e9;           // boost clock
    int schedulers_per_sm = 4;          // one warp instruction per scheduler per cycle
    int registers_per_sm = 65536;
    int register_granule = 8;           // registers per thread are allocated in multiples of 8
    int shared_per_sm = 228 * 1024;     // bytes, of which 1 KiB per resident block is reserved
    int shared_reserved_per_block = 1024;
    int max_warps_per_sm = 64;
    int max_blocks_per_sm = 32;
    double warps_for_full_issue = 4;    // per scheduler (see the top of this file)
    // A load from device memory until its data can be used (HBM, through L2): about 800 cycles,
    // the middle of the 700–1000 estimated for a tile's global → register → shared path.
    double memory_latency_cycles = 800;
};

// What a device cannot say of itself, for the cards the model knows, keyed by the name the device
// reports (cudaGetDeviceProperties): the data sheet's memory bandwidth and dense bf16 tensor and
// fp32 peaks; and, for modelling the card without one (bench_gpu -model -card), its SMs and boost
// clock. Each entry's comment says where its figures come from.
struct CardFigures {
    const char* card;         // the model's name for it, and -card's
    const char* device_name;  // as the device reports it
    double bandwidth, bf16_matmul_flops, fp32_flops;
    int sms;
    double clock_hz;
};

inline constexpr CardFigures KNOWN_CARDS[] = {
    // H100 SXM5 80 GB (NVIDIA H100 Tensor Core GPU data sheet): HBM3 at 3.35 TB/s, 989 TFLOP/s
    // dense bf16 (1,979 with sparsity), 67 TFLOP/s fp32; 132 SMs, as a lent one reported, at
    // the 1.98 GHz boost clock of the GH100 chip it shares with the H200. Measured on that lent
    // one (PyTorch): about 3.0 TB/s for a device-to-device copy (0.90 of the data sheet's
    // bandwidth) and 798 TFLOP/s for an 8192×8192×8192 bf16 product (0.81 of the peak).
    {"H100 80GB HBM3", "NVIDIA H100 80GB HBM3", 3.35e12, 989e12, 67e12, 132, 1.98e9},
    // H200 SXM 141 GB (NVIDIA H200 Tensor Core GPU data sheet): HBM3e at 4.8 TB/s, the same
    // tensor and fp32 peaks; SMs and clock the model's defaults (DeviceModel above).
    {"H200", "NVIDIA H200", 4.8e12, 989e12, 67e12, 132, 1.98e9},
};

// The card called `name` (its model name, its device name, or "H100" for the H100 80GB HBM3), or
// null. A device of another name (an H100 PCIe, an H200 NVL: other figures) is none of these.
inline const CardFigures* card_named(const std::string& name) {
    for (const CardFigures& c : KNOWN_CARDS)
        if (name == c.card || name == c.device_name) return &c;
    return name == "H100" ? &KNOWN_CARDS[0] : nullptr;
}

// The cards card_named knows, for a message: "H100 80GB HBM3 (H100), H200".
inline std::string known_card_names() {
    return std::string(KNOWN_CARDS[0].card) + " (H100), " + KNOWN_CARDS[1].card;
}

// What a device reports of itself that the model uses (bench_gpu reads it from
// cudaGetDeviceProperties and the clock attribute): its SMs, clock and what one SM holds.
struct DeviceProperties {
    std::string name;
    int sms = 0;
    double clock_hz = 0;
    int registers_per_sm = 0, shared_per_sm = 0, shared_reserved_per_block = 0, max_warps_per_sm = 0,
        max_blocks_per_sm = 0;
};

// The model of `card` as its figures give it (SMs and clock the data sheet's).
inline DeviceModel device_model(const CardFigures& card) {
    DeviceModel d;
    d.card = card.card;
    d.bandwidth = card.bandwidth;
    d.bf16_matmul_flops = card.bf16_matmul_flops;
    d.fp32_flops = card.fp32_flops;
    d.sms = card.sms;
    d.clock_hz = card.clock_hz;
    return d;
}

// The model of the device `p`, a `card`: the SMs, clock and SM resources the device reports, and
// the card's tensor and fp32 peaks scaled to them (a peak is SMs × clock × an SM's work per
// cycle); the memory bandwidth is the card's.
inline DeviceModel device_model(const CardFigures& card, const DeviceProperties& p) {
    DeviceModel d = device_model(card);
    const double scale = (p.sms * p.clock_hz) / (card.sms * card.clock_hz);
    d.card = p.name;
    d.bf16_matmul_flops *= scale;
    d.fp32_flops *= scale;
    d.sms = p.sms;
    d.clock_hz = p.clock_hz;
    d.registers_per_sm = p.registers_per_sm;
    d.shared_per_sm = p.shared_per_sm;
    d.shared_reserved_per_block = p.shared_reserved_per_block;
    d.max_warps_per_sm = p.max_warps_per_sm;
    d.max_blocks_per_sm = p.max_blocks_per_sm;
    return d;
}

// Blocks and warps of a kernel resident on one SM: the fewest that its registers, its shared
// memory, the warp limit and the block limit allow.
struct Occupancy {
    int blocks_per_sm = 0;
    int warps_per_sm = 0;
};

inline Occupancy occupancy(const KernelResources& k, const DeviceModel& d = DeviceModel{}) {
    const int warps = (k.threads_per_block + 31) / 32;
    const int registers = (k.registers_per_thread + d.register_granule - 1) / d.register_granule * d.register_granule;
    int blocks = std::min(d.max_blocks_per_sm, d.max_warps_per_sm / warps);
    if (registers > 0) blocks = std::min(blocks, d.registers_per_sm / (registers * 32 * warps));
    blocks = std::min(blocks, d.shared_per_sm / (k.shared_bytes_per_block + d.shared_reserved_per_block));
    return {blocks, blocks * warps};
}

// The times of one launch (seconds) and the modelled one: the largest, at least the floor.
struct ModelledTime {
    double memory = 0, compute = 0, issue = 0, shared = 0, latency = 0, total = 0;
};

// The fraction of its cycles a scheduler issues with `warps` warps to choose from.
inline double issue_efficiency(double warps_per_scheduler, const DeviceModel& d) {
    return std::min(1.0, warps_per_scheduler / d.warps_for_full_issue);
}

// `bf16` says whether the matrix products run on the tensor cores (bf16 operands) or on the CUDA
// cores (fp32 operands). Issue and shared times are 0 for a launch that declares no instructions
// (cuBLAS, memset, kernels the model does not count), latency 0 for one that declares no round
// trips.
inline ModelledTime modelled_time(const Traffic& t, bool bf16, const DeviceModel& d = DeviceModel{}) {
    ModelledTime m;
    m.memory = (t.bytes_read + t.bytes_written) / (d.bandwidth * d.bandwidth_fraction);
    const double tensor = d.bf16_matmul_flops * (t.mma_sync ? d.mma_sync_fraction : d.matmul_fraction);
    const double matmul_rate = bf16 ? tensor : d.fp32_flops * d.fp32_fraction;
    m.compute = t.matmul_flops / matmul_rate + t.flops / (d.fp32_flops * d.fp32_fraction);
    if (t.warp_instructions > 0) {
        const Occupancy o = occupancy(t.resources, d);
        const double efficiency = issue_efficiency((double)o.warps_per_sm / d.schedulers_per_sm, d);
        m.issue = t.warp_instructions / (d.sms * d.schedulers_per_sm * d.clock_hz * efficiency);
        m.shared = t.shared_wavefronts / (d.sms * d.clock_hz);
        if (t.round_trips > 0) {
            const double block_warps = (t.resources.threads_per_block + 31) / 32;
            const double alone = issue_efficiency(block_warps / d.schedulers_per_sm, d);
            const double own_issue_cycles = t.warp_instructions / (d.schedulers_per_sm * alone);
            const double waits = t.round_trips * d.memory_latency_cycles;
            m.latency = (own_issue_cycles + waits) / (d.sms * o.blocks_per_sm * d.clock_hz);
        }
    }
    m.total = std::max({m.memory, m.compute, m.issue, m.shared, m.latency, d.launch_floor_s});
    return m;
}

inline double modelled_seconds(const Traffic& t, bool bf16, const DeviceModel& d = DeviceModel{}) {
    return modelled_time(t, bf16, d).total;
}

// The roofline alone (the model before it counted instructions): max(memory, compute, floor).
inline double roofline_seconds(const Traffic& t, bool bf16, const DeviceModel& d = DeviceModel{}) {
    const ModelledTime m = modelled_time(t, bf16, d);
    return std::max({m.memory, m.compute, d.launch_floor_s});
}

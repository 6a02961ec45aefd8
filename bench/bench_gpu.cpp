// bench/bench_gpu.cpp — `make bench`: how fast the CUDA backend trains GPT-2 124M (d12) at T = 1024
// (or another size, -init).
// Prints ms/step, tok/s, achieved TFLOP/s, the model FLOPs utilisation (MFU) against the GPU's
// dense bf16 tensor-core peak, and the device memory in use. Each step is one micro-batch:
// forward, backward, gradient norm and AdamW update, on batches of the bundled text or random
// tokens (-tokens). First it times each product that can be fused with its epilogue against the
// plain product and the project's kernel (the table of "fused or plain", and the choice
// ./train -fused auto would make: `bench-fused:`), and times the step with that choice.
//
//   build/bench_gpu [-init d12|SIZE] [-B N] [-T N] [-steps N] [-warmup N] [-precision bf16|fp32] [-ln pre|post|peri]
//                   [-tokens text|random]
//   build/bench_gpu -plan [-init SIZE] [-B N] [-T N] [-precision P] [-fit GIB]
//   build/bench_gpu -model [-card H100|H200] [-init d12|SIZE] [-B N] [-T N] [-precision bf16|fp32] [-ln pre|post|peri]
//                   [-tokens text|random]
//
// -model needs no GPU: it prints the modelled step instead (bench/cost_model.h, docs/cost_model.md
// "The cost model"), per op: launches, bytes, FLOPs, modelled time and share, the roofline's time
// and what bounds the op, then the step's total, tok/s and MFU. B defaults to 16 there. The card
// modelled is -card's, else this machine's device where the cost model knows its name (with the
// SMs, clock and SM resources the device reports), else an H200; the table's heading names it.
// A measured run's per-op table models the card it ran on in the same way.
//
// B defaults to 64, halved until what the benchmark allocates fits the free device memory
// (fit_batch, util/memory_plan.h): the backend it measures the step with, then, once that is
// released, the per-op timing's own model (bench_peak). On a machine without a CUDA device it
// says so and exits 0. The first loss (of the first warm-up step) is printed: at
// initialisation it is about ln V.
// -plan prints the device memory the backend would allocate, by category, without a GPU
// (docs/cuda_memory.md): B defaults to ./train's 32; then the benchmark's peak at that B; -fit GIB
// adds the largest B that fits GIB with ./train's reserve kept free, and the B the benchmark
// itself would take on a device with GIB free.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "dataloader.h"
#include "util/errors.h"
#include "flags/flags.h"
#include "model.h"
#include "util/rng.h"
#include "bench/cost_model.h"
#include "bench/traffic.h"

namespace {

const char* USAGE =
    "usage: build/bench_gpu [-name value ...]\n"
    "  -init d12|SIZE (d12)  model: a named size (d6..d48) or l{L}h{NH}c{C}[v{V}][t{maxT}]\n"
    "  -B N (largest that fits, up to 64)  -T N (1024, at most maxT)  -steps N (20)  -warmup N (3)\n"
    "  -precision bf16|fp32 (bf16)  -ln pre|post|peri (pre)\n"
    "  -tokens text|random  the batches: consecutive windows of data/mobydick_train_000000.bin (real token\n"
    "         frequencies), or uniformly random ids (default: text for GPT-2's vocabulary, V = 50257; else random)\n"
    "  -plan  print the planned device memory by category instead (B defaults to 32; no GPU needed)\n"
    "  -fit GIB  with -plan: also the largest B whose plan fits GIB less ./train's 1 GiB reserve\n"

    "  -model  (no value) print the modelled step instead of measuring; needs no GPU\n"
    "  -card H100|H200  with -model: the card modelled (default: this machine's device where the cost model\n"
    "         knows it, else H200)\n";

struct Options {
    std::string init;
    int B, T, steps, warmup;
    bool bf16;
    Placement placement;
    std::string tokens;  // "text", "random", or "" for the model's default
    std::string card;    // -card: the card -model models, or "" for this device's (else an H200)
    bool plan = false;   // -plan: the memory plan instead of a measurement
    bool model = false;  // -model: the cost model instead of a measurement
    double fit_gib;
};

// Parses the flags of USAGE; anything else is an InputError. -plan and -model take no value, so
// they are taken out before the "-name value" pairs are read.
Options parse(int argc, char** argv) {
    std::vector<char*> args;
    Options o;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && std::strcmp(argv[i], "-plan") == 0) o.plan = true;
        else if (i > 0 && std::strcmp(argv[i], "-model") == 0) o.model = true;
        else args.push_back(argv[i]);
    }
    Flags f((int)args.size(), args.data());
    o.init = f.str("init", "d12");
    o.B = (int)f.integer("B", 0, 1, 1 << 20);
    o.T = (int)f.integer("T", 1024, 1, 1 << 20);
    o.steps = (int)f.integer("steps", 20, 1, 1 << 20);
    o.warmup = (int)f.integer("warmup", 3, 0, 1 << 20);
    o.bf16 = f.str("precision", "bf16", {"bf16", "fp32"}) == "bf16";
    parse_placement(f.str("ln", "pre", {"pre", "post", "peri"}), &o.placement);
    o.tokens = f.str("tokens", "", {"", "text", "random"});
    o.fit_gib = f.real("fit", 0, 0, 1 << 20);
    o.card = f.str("card", "");
    f.finish();
    if (!o.card.empty() && !o.model)
        throw InputError("flag -card: only with -model (a measured run models the card it runs on)");
    if (!o.card.empty() && !card_named(o.card))
        throw InputError("flag -card: no figures for '" + o.card + "' (the cost model knows " + known_card_names() + ")");
    return o;
}

// Dense bf16 tensor-core peaks in TFLOP/s (vendor data sheets, without sparsity). The first
// entry whose name occurs in the device name wins, so the more specific names come first.
struct Peak {
    const char* name;
    double tflops;
};
const Peak kPeaks[] = {{"H100 PCIe", 756}, {"H100", 989}, {"H200", 989}, {"H800", 989}, {"A100", 312},
                       {"A800", 312},      {"L40S", 362}, {"L4", 121},   {"A10", 125}};

const Peak* peak_of(const std::string& device) {
    for (const Peak& p : kPeaks)
        if (device.find(p.name) != std::string::npos) return &p;
    return nullptr;
}

// What this machine's CUDA device 0, the benchmark's, reports of itself for the cost model, and
// its figures: null where there is no device or the model does not know its name (`p->name` is
// then the device's name, or empty). The clock (its peak, the attribute) is asked for only of a
// card the model knows.
const CardFigures* known_device(DeviceProperties* p) {
    int count = 0, clock_khz = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        cudaGetLastError();  // no device: clear the error for later calls
        return nullptr;
    }
    p->name = prop.name;
    const CardFigures* card = card_named(p->name);
    if (!card) return nullptr;
    p->sms = prop.multiProcessorCount;
    p->clock_hz = card->clock_hz;  // the data sheet's, where the device does not say
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0) == cudaSuccess && clock_khz > 0)
        p->clock_hz = clock_khz * 1e3;
    cudaGetLastError();
    p->registers_per_sm = prop.regsPerMultiprocessor;
    p->shared_per_sm = (int)prop.sharedMemPerMultiprocessor;
    p->shared_reserved_per_block = (int)prop.reservedSharedMemPerBlock;
    p->max_warps_per_sm = prop.maxThreadsPerMultiProcessor / 32;
    p->max_blocks_per_sm = prop.maxBlocksPerMultiProcessor;
    return card;
}

// The card modelled and the name the tables give it: -card's (`card`, checked by parse); else
// this device, where the cost model knows its name, with the SMs, clock and SM resources it
// reports; else an H200, saying on stderr which device it does not know.
DeviceModel modelled_card(const std::string& card, std::string* name) {
    if (!card.empty()) {
        const DeviceModel d = device_model(*card_named(card));
        *name = d.card;
        return d;
    }
    DeviceProperties p;
    if (const CardFigures* figures = known_device(&p)) {
        char said[160];
        std::snprintf(said, sizeof said, "%s (this device: %d SMs at %.2f GHz)", p.name.c_str(), p.sms, p.clock_hz / 1e9);
        *name = said;
        return device_model(*figures, p);
    }
    if (!p.name.empty())
        std::fprintf(stderr, "bench: the cost model has no figures for this device, %s (it knows %s): modelled as an H200\n",
                     p.name.c_str(), known_card_names().c_str());
    *name = DeviceModel{}.card;
    return DeviceModel{};
}

// Device memory in use now (all processes), in bytes.
size_t device_memory_used() {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
    return total - free;
}

// The most device memory the benchmark holds at once at micro-batch B: the backend it measures
// the step with, or, after that is released, the per-op timing's own model (bench/step_timing.cuh).
uint64_t bench_peak(const ModelConfig& cfg, int B, int T, bool bf16) {
    return std::max(cuda_memory_plan(cfg, B, T, bf16).total(), cuda_step_timing_plan(cfg, B, T, bf16).total());
}

// -plan: the device memory of the backend for (cfg, B, T) by category, the benchmark's peak, and
// the backend's total as the last line; with -fit, first the largest B whose plan fits that many
// GiB less the reserve ./train keeps free (largest_fitting_batch), and the B the benchmark takes
// there (fit_batch from 64 on its peak).
int print_plan(const ModelConfig& cfg, const Options& o) {
    const int B = o.B > 0 ? o.B : 32;
    const MemoryPlan plan = cuda_memory_plan(cfg, B, o.T, o.bf16);
    std::printf("plan: %s (%.1fM parameters, %s-LN), %s, B = %d, T = %d\n", o.init.c_str(), num_parameters(cfg) / 1e6,
                placement_name(cfg.placement), o.bf16 ? "bf16" : "fp32", B, o.T);
    for (int c = 0; c < NUM_MEMORY_CATEGORIES; c++)
        std::printf("  %-32s %16llu bytes  %8.2f GiB\n", memory_category_name((MemoryCategory)c),
                    (unsigned long long)plan.bytes[c], gib(plan.bytes[c]));
    std::printf("bench_gpu at B = %d holds at most %.2f GiB (the backend, then the per-op timing's model: %.2f GiB)\n", B,
                gib(bench_peak(cfg, B, o.T, o.bf16)), gib(cuda_step_timing_plan(cfg, B, o.T, o.bf16).total()));
    if (o.fit_gib > 0) {
        const uint64_t available = (uint64_t)(o.fit_gib * (uint64_t(1) << 30));
        const int largest = largest_fitting_batch(available, [&](int b) {
            return cuda_memory_plan(cfg, b, o.T, o.bf16).total();
        });
        std::printf("largest B that fits %g GiB, %.0f GiB of it kept free as ./train keeps it: %d\n", o.fit_gib,
                    gib(DEVICE_MEMORY_RESERVE), largest);
        try {
            const int bench_B = fit_batch(64, false, available, [&](int b) { return bench_peak(cfg, b, o.T, o.bf16); });
            std::printf("bench_gpu's default B with %g GiB free: %d (peak %.2f GiB)\n", o.fit_gib, bench_B,
                        gib(bench_peak(cfg, bench_B, o.T, o.bf16)));
        } catch (const InputError& e) {
            std::printf("bench_gpu's default B with %g GiB free: none (%s)\n", o.fit_gib, e.what());
        }
    }
    std::printf("planned device memory: %.2f GiB\n", gib(plan.total()));
    return 0;
}

// The bundled shard of real text (GPT-2 tokens) the benchmark reads with -tokens text.
const char* TEXT_SHARD = "data/mobydick_train_000000.bin";

// `count` batches of B·T + 1 tokens: consecutive windows of TEXT_SHARD (-tokens text, the default
// for GPT-2's vocabulary) or uniformly random ids (-tokens random, the default otherwise).
std::vector<std::vector<int32_t>> bench_batches(const ModelConfig& cfg, const Options& o, int B, int count) {
    const std::string kind = !o.tokens.empty() ? o.tokens : cfg.V >= 50257 ? "text" : "random";
    std::vector<std::vector<int32_t>> batches(count, std::vector<int32_t>((size_t)B * o.T + 1));
    if (kind == "random") {
        Rng rng(42);
        for (auto& batch : batches)
            for (int32_t& token : batch) token = (int32_t)rng.below(cfg.V);
        return batches;
    }
    DataLoader text(TEXT_SHARD, B, o.T, cfg.V, false, 0);  // InputError when missing or too short
    for (auto& batch : batches) {
        text.next_batch();
        std::copy(text.inputs(), text.inputs() + (size_t)B * o.T, batch.begin());
        batch.back() = text.targets()[(size_t)B * o.T - 1];
    }
    return batches;
}

// One training step on one micro-batch; returns the loss.
float train_step(Backend& backend, const std::vector<int32_t>& batch, int t) {
    backend.zero_grad();
    backend.forward_to_logits(batch.data(), batch.data() + 1);
    const float loss = (float)backend.backward(1.0);
    const double norm = backend.grad_norm();
    backend.update(AdamWHyper{6e-4, 0.9, 0.95, 1e-8, 0.1}, t, norm > 1.0 ? 1.0 / norm : 1.0);
    return loss;
}

// Training FLOPs of one step of B·T tokens: 6 per parameter and token (forward 2, backward 4)
// plus attention's two T×T products, 12·L·C·T per token, as in the PaLM paper's MFU.
double step_flops(const ModelConfig& cfg, int B, int T) {
    return (double)B * T * (6.0 * num_parameters(cfg) + 12.0 * cfg.L * cfg.C * T);
}

// One op of the modelled step: its launches, bytes, FLOPs and modelled seconds on the card modelled.
struct ModelRow {
    std::string op;
    int launches = 0;
    double bytes = 0, flops = 0, seconds = 0;
    double roofline = 0;                          // seconds by bytes and FLOPs alone
    double issue = 0, shared = 0, latency = 0;    // seconds of launches bound by issue, shared memory, latency
};

// The launches of one modelled step on the card `card` on the batch `tokens`, with the kinds of
// product `fused` fused, grouped by op, slowest first, and their total (`total`).
std::vector<ModelRow> modelled_ops(const ModelConfig& cfg, int B, int T, bool bf16, const std::vector<int32_t>& tokens,
                                   const FusedKinds& fused, const DeviceModel& card, ModelRow* total) {
    using Row = ModelRow;
    std::vector<Row> rows;
    *total = Row{"step"};
    for (const OpTraffic& op : cuda_step_traffic(cfg, B, T, bf16, tokens.data(), fused)) {
        auto row = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.op == op.op; });
        if (row == rows.end()) row = rows.insert(rows.end(), Row{op.op});
        for (const Traffic& t : op.launches) {
            for (Row* r : {&*row, total}) {
                r->launches++;
                r->bytes += t.bytes_read + t.bytes_written;
                r->flops += t.flops + t.matmul_flops;
                const ModelledTime m = modelled_time(t, bf16, card);
                r->seconds += m.total;
                r->roofline += roofline_seconds(t, bf16, card);
                if (m.total > std::max(m.memory, m.compute))
                    (m.latency >= std::max(m.issue, m.shared) ? r->latency : m.issue >= m.shared ? r->issue : r->shared) +=
                        m.total;
            }
        }
    }
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
    return rows;
}

// -model: the modelled step per op, then its total, tok/s and MFU.
int print_model(const ModelConfig& cfg, const Options& o) {
    using Row = ModelRow;
    const int B = o.B > 0 ? o.B : 16;
    std::string card_name;
    const DeviceModel card = modelled_card(o.card, &card_name);
    Row total;
    const std::vector<Row> rows =
        modelled_ops(cfg, B, o.T, o.bf16, bench_batches(cfg, o, B, 1)[0], EVERY_KIND_FUSED, card, &total);
    std::printf("bench -model: %s (docs/cost_model.md), %s (%.1fM parameters, %s-LN), %s, B = %d, T = %d\n",
                card_name.c_str(), o.init.c_str(), num_parameters(cfg) / 1e6, placement_name(cfg.placement), o.bf16 ? "bf16" : "fp32", B,
                o.T);
    std::printf("  %-28s %8s %10s %10s %10s %7s %10s %12s\n", "op", "launches", "GB", "GFLOP", "ms", "share",
                "roofline", "bound by");
    auto print = [&](const Row& r) {
        const char* bound = r.issue + r.shared + r.latency < 0.5 * r.seconds   ? "bytes/FLOPs"
                            : r.latency >= std::max(r.issue, r.shared) ? "latency"
                            : r.issue >= r.shared                      ? "issue"
                                                                       : "shared";
        std::printf("  %-28s %8d %10.3f %10.1f %10.3f %6.1f%% %10.3f %12s\n", r.op.c_str(), r.launches, r.bytes / 1e9,
                    r.flops / 1e9, r.seconds * 1e3, 100.0 * r.seconds / total.seconds, r.roofline * 1e3, bound);
    };
    for (const Row& r : rows) print(r);
    print(total);
    const double tokens = (double)B * o.T;
    const double mfu = step_flops(cfg, B, o.T) / total.seconds / card.bf16_matmul_flops;
    std::printf("  tok/s     %.0f (modelled)\n", tokens / total.seconds);
    std::printf("  MFU       %.1f%% of %.0f TFLOP/s dense bf16 (6·params·tokens + 12·L·C·T·tokens)\n", 100.0 * mfu,
                card.bf16_matmul_flops / 1e12);
    std::printf("bench-model-summary: ms_step=%.2f tok_s=%.0f mfu_pct=%.1f launches=%d B=%d\n", total.seconds * 1e3,
                tokens / total.seconds, 100.0 * mfu, total.launches, B);
    return 0;
}

// Each op's measured time (CUDA events, bench/step_timing.cuh) beside its modelled time on this
// device's card (modelled_card), both with the kinds of product `fused` fused.
void print_measured_ops(const ModelConfig& cfg, int B, const Options& o, const std::vector<int32_t>& tokens,
                        const FusedKinds& fused) {
    std::string card_name;
    const DeviceModel card = modelled_card("", &card_name);
    ModelRow total;
    const std::vector<ModelRow> rows = modelled_ops(cfg, B, o.T, o.bf16, tokens, fused, card, &total);
    std::map<std::string, double> measured =
        cuda_step_op_ms(cfg, B, o.T, o.bf16, std::max(1, o.steps / 4), tokens.data(), fused);
    double measured_total = 0;
    for (const auto& [op, ms] : measured) measured_total += ms;
    std::printf("  per op (ms/step; measured between events around each op, modelled for %s):\n", card_name.c_str());
    std::printf("  %-28s %10s %10s\n", "op", "measured", "modelled");
    for (const ModelRow& r : rows) std::printf("  %-28s %10.3f %10.3f\n", r.op.c_str(), measured[r.op], r.seconds * 1e3);
    std::printf("  %-28s %10.3f %10.3f\n", "sum of ops", measured_total, total.seconds * 1e3);
}

// Each kind of product that can be fused, timed fused and plain at each layer's shape
// (time_cuda_fused_products), and the choice ./train -fused auto makes from them.
void print_product_timings(const std::vector<ProductTiming>& timings, const FusionChoice& choice) {
    std::printf("  fused or plain (ms of one run of each op, median of the timing's rounds, and their spread; plain = the\n"
                "  product and the project's kernel; docs/cuda.md §3):\n");
    std::printf("  %-16s %-8s %10s %10s %10s\n", "kind", "layer", "fused", "plain", "spread");
    for (const ProductTiming& t : timings) {
        char fused[16] = "refused";
        if (!std::isnan(t.fused_ms)) std::snprintf(fused, sizeof fused, "%.3f", t.fused_ms);
        std::printf("  %-16s %-8s %10s %10.3f %10.3f\n", epilogue_name(t.kind), t.layer.c_str(), fused, t.plain_ms,
                    t.spread_ms);
    }
    std::printf("bench-fused: %s\n", choice.line.c_str());
}

int run(const Options& o) {
    ModelConfig cfg;
    if (!model_size(o.init, &cfg)) throw InputError("flag -init: '" + o.init + "' is not a model size");
    cfg.placement = o.placement;
    if (o.T > cfg.maxT) throw InputError("flag -T: at most " + std::to_string(cfg.maxT));
    if (o.plan) return print_plan(cfg, o);
    if (o.model) return print_model(cfg, o);
    std::string device;
    if (!cuda_device_available(&device)) {
        std::printf("bench: needs a CUDA GPU (%s); nothing to measure\n", device.c_str());
        return 0;
    }
    const int B = o.B > 0 ? o.B
                          : fit_batch(64, false, cuda_free_memory(),
                                      [&](int b) { return bench_peak(cfg, b, o.T, o.bf16); });

    const std::vector<ProductTiming> timings = time_cuda_fused_products(cfg, B, o.T, o.bf16);
    const FusionChoice fused = faster_products(timings);
    std::unique_ptr<Backend> model = make_cuda_backend(cfg, B, o.T, o.bf16, 0, nullptr, fused);
    std::vector<float> params(num_parameters(cfg));
    init_parameters(cfg, params.data(), 1337);
    model->set_params(params.data());
    const std::vector<std::vector<int32_t>> batches = bench_batches(cfg, o, B, 4);

    std::printf("bench: %s, %s (%.1fM parameters, %s-LN), %s, B = %d, T = %d\n", device.c_str(), o.init.c_str(),
                num_parameters(cfg) / 1e6, placement_name(cfg.placement), o.bf16 ? "bf16" : "fp32", B, o.T);
    print_product_timings(timings, fused);
    int t = 1;
    float first_loss = NAN;
    for (int s = 0; s < o.warmup; s++, t++) {
        const float loss = train_step(*model, batches[s % batches.size()], t);
        if (t == 1) first_loss = loss;
    }
    std::vector<double> ms;
    float loss = 0;
    size_t memory = 0;
    for (int s = 0; s < o.steps; s++, t++) {
        const auto start = std::chrono::steady_clock::now();
        loss = train_step(*model, batches[s % batches.size()], t);
        cudaDeviceSynchronize();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        memory = std::max(memory, device_memory_used());
        if (t == 1) first_loss = loss;
    }
    model.reset();  // the per-op timing below builds a model of its own

    std::sort(ms.begin(), ms.end());
    const double median_ms = ms[ms.size() / 2];
    const double tokens = (double)B * o.T;
    const double flops = step_flops(cfg, B, o.T);
    const double tflops = flops / (median_ms * 1e-3) / 1e12;
    const Peak* peak = peak_of(device);
    char mfu[96] = "n/a (no dense bf16 peak known for this device)";
    if (peak)
        std::snprintf(mfu, sizeof mfu, "%.1f%% of %.0f TFLOP/s dense bf16", 100.0 * tflops / peak->tflops, peak->tflops);
    std::printf("  %d steps after %d warm-up, first loss %.3f (ln V = %.3f), last loss %.3f\n", o.steps, o.warmup,
                first_loss, std::log((double)cfg.V), loss);
    std::printf("  ms/step   %.1f (median; min %.1f, max %.1f)\n", median_ms, ms.front(), ms.back());
    std::printf("  tok/s     %.0f\n", tokens / (median_ms * 1e-3));
    std::printf("  TFLOP/s   %.1f\n", tflops);
    std::printf("  MFU       %s\n", mfu);
    std::printf("  memory    %.1f GiB in use on the device (peak over the timed steps)\n", memory / 1073741824.0);
    print_measured_ops(cfg, B, o, batches[0], fused.kinds);
    std::printf("bench-summary: tok_s=%.0f ms_step=%.1f mfu_pct=%.1f mem_gib=%.1f B=%d first_loss=%.4f ln_V=%.4f\n",
                tokens / (median_ms * 1e-3), median_ms, peak ? 100.0 * tflops / peak->tflops : 0.0,
                memory / 1073741824.0, B, first_loss, std::log((double)cfg.V));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return run_program("bench", USAGE, argc, argv, [&] { return run(parse(argc, argv)); });
}

// bench/bench_cpu.cpp — speed of the CPU trainer (docs/cpu_speed.md).
//
//   ./build/bench_cpu [-threads N] [-steps S] [-warmup W] [-models d12,d6] [-breakdown 0|1]
//
// For each benchmark case (d12 at B=4, T=64 and the small default d6 at B=8, T=256, both
// Pre-LN) it runs full training steps through CpuBackend — zero_grad, forward, backward,
// gradient norm, AdamW update, exactly what ./train does per micro-step — on random tokens,
// and prints the median ms/step after warm-up, tokens/s and the achieved GFLOP/s, counting
// model FLOPs as llm.c / PaLM do:
//
//   FLOPs per step = 6 · parameters · tokens  +  12 · L · C · T · tokens   (attention)
//
// It also measures the machine's fp32 peak in the same run: an FMA loop on every thread
// (independent vector accumulators, native vector width), and prints achieved / peak.
// With -breakdown 1 (the default) it then times every op of the step on its own at the
// model's shapes and prints the per-op share of the step (the part not covered by the ops —
// zero fills of scratch buffers, copies — shows as "other").
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gpt2_cpu.h"
#include "model.h"
#include "util/rng.h"

namespace {

// ---------------------------------------------------------------------------------------------
// Machine peak: every thread runs ACC independent FMA chains on native-width vectors.

#if defined(__AVX512F__)
constexpr int VEC_BYTES = 64;
#elif defined(__AVX__)
constexpr int VEC_BYTES = 32;
#else
constexpr int VEC_BYTES = 16;
#endif
typedef float vfloat __attribute__((vector_size(VEC_BYTES)));
constexpr int LANES = VEC_BYTES / 4;

// Runs `iters` rounds of ACC fused multiply-adds per thread; returns seconds.
double fma_loop(long iters, int threads, float* sink) {
    constexpr int ACC = 24;  // > FMA latency × FMA pipes, so both pipes stay busy
    double t0 = omp_get_wtime();
#pragma omp parallel num_threads(threads)
    {
        vfloat acc[ACC];
        vfloat x, y;
        for (int l = 0; l < LANES; l++) { x[l] = 0.999999f; y[l] = 1e-6f; }
        for (int i = 0; i < ACC; i++)
            for (int l = 0; l < LANES; l++) acc[i][l] = (float)(i + l + omp_get_thread_num());
        for (long it = 0; it < iters; it++) {
#pragma GCC unroll 24
            for (int i = 0; i < ACC; i++) acc[i] = acc[i] * x + y;  // contracted to one FMA
        }
        float s = 0;
        for (int i = 0; i < ACC; i++)
            for (int l = 0; l < LANES; l++) s += acc[i][l];
#pragma omp atomic
        *sink += s;
    }
    return omp_get_wtime() - t0;
}

// Best of a few ~0.25 s trials, in GFLOP/s (an FMA counts as two FLOPs).
double measure_peak_gflops(int threads) {
    constexpr int ACC = 24;
    float sink = 0;
    long iters = 1 << 20;
    while (fma_loop(iters, threads, &sink) < 0.05) iters *= 2;  // calibrate
    const double t_cal = fma_loop(iters, threads, &sink);
    iters = (long)(iters * 0.25 / t_cal);
    double best = 0;
    for (int trial = 0; trial < 4; trial++) {
        const double s = fma_loop(iters, threads, &sink);
        best = std::max(best, 2.0 * ACC * LANES * (double)iters * threads / s / 1e9);
    }
    if (sink == 12345.0f) std::printf(" ");  // keep the loop observable
    return best;
}

// ---------------------------------------------------------------------------------------------
// Benchmark cases.

struct Case {
    std::string model;
    int B, T;
};

double model_flops_per_step(const ModelConfig& cfg, int B, int T) {
    const double tokens = (double)B * T;
    return 6.0 * (double)num_parameters(cfg) * tokens + 12.0 * cfg.L * cfg.C * (double)T * tokens;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = (int32_t)rng.below((uint64_t)V);
    return t;
}

// The phases of one training step, as ./train runs it (one micro-step, clipping at 1.0).
constexpr int NUM_PHASES = 5;
const char* const PHASE_NAMES[NUM_PHASES] = {"zero_grad", "forward", "backward", "grad norm", "AdamW"};

// Runs one step; adds each phase's milliseconds to phase_ms.
void train_step(CpuBackend<>& be, const int32_t* tokens, int step, double* phase_ms) {
    double t = omp_get_wtime();
    auto lap = [&](int phase) {
        const double now = omp_get_wtime();
        phase_ms[phase] += (now - t) * 1e3;
        t = now;
    };
    be.zero_grad();
    lap(0);
    be.forward_to_logits(tokens, tokens + 1);
    lap(1);
    be.backward(1.0);
    lap(2);
    const double norm = be.grad_norm();
    lap(3);
    const AdamWHyper h{3e-4, 0.9, 0.95, 1e-8, 0.1};
    be.update(h, step, norm > 1.0 ? 1.0 / norm : 1.0);
    lap(4);
}

struct StepResult {
    double ms_per_step;
    std::vector<double> step_ms;
    std::vector<double> phase_ms[NUM_PHASES];  // per timed step
};

StepResult time_steps(const ModelConfig& cfg, int B, int T, int warmup, int steps) {
    CpuBackend<> be(cfg, B, T);
    // Weights of the scale a fresh model has (uniform with std 0.02, LayerNorm gains 1 and
    // biases 0): much quicker to make than init_parameters' normal samples.
    std::vector<float> params(num_parameters(cfg));
    Rng rng(1337);
    for (float& w : params) w = (float)(0.0346 * (2.0 * rng.uniform() - 1.0));
    const auto sizes = param_sizes(cfg), offsets = param_offsets(cfg);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++)
        if (!param_decays(i)) {
            const bool gain = i == P_LN1W || i == P_LN2W || i == P_LNFW || i == P_LN1OW || i == P_LN2OW;
            std::fill(params.begin() + offsets[i], params.begin() + offsets[i] + sizes[i], gain ? 1.0f : 0.0f);
        }
    be.set_params(params.data());
    const std::vector<int32_t> tokens = random_tokens((size_t)B * T + 1, cfg.V, 42);
    StepResult r;
    for (int s = 0; s < warmup + steps; s++) {
        double phase[NUM_PHASES] = {};
        const double t0 = omp_get_wtime();
        train_step(be, tokens.data(), s + 1, phase);
        const double ms = (omp_get_wtime() - t0) * 1e3;
        if (s < warmup) continue;
        r.step_ms.push_back(ms);
        for (int p = 0; p < NUM_PHASES; p++) r.phase_ms[p].push_back(phase[p]);
    }
    r.ms_per_step = median(r.step_ms);
    return r;
}

// ---------------------------------------------------------------------------------------------
// Per-op breakdown: each op of a Pre-LN step timed alone (fastest of `reps` calls after one
// warm-up call) at the model's shapes, times the number of calls per step.

struct OpRow {
    std::string name;
    int calls;
    double ms_each;
    double flops_each;  // 0 when not counted
    bool is_matmul;
};

// The fastest of `reps` calls after a warm-up call: the op's own speed, least disturbed by
// other processes on the machine (the step time above is the median, the honest figure).
double time_op(const std::function<void()>& op, int reps) {
    op();
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = omp_get_wtime();
        op();
        best = std::min(best, (omp_get_wtime() - t0) * 1e3);
    }
    return best;
}

std::vector<OpRow> op_breakdown(const ModelConfig& cfg, int B, int T, int reps) {
    const int C = cfg.C, L = cfg.L, NH = cfg.NH, Vp = cfg.Vp, V = cfg.V;
    const int N = B * T;
    using Ops = FastOps;  // the ops CpuModel<float> trains with
    const size_t NC = (size_t)N * C;
    Rng rng(7);
    auto buf = [&](size_t n, float scale) {
        std::vector<float> v(n);
        for (auto& x : v) x = (float)(scale * (2.0 * rng.uniform() - 1.0));
        return v;
    };
    std::vector<float> x = buf(NC, 1), y = buf(NC, 1), z = buf(NC, 1), dx = buf(NC, 0.1f), dy = buf(NC, 0.1f);
    std::vector<float> qkv = buf(3 * NC, 1), dqkv = buf(3 * NC, 0.1f);
    std::vector<float> h4 = buf(4 * NC, 1), g4 = buf(4 * NC, 1), dh4 = buf(4 * NC, 0.1f), dg4 = buf(4 * NC, 0.1f);
    std::vector<float> att((size_t)B * NH * T * T), mean(N), rstd(N);
    std::vector<float> logits = buf((size_t)N * Vp, 1), losses(N);
    std::vector<float> w = buf((size_t)Vp * C, 0.02f), dw = buf((size_t)Vp * C, 0.0f);  // big enough for every weight
    std::vector<float> bias = buf(4 * C, 0.02f), dbias(4 * C), lnw = buf(C, 1), dlnw(C), dlnb(C);
    std::vector<float> wpe = buf((size_t)cfg.maxT * C, 0.02f), dwpe((size_t)cfg.maxT * C);
    const std::vector<int32_t> tokens = random_tokens((size_t)N, V, 3);
    const float dt = 1.0f;

    std::vector<OpRow> rows;
    auto add = [&](const std::string& name, int calls, double flops, bool mm, const std::function<void()>& op) {
        rows.push_back({name, calls, time_op(op, reps), flops, mm});
    };
    char label[128];
    struct Lin { const char* name; int IC, OC, calls; bool has_bias; };
    const Lin lins[] = {{"qkv", C, 3 * C, L, true}, {"attproj", C, C, L, true}, {"fc", C, 4 * C, L, true},
                        {"fcproj", 4 * C, C, L, true}, {"lm head", C, Vp, 1, false}};
    // Forward ops.
    for (const Lin& l : lins) {
        std::snprintf(label, sizeof label, "matmul fwd %-8s %5dx%-5d", l.name, l.IC, l.OC);
        float* out = l.OC == Vp ? logits.data() : (l.OC == 4 * C ? h4.data() : (l.OC == 3 * C ? qkv.data() : y.data()));
        const float* in = l.IC == 4 * C ? g4.data() : x.data();
        add(label, l.calls, 2.0 * N * l.IC * l.OC, true,
            [&, out, in, l] { Ops::matmul_forward(out, in, w.data(), l.has_bias ? bias.data() : nullptr, N, l.IC, l.OC); });
    }
    add("attention fwd", L, 4.0 * B * T * T * C, false, [&] { Ops::attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH); });
    add("layernorm fwd", 2 * L + 1, 0, false,
        [&] { Ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), lnw.data(), bias.data(), N, C); });
    add("gelu fwd", L, 0, false, [&] { fast::gelu_forward(g4.data(), h4.data(), 4 * NC); });  // in matmul_gelu_forward
    add("residual fwd", 2 * L, 0, false, [&] { Ops::residual_forward(z.data(), x.data(), y.data(), dt, NC); });
    add("encoder fwd", 1, 0, false, [&] { Ops::encoder_forward(x.data(), tokens.data(), w.data(), wpe.data(), B, T, C); });
    // Backward ops.
    add("crossentropy fwd+bwd", 1, 0, false, [&] {
        Ops::crossentropy_forward_backward(losses.data(), logits.data(), tokens.data(), 1.0f / N, N, V, Vp);
    });
    for (const Lin& l : lins) {
        std::snprintf(label, sizeof label, "matmul bwd %-8s %5dx%-5d", l.name, l.IC, l.OC);
        const float* dout = l.OC == Vp ? logits.data() : (l.OC == 4 * C ? dh4.data() : (l.OC == 3 * C ? dqkv.data() : dy.data()));
        float* din = l.IC == 4 * C ? dg4.data() : dx.data();
        const float* in = l.IC == 4 * C ? g4.data() : x.data();
        add(label, l.calls, 4.0 * N * l.IC * l.OC, true, [&, dout, din, in, l] {
            Ops::matmul_backward(din, dw.data(), l.has_bias ? dbias.data() : nullptr, dout, in, w.data(), N, l.IC, l.OC,
                                 GradOut::Add);
        });
    }
    add("attention bwd", L, 8.0 * B * T * T * C, false,
        [&] { Ops::attention_backward(dqkv.data(), dy.data(), qkv.data(), y.data(), att.data(), B, T, C, NH); });
    add("layernorm bwd", 2 * L + 1, 0, false, [&] {
        Ops::layernorm_backward(dx.data(), dlnw.data(), dlnb.data(), dy.data(), x.data(), lnw.data(), mean.data(),
                                rstd.data(), N, C, GradOut::Add);
    });
    add("gelu bwd", L, 0, false, [&] { Ops::gelu_backward(dg4.data(), dh4.data(), h4.data(), 4 * NC, GradOut::Add); });
    add("residual bwd", 2 * L, 0, false,  // in layernorm_backward_residual
        [&] { ::residual_backward(dy.data(), z.data(), dt, NC, GradOut::Write); });
    add("encoder bwd", 1, 0, false,
        [&] { Ops::encoder_backward(dw.data(), dwpe.data(), dy.data(), tokens.data(), B, T, C); });
    // Optimiser over all parameters (the bench's buffers stand in for params/grads/moments).
    {
        const size_t P = num_parameters(cfg);
        std::vector<float> p(P, 0.01f), g(P, 0.001f), m(P, 0.0f), v(P, 0.0f);
        add("grad norm + AdamW", 1, 0, false, [&] {
            const double norm = std::sqrt(fast::sum_of_squares(g.data(), P));
            const AdamWHyper h{3e-4, 0.9, 0.95, 1e-8, 0.1};
            adamw_update(p.data(), g.data(), m.data(), v.data(), P, h, 1, norm > 1 ? 1 / norm : 1.0);
        });
        add("zero_grad", 1, 0, false, [&] { std::fill(g.begin(), g.end(), 0.0f); });
    }
    return rows;
}

void print_breakdown(const std::vector<OpRow>& rows, double step_ms, double peak) {
    std::printf("  %-34s %6s %10s %7s %9s %7s\n", "op", "calls", "ms/step", "% step", "GFLOP/s", "% peak");
    double sum = 0, mm_ms = 0, mm_flops = 0;
    for (const OpRow& r : rows) {
        const double ms = r.ms_each * r.calls;
        sum += ms;
        if (r.is_matmul) { mm_ms += ms; mm_flops += r.flops_each * r.calls; }
        if (r.flops_each > 0) {
            const double gf = r.flops_each / (r.ms_each * 1e6);
            std::printf("  %-34s %6d %10.1f %6.1f%% %9.1f %6.1f%%\n", r.name.c_str(), r.calls, ms, 100 * ms / step_ms, gf,
                        100 * gf / peak);
        } else {
            std::printf("  %-34s %6d %10.1f %6.1f%% %9s %7s\n", r.name.c_str(), r.calls, ms, 100 * ms / step_ms, "", "");
        }
    }
    std::printf("  %-34s %6s %10.1f %6.1f%%\n", "other (fills, copies; = step - sum)", "", step_ms - sum,
                100 * (step_ms - sum) / step_ms);
    std::printf("  %-34s %6s %10.1f %6.1f%% %9.1f %6.1f%%\n", "all matmuls", "", mm_ms, 100 * mm_ms / step_ms,
                mm_flops / (mm_ms * 1e6), 100 * mm_flops / (mm_ms * 1e6) / peak);
    std::printf("  %-34s %6s %10.1f %6.1f%%\n", "sum of ops", "", sum, 100 * sum / step_ms);
}

void usage() {
    std::fprintf(stderr,
                 "usage: bench_cpu [-threads N] [-steps S] [-warmup W] [-models d12,d6] [-breakdown 0|1] [-reps R]\n");
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    int threads = omp_get_max_threads(), steps = 5, warmup = 1, breakdown = 1, reps = 3;
    std::string models = "d12,d6";
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (i + 1 >= argc) usage();
        const char* v = argv[++i];
        if (a == "-threads") threads = std::atoi(v);
        else if (a == "-steps") steps = std::atoi(v);
        else if (a == "-warmup") warmup = std::atoi(v);
        else if (a == "-models") models = v;
        else if (a == "-breakdown") breakdown = std::atoi(v);
        else if (a == "-reps") reps = std::atoi(v);
        else usage();
    }
    if (threads < 1 || steps < 1 || warmup < 0 || reps < 1) usage();
    omp_set_num_threads(threads);

    std::vector<Case> cases;
    for (size_t at = 0; at <= models.size();) {
        size_t comma = models.find(',', at);
        if (comma == std::string::npos) comma = models.size();
        const std::string m = models.substr(at, comma - at);
        if (m == "d12") cases.push_back({"d12", 4, 64});
        else if (m == "d6") cases.push_back({"d6", 8, 256});
        else if (!m.empty()) { std::fprintf(stderr, "unknown model %s (d12 or d6)\n", m.c_str()); return 2; }
        at = comma + 1;
    }

    std::printf("CPU reference benchmark: %d thread(s) of %d cores, %d warm-up + %d timed steps (median)\n", threads,
                omp_get_num_procs(), warmup, steps);
    // The peak is measured before and after the training steps; the higher one counts (other
    // processes on the machine lower both, the training steps too).
    const double peak_before = measure_peak_gflops(threads);
    std::printf("fp32 peak (FMA loop, %d-bit vectors, %d threads): %.1f GFLOP/s\n", VEC_BYTES * 8, threads, peak_before);
    std::fflush(stdout);

    struct Row { Case c; double params, gflop, ms; };
    std::vector<Row> results;
    for (const Case& c : cases) {
        ModelConfig cfg;
        named_model_size(c.model, &cfg);
        const StepResult r = time_steps(cfg, c.B, c.T, warmup, steps);
        results.push_back({c, (double)num_parameters(cfg), model_flops_per_step(cfg, c.B, c.T) / 1e9, r.ms_per_step});
        std::printf("%s B=%d T=%d step ms:", c.model.c_str(), c.B, c.T);
        for (double ms : r.step_ms) std::printf(" %.0f", ms);
        std::printf("   phases (median ms):");
        for (int p = 0; p < NUM_PHASES; p++) std::printf(" %s %.0f", PHASE_NAMES[p], median(r.phase_ms[p]));
        std::printf("\n");
        std::fflush(stdout);
    }
    const double peak_after = measure_peak_gflops(threads);
    const double peak = std::max(peak_before, peak_after);
    std::printf("fp32 peak again after the steps: %.1f GFLOP/s; using %.1f GFLOP/s\n", peak_after, peak);
    std::printf("\n%-5s %3s %4s %8s %10s %10s %10s %10s %9s\n", "model", "B", "T", "params", "GFLOP/step", "ms/step",
                "tok/s", "GFLOP/s", "% of peak");
    for (const Row& r : results) {
        const double gflops = r.gflop / (r.ms / 1e3);
        std::printf("%-5s %3d %4d %7.1fM %10.1f %10.1f %10.0f %10.1f %8.1f%%\n", r.c.model.c_str(), r.c.B, r.c.T,
                    r.params / 1e6, r.gflop, r.ms, r.c.B * r.c.T / (r.ms / 1e3), gflops, 100 * gflops / peak);
    }
    if (breakdown) {
        for (const Row& r : results) {
            ModelConfig cfg;
            named_model_size(r.c.model, &cfg);
            std::printf("\nper-op breakdown, %s B=%d T=%d (each op timed alone, fastest of %d; step = %.1f ms)\n",
                        r.c.model.c_str(), r.c.B, r.c.T, reps, r.ms);
            print_breakdown(op_breakdown(cfg, r.c.B, r.c.T, reps), r.ms, peak);
        }
    }
    return 0;
}

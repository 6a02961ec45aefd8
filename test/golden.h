// golden.h: reads the golden fixtures in test/golden/ written by test/make_golden.py
// (a float64 PyTorch implementation of docs/model.md). Header-only, C++17.
//
// Each case <placement>_dt<1.0|0.1> has two files:
//   <case>.model.bin   the initial checkpoint (docs/formats.md §2): load it with the project's reader
//   <case>.expect.bin  what the model and optimiser must produce from it; read_golden_expect()
// The layout of .expect.bin is documented in test/golden/README.md.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

// The fixed settings make_golden.py used for every case (also in test/golden/README.md).
// The first loss/gradients are on batch 0; step s (0-based) trains on batch s with
// lr = golden_lr(s), AdamW (weight decay on wte, wpe, qkvw, attprojw, fcw, fcprojw only)
// and global-norm clipping at kGoldenClip (it triggers on every step of every case).
constexpr double kGoldenLr = 1e-2;
constexpr double kGoldenLrMin = 1e-3;
constexpr int kGoldenWarmup = 2;
constexpr double kGoldenBeta1 = 0.9;
constexpr double kGoldenBeta2 = 0.95;
constexpr double kGoldenEps = 1e-8;
constexpr double kGoldenWeightDecay = 0.1;
constexpr double kGoldenClip = 0.5;
constexpr int32_t kGoldenExpectMagic = 20251129;

// The learning rate make_golden.py used at 0-based step s of a run of `steps` steps:
// linear warmup lr*(s+1)/warmup for s < warmup, then cosine decay
// lr_min + 0.5*(1 + cos(pi*r))*(lr - lr_min) with r = (s - warmup)/(steps - 1 - warmup)
// (r = 0 when steps - 1 == warmup), so the last step uses exactly lr_min.
inline double golden_lr(int s, int steps) {
    if (s < kGoldenWarmup) return kGoldenLr * (s + 1) / kGoldenWarmup;
    const int span = steps - 1 - kGoldenWarmup;
    const double r = span > 0 ? double(s - kGoldenWarmup) / span : 0.0;
    return kGoldenLrMin + 0.5 * (1.0 + std::cos(3.14159265358979323846 * r)) * (kGoldenLr - kGoldenLrMin);
}

// Contents of one .expect.bin file. Arrays over parameters hold every float of the model
// in docs/formats.md §2 order (padded wte rows included; their gradient is 0).
struct GoldenExpect {
    int B = 0, T = 0, steps = 0;
    std::vector<int32_t> tokens;         // the token stream; batch s = tokens[s*B*T, s*B*T + B*T + 1)
    double loss0 = 0;                    // mean cross-entropy on batch 0 with the initial params
    std::vector<double> grads;           // d loss0 / d param, num_params entries
    std::vector<double> step_loss;       // per step: loss before its update (step_loss[0] == loss0)
    std::vector<double> step_grad_norm;  // per step: global gradient norm before clipping
    std::vector<double> step_lr;         // per step: learning rate used
    std::vector<double> final_params;    // parameters after the last step, num_params entries
    int micro_steps = 1;                 // batches per step (header[6]; 0 there means 1)
};

namespace golden_detail {

// Copies n little-endian values of type V from buf at *pos and advances *pos; throws when
// the buffer is too short. (The fixtures are little-endian; so are the hosts we build on.)
template <typename V>
inline std::vector<V> take(const std::vector<char>& buf, size_t* pos, size_t n, const std::string& path) {
    if (n > (buf.size() - *pos) / sizeof(V))
        throw std::runtime_error("golden file truncated: " + path);
    std::vector<V> out(n);
    if (n) std::memcpy(out.data(), buf.data() + *pos, n * sizeof(V));
    *pos += n * sizeof(V);
    return out;
}

}  // namespace golden_detail

// Reads and validates an .expect.bin file: magic, positive sizes, and a file size exactly
// matching the header. Throws std::runtime_error naming the file on any problem.
inline GoldenExpect read_golden_expect(const std::string& path) {
    using golden_detail::take;
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open golden file: " + path);
    std::vector<char> buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());

    size_t pos = 0;
    std::vector<int32_t> h = take<int32_t>(buf, &pos, 16, path);
    if (h[0] != kGoldenExpectMagic) throw std::runtime_error("bad magic in golden file: " + path);
    const int32_t B = h[1], T = h[2], num_tokens = h[3], steps = h[4], num_params = h[5], micro_steps = h[6];
    // The model cases hold their token stream; the training-loop case (micro_steps > 0) none.
    const bool tokens_ok = micro_steps > 0 ? num_tokens == 0 : (int64_t)num_tokens >= (int64_t)steps * B * T + 1;
    if (B <= 0 || T <= 0 || steps <= 0 || num_params <= 0 || micro_steps < 0 || !tokens_ok)
        throw std::runtime_error("bad header in golden file: " + path);
    const uint64_t expected = 4ull * (16 + (uint64_t)num_tokens) +
                              8ull * (1 + 2 * (uint64_t)num_params + 3 * (uint64_t)steps);
    if (buf.size() != expected) throw std::runtime_error("golden file size does not match its header: " + path);

    GoldenExpect g;
    g.B = B;
    g.T = T;
    g.steps = steps;
    g.micro_steps = micro_steps > 0 ? micro_steps : 1;
    g.tokens = take<int32_t>(buf, &pos, num_tokens, path);
    g.loss0 = take<double>(buf, &pos, 1, path)[0];
    g.grads = take<double>(buf, &pos, num_params, path);
    g.step_loss = take<double>(buf, &pos, steps, path);
    g.step_grad_norm = take<double>(buf, &pos, steps, path);
    g.step_lr = take<double>(buf, &pos, steps, path);
    g.final_params = take<double>(buf, &pos, num_params, path);
    return g;
}

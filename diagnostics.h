// diagnostics.h — the measurements that ./train's `stats` records and ./eval's JSON share
// (docs/experiments.md, *Diagnostics*):
//
//   * on the host, from plain arrays: attention_logit_max, the largest pre-softmax attention
//     logit q·k/√hs of one block (the signature of attention-logit growth); logit_statistics,
//     the largest output logit and the mean log-partition log Σ_v exp(z_v) over the V real
//     tokens; root_mean_square; sequence_perplexity_sum, Σ over sequences of exp(that
//     sequence's mean token loss); block_norms_by, the norm of each block's part of a
//     parameter-shaped buffer (the block parameter norms, their gradients' norms);
//   * forward_stats and fcproj_grad_norms: all of a `stats` record from any model, CPU or CUDA,
//     through its ops (the backends' methods of the same names call them).
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend.h"
#include "cpu_ops.h"
#include "model.h"

namespace diag {

// The largest pre-softmax attention logit of one block: max over b, heads h and causal pairs
// t' ≤ t of q_t·k_t'/√hs, with q, k the heads of qkv (B,T,3C) = [q | k | v], NH heads of
// hs = C/NH channels. Dot products in double.
template <typename Real>
double attention_logit_max(const Real* qkv, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const double scale = 1.0 / std::sqrt((double)hs);
    double best = -std::numeric_limits<double>::infinity();
#pragma omp parallel for collapse(3) reduction(max : best) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const Real* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                for (int t2 = 0; t2 <= t; t2++) {
                    const Real* k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int i = 0; i < hs; i++) s += (double)q[i] * k[i];
                    best = std::max(best, s * scale);
                }
            }
    return best;
}

// Largest logit and mean log-partition of logits (N,Vp) over the V real tokens of each row
// (the padding columns V..Vp−1 are ignored). In double. The rows' log-partitions are summed in
// row order after the parallel loop, so the mean is the same for any number of threads.
template <typename Real>
LogitStats logit_statistics(const Real* logits, int N, int V, int Vp) {
    double best = -std::numeric_limits<double>::infinity();
    std::vector<double> log_z(N);
#pragma omp parallel for reduction(max : best) schedule(static)
    for (int n = 0; n < N; n++) {
        const Real* z = logits + (size_t)n * Vp;
        const double row_max = *std::max_element(z, z + V);
        double sum = 0;
        for (int v = 0; v < V; v++) sum += std::exp((double)z[v] - row_max);
        best = std::max(best, row_max);
        log_z[n] = row_max + std::log(sum);
    }
    double lse_sum = 0;
    for (double l : log_z) lse_sum += l;
    return {best, lse_sum / N};
}

// sqrt(mean of x²) over n elements.
template <typename Real>
double root_mean_square(const Real* x, size_t n) {
    return std::sqrt(sum_of_squares(x, n) / (double)n);
}

// Σ over the B sequences (rows of losses (B,T)) of exp(mean over t of losses[b,t]); divided by
// the number of sequences it is the per-sequence perplexity `ppl_seq`.
template <typename Real>
double sequence_perplexity_sum(const Real* losses, int B, int T) {
    double total = 0;
    for (int b = 0; b < B; b++) {
        double sum = 0;
        for (int t = 0; t < T; t++) sum += losses[(size_t)b * T + t];
        total += std::exp(sum / T);
    }
    return total;
}

// The L2 norm, for each block l, of the block's part of a buffer laid out like the parameters
// (file order): every per-layer tensor's slice l. sum_sq(offset, n) returns Σ x² of the n
// elements from `offset` of that buffer, wherever it lives (host or device).
template <typename SumSq>
std::vector<double> block_norms_by(const ModelConfig& cfg, SumSq sum_sq) {
    const int L = cfg.L;
    const auto sizes = param_sizes(cfg);
    const auto offsets = param_offsets(cfg);
    std::vector<double> sq(L, 0.0);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (i == P_WTE || i == P_WPE || i == P_LNFW || i == P_LNFB || sizes[i] == 0) continue;
        const size_t per_layer = sizes[i] / L;
        for (int l = 0; l < L; l++) sq[l] += sum_sq(offsets[i] + l * per_layer, per_layer);
    }
    for (double& s : sq) s = std::sqrt(s);
    return sq;
}

// block_norms_by of a host buffer `flat` (num_parameters elements).
template <typename Real>
std::vector<double> block_norms(const Real* flat, const ModelConfig& cfg) {
    return block_norms_by(cfg, [&](size_t offset, size_t n) { return sum_of_squares(flat + offset, n); });
}

// a[i]·b[i] elementwise (equal sizes): e.g. the scale-free gradient ‖∂L/∂X_i‖·RMS(X_i).
inline std::vector<double> products(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> out(a.size());
    for (size_t i = 0; i < a.size(); i++) out[i] = a[i] * b[i];
    return out;
}

// ---------------------------------------------------------------------------------------------
// The diagnostics of any model Gpt2<Ops> (gpt2.h), written once for every op set: the
// reductions come from its ops (sum_of_squares, stream_statistics, attention_logit_max,
// logit_statistics: the functions above on the CPU, the kernels of stats.cuh and
// diagnostics.cuh on CUDA), the tensors from its accessors. Both backends' forward_stats and
// fcproj_grad_norms call these; ./eval and the tests call them on a CPU model.

// sqrt(mean x²) over n elements of the model's memory.
template <class Model, typename E>
double model_rms(Model& m, const E* x, size_t n) {
    return std::sqrt(m.ops.sum_of_squares(x, n) / (double)n);
}

// All of a `stats` record of the last forward (backend.h, ForwardStats); call it before
// backward, which overwrites the logits.
template <class Model>
ForwardStats forward_stats(Model& m) {
    const int L = m.cfg.L, C = m.cfg.C;
    ForwardStats f;
    for (int j = 0; j <= 2 * L; j++) {
        f.stream.push_back(m.ops.stream_statistics(m.half_stream(j), m.N, C));
        f.rms.push_back(model_rms(m, m.half_stream(j), (size_t)m.N * C));
    }
    for (int l = 0; l < L; l++) {
        const auto& a = m.block_activations(l);
        f.attn_logit_max.push_back(m.ops.attention_logit_max(a.qkv.data(), m.B, m.T, C, m.cfg.NH));
        f.mlp_hidden_rms.push_back(model_rms(m, a.gelu.data(), a.gelu.size()));
    }
    f.param_norm =
        block_norms_by(m.cfg, [&](size_t o, size_t n) { return m.ops.sum_of_squares(m.params.data() + o, n); });
    f.logits = m.ops.logit_statistics(m.logits_data(), m.N, m.cfg.V, m.cfg.Vp);
    return f;
}

// ‖∂loss/∂W_fcproj‖ of each block: the MLP's output projection weight (4C×C, bias excluded),
// as accumulated since zero_grad.
template <class Model>
std::vector<double> fcproj_grad_norms(Model& m) {
    const size_t size = (size_t)4 * m.cfg.C * m.cfg.C;
    std::vector<double> out;
    for (int l = 0; l < m.cfg.L; l++) out.push_back(std::sqrt(m.ops.sum_of_squares(m.g.fcprojw + l * size, size)));
    return out;
}

}  // namespace diag

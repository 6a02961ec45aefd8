// diagnostics.h — the measurements that ./train's `stats` records and ./eval's JSON share
// (docs/experiments.md, *Diagnostics*):
//
//   * on the host, from plain arrays: attention_logit_max, the largest pre-softmax attention
//     logit q·k/√hs of one block (the signature of attention-logit growth); logit_statistics,
//     the largest output logit and the mean log-partition log Σ_v exp(z_v) over the V real
//     tokens; root_mean_square; sequence_perplexity_sum, Σ over sequences of exp(that
//     sequence's mean token loss); block_norms, the norm of each block's part of a
//     parameter-shaped buffer (the block parameter norms, their gradients' norms).
// The CPU ops offer the first two as ops; a `stats` record of any model, CPU or CUDA, is its
// forward_stats and fcproj_grad_norms (Gpt2, gpt2.h), through its ops.
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

// The norm of each block's part of a host buffer `flat` of num_parameters elements
// (block_param_parts, model.h): the block parameter norms, or their gradients' norms.
template <typename Real>
std::vector<double> block_norms(const Real* flat, const ModelConfig& cfg) {
    std::vector<double> sq(cfg.L, 0.0);
    for (const BlockPart& part : block_param_parts(cfg)) sq[part.block] += sum_of_squares(flat + part.offset, part.size);
    for (double& s : sq) s = std::sqrt(s);
    return sq;
}

// a[i]·b[i] elementwise (equal sizes): e.g. the scale-free gradient ‖∂L/∂X_i‖·RMS(X_i).
inline std::vector<double> products(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> out(a.size());
    for (size_t i = 0; i < a.size(); i++) out[i] = a[i] * b[i];
    return out;
}

}  // namespace diag

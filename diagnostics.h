// diagnostics.h — measurements of one forward pass that ./train's `stats` records and ./eval's
// JSON share (docs/experiments.md, *Diagnostics*), computed on the host from plain arrays:
//
//   * attention_logit_max: the largest pre-softmax attention logit q·k/√hs of one block, the
//     signature of attention-logit growth;
//   * logit_statistics: the largest output logit and the mean log-partition log Σ_v exp(z_v)
//     over the V real tokens;
//   * root_mean_square of a tensor (the scale that makes a gradient norm scale-free);
//   * sequence_perplexity_sum: Σ over sequences of exp(that sequence's mean token loss);
//   * block_norms: the norm of each block's part of a parameter-shaped buffer (the block
//     parameter norms, their gradients' norms).
//
// The model-level helpers at the end read any model with CpuModel's accessors (stream,
// half_stream, block_activations, logits_data, params, g), so CpuBackend, ./eval and the tests
// use one code.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend.h"
#include "block_norms.h"
#include "cpu_ops.h"
#include "model.h"

namespace diag {

// The largest pre-softmax attention logit of one block: max over b, heads h and causal pairs
// t' ≤ t of q_t·k_t'/√hs, with q, k the heads of qkv (B,T,3C) = [q | k | v], NH heads of
// hs = C/NH channels. Dot products in double.
template <typename T>
double attention_logit_max(const T* qkv, int B, int Tn, int C, int NH) {
    const int hs = C / NH;
    const double scale = 1.0 / std::sqrt((double)hs);
    double best = -std::numeric_limits<double>::infinity();
#pragma omp parallel for collapse(3) reduction(max : best) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < Tn; t++) {
                const T* q = qkv + ((size_t)b * Tn + t) * 3 * C + h * hs;
                for (int t2 = 0; t2 <= t; t2++) {
                    const T* k = qkv + ((size_t)b * Tn + t2) * 3 * C + C + h * hs;
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
template <typename T>
LogitStats logit_statistics(const T* logits, int N, int V, int Vp) {
    double best = -std::numeric_limits<double>::infinity();
    std::vector<double> log_z(N);
#pragma omp parallel for reduction(max : best) schedule(static)
    for (int n = 0; n < N; n++) {
        const T* z = logits + (size_t)n * Vp;
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
template <typename T>
double root_mean_square(const T* x, size_t n) {
    return std::sqrt(sum_of_squares(x, n) / (double)n);
}

// Σ over the B sequences (rows of losses (B,T)) of exp(mean over t of losses[b,t]); divided by
// the number of sequences it is the per-sequence perplexity `ppl_seq`.
template <typename T>
double sequence_perplexity_sum(const T* losses, int B, int Tn) {
    double total = 0;
    for (int b = 0; b < B; b++) {
        double sum = 0;
        for (int t = 0; t < Tn; t++) sum += losses[(size_t)b * Tn + t];
        total += std::exp(sum / Tn);
    }
    return total;
}

// block_norms_by of a host buffer `flat` (num_parameters elements).
template <typename T>
std::vector<double> block_norms(const T* flat, const ModelConfig& cfg) {
    return block_norms_by(cfg, [&](size_t offset, size_t n) { return sum_of_squares(flat + offset, n); });
}

// ---------------------------------------------------------------------------------------------
// The same on a model's last forward (CpuModel<T>, or any model with its accessors).

// RMS of the residual stream at the 2L + 1 half-block points (j = 0 embedding, 2l + 1 after
// block l's attention step, 2l + 2 = X_{l+1}).
template <typename Model>
std::vector<double> half_stream_rms(const Model& m) {
    std::vector<double> out;
    for (int j = 0; j <= 2 * m.cfg.L; j++) out.push_back(root_mean_square(m.half_stream(j), (size_t)m.N * m.cfg.C));
    return out;
}

// attention_logit_max of every block (L values).
template <typename Model>
std::vector<double> attention_logit_maxima(const Model& m) {
    std::vector<double> out;
    for (int l = 0; l < m.cfg.L; l++)
        out.push_back(attention_logit_max(m.block_activations(l).qkv.data(), m.B, m.Tn, m.cfg.C, m.cfg.NH));
    return out;
}

// logit_statistics of the model's logits; valid between forward and backward (backward turns
// the logits into their gradient).
template <typename Model>
LogitStats model_logit_statistics(const Model& m) {
    return logit_statistics(m.logits_data(), m.N, m.cfg.V, m.cfg.Vp);
}

// ‖θ_l‖ of each block's parameters (L values).
template <typename Model>
std::vector<double> block_param_norms(const Model& m) {
    return block_norms(m.params.data(), m.cfg);
}

// ‖∂loss/∂W_fcproj‖ of each block: the MLP's output projection weight (4C×C, bias excluded),
// from the model's parameter gradients (L values).
template <typename Model>
std::vector<double> fcproj_grad_norms(const Model& m) {
    const size_t size = (size_t)4 * m.cfg.C * m.cfg.C;
    std::vector<double> out;
    for (int l = 0; l < m.cfg.L; l++) out.push_back(std::sqrt(sum_of_squares(m.g.fcprojw + l * size, size)));
    return out;
}

// RMS of each block's MLP hidden activation, the GELU output (N,4C) that W_fcproj multiplies,
// at the last forward (L values).
template <typename Model>
std::vector<double> mlp_hidden_rms(const Model& m) {
    std::vector<double> out;
    for (int l = 0; l < m.cfg.L; l++) {
        const auto& gelu = m.block_activations(l).gelu;
        out.push_back(root_mean_square(gelu.data(), gelu.size()));
    }
    return out;
}

// a[i]·b[i] elementwise (equal sizes): e.g. the scale-free gradient ‖∂L/∂X_i‖·RMS(X_i).
inline std::vector<double> products(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> out(a.size());
    for (size_t i = 0; i < a.size(); i++) out[i] = a[i] * b[i];
    return out;
}

}  // namespace diag

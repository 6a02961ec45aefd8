// block_norms.h — the norm of each block's part of a buffer laid out like the parameters
// (file order, docs/experiments.md *Diagnostics*), written once for the CPU (diagnostics.h) and
// the CUDA backend (gpt2.cu), which differ only in where the buffer lives.
#pragma once
#include <cmath>
#include <vector>

#include "model.h"

namespace diag {

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

}  // namespace diag

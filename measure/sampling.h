// measure/sampling.h — text continuations of a prompt, drawn token by token from a CPU model: ./eval's
// -samples and ./train's -sample_every (docs/cli.md).
//
//   argmax         the likeliest token
//   sample_token   one token from softmax(logits / temperature) over the top_k likeliest
//   continue_text  the tokens after a prompt, each drawn from the logits at the last filled
//                  position of a (1, W) window (causal attention: the unfilled tail does not
//                  matter)
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "gpt2_cpu.h"
#include "util/rng.h"

// Index of the largest of the first V logits (the first one on ties).
inline int argmax(const float* logits, int V) {
    return (int)(std::max_element(logits, logits + V) - logits);
}

// A token drawn from softmax(logits / temperature) restricted to the top_k largest (0 = all);
// temperature 0 is greedy (the first largest logit, no draw from rng).
inline int sample_token(const float* logits, int V, double temperature, int top_k, Rng& rng) {
    if (temperature == 0) return argmax(logits, V);
    std::vector<std::pair<float, int>> cand(V);
    for (int v = 0; v < V; v++) cand[v] = {logits[v], v};
    size_t keep = (top_k > 0 && top_k < V) ? (size_t)top_k : (size_t)V;
    std::partial_sort(cand.begin(), cand.begin() + keep, cand.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    std::vector<double> w(keep);
    double total = 0;
    for (size_t i = 0; i < keep; i++) total += w[i] = std::exp((cand[i].first - cand[0].first) / temperature);
    double u = rng.uniform() * total;
    for (size_t i = 0; i < keep; i++) {
        if (u < w[i]) return cand[i].second;
        u -= w[i];
    }
    return cand[keep - 1].second;
}

// The `count` tokens that follow `prompt` (P tokens, P + count ≤ gen.T), drawn with sample_token
// from `gen`, a CpuModel<float> of batch 1 holding the weights to sample from.
inline std::vector<int32_t> continue_text(CpuModel<float>& gen, const std::vector<int32_t>& prompt, int count,
                                          double temperature, int top_k, Rng& rng) {
    const int P = (int)prompt.size(), V = gen.cfg.V, Vp = gen.cfg.Vp;
    std::vector<int32_t> context(gen.T, 0), unused_targets(gen.T, 0);  // (1, W)
    std::copy(prompt.begin(), prompt.end(), context.begin());
    for (int pos = P; pos < P + count; pos++) {
        gen.forward(context.data(), unused_targets.data());
        context[pos] = sample_token(gen.logits_data() + (size_t)(pos - 1) * Vp, V, temperature, top_k, rng);
    }
    return std::vector<int32_t>(context.begin() + P, context.begin() + P + count);
}

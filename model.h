// model.h — the model's sizes and parameters, shared by every backend (CPU and CUDA):
//   * ModelConfig: sizes, LayerNorm placement and residual step Δt (docs/model.md §1, §4);
//   * the parts of a block: its two halves and the LayerNorms of each (docs/block.md);
//   * the parameter layout: which tensors exist, their shapes, their order in one flat
//     buffer and in checkpoint files (docs/formats.md §2), and which ones get weight decay
//     (docs/model.md §5);
//   * fresh initialisation (docs/model.md §3);
//   * StreamStats, the hidden-state statistics every backend reports (docs/statistics.md §1).
// The files that store a model are read and written by run/checkpoint.h.
// Shapes use B (batch), T (time), C (channels), NH (heads), L (layers), V (vocabulary),
// Vp (vocabulary padded for the embedding table), maxT (longest sequence).
#pragma once
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "util/errors.h"
#include "util/rng.h"

// ---------------------------------------------------------------------------------------------
// Configuration

// Where the LayerNorms sit in each residual step (docs/model.md §1). The integer values are
// the ones stored in checkpoint header[8].
enum class Placement : int { Pre = 0, Post = 1, Peri = 2 };

inline const char* placement_name(Placement p) {
    switch (p) {
        case Placement::Pre: return "pre";
        case Placement::Post: return "post";
        case Placement::Peri: return "peri";
    }
    return "?";
}

// Parses "pre" | "post" | "peri"; returns false for anything else.
inline bool parse_placement(const std::string& s, Placement* out) {
    if (s == "pre") { *out = Placement::Pre; return true; }
    if (s == "post") { *out = Placement::Post; return true; }
    if (s == "peri") { *out = Placement::Peri; return true; }
    return false;
}

struct ModelConfig {
    int maxT = 1024;  // longest sequence (rows of wpe)
    int V = 50257;    // real vocabulary: the softmax runs over these
    int Vp = 50304;   // padded vocabulary: rows of wte (V..Vp-1 never enter the loss)
    int L = 12;       // blocks
    int NH = 12;      // attention heads
    int C = 768;      // channels
    Placement placement = Placement::Pre;
    float dt = 1.0f;  // residual step Δt: every residual branch is scaled by it
};

// Which LayerNorms one residual step x → x' has, for each placement (docs/model.md §1). Every
// block is two such steps (halves), around attention and around the MLP:
//
//                  LN on the module's input   LN on the module's output   LN after the add
//     Pre-LN               yes (ln1/ln2)                 -                         -
//     Post-LN               -                            -                  yes (ln1/ln2)
//     Peri-LN              yes (ln1/ln2)           yes (ln1o/ln2o)                 -
struct NormPlan {
    bool input, output, after_add;
};

inline NormPlan norm_plan(Placement p) {
    switch (p) {
        case Placement::Pre: return {true, false, false};
        case Placement::Post: return {false, false, true};
        case Placement::Peri: return {true, true, false};
    }
    return {false, false, false};
}

// The two halves of a block: the residual step around attention, then the one around the MLP.
enum class Half : int { Attention = 0, Mlp = 1 };

// The three places a LayerNorm can have in a residual step (the columns of NormPlan).
enum class StepNorm { Input, Output, AfterAdd };

// How a backward op puts an input gradient into its output buffer (docs/block.md §2): Add
// adds it to what the buffer holds (+=, the default); Write stores it, for the op that
// produces the buffer first in a backward pass, so the buffer needs no zeroing before.
enum class GradOut { Add, Write };

// The model sizes of docs/model.md §4 by name, plus "d6", the small default for CPU-only machines.
// Returns false for an unknown name.
inline bool named_model_size(const std::string& name, ModelConfig* cfg) {
    struct Size { const char* name; int L, NH, C; };
    static const Size sizes[] = {
        {"d6", 6, 6, 384}, {"d12", 12, 12, 768}, {"d24", 24, 16, 1024},
        {"d36", 36, 20, 1280}, {"d48", 48, 25, 1600},
    };
    for (const Size& s : sizes) {
        if (name == s.name) {
            *cfg = ModelConfig{};
            cfg->L = s.L; cfg->NH = s.NH; cfg->C = s.C;
            return true;
        }
    }
    return false;
}

// A custom size "l{L}h{NH}c{C}", optionally followed by "v{V}" (vocabulary, default GPT-2's
// 50257) and "t{maxT}" (longest sequence, default 1024): "l16h2c64" is 16 blocks of 2 heads
// over 64 channels. Vp is V rounded up to a multiple of 64. Returns false when `spec` does not
// have this shape; throws InputError when it does but the sizes are unusable.
inline bool custom_model_size(const std::string& spec, ModelConfig* cfg) {
    size_t at = 0;
    // Reads `letter` and the digits after it into *value (left untouched when absent).
    auto field = [&](char letter, int* value) {
        if (at + 1 >= spec.size() || spec[at] != letter || !std::isdigit((unsigned char)spec[at + 1])) return false;
        long long n = 0;
        for (at++; at < spec.size() && std::isdigit((unsigned char)spec[at]); at++)
            n = std::min<long long>(n * 10 + (spec[at] - '0'), INT32_MAX);
        *value = (int)n;
        return true;
    };
    ModelConfig m;
    if (!field('l', &m.L) || !field('h', &m.NH) || !field('c', &m.C)) return false;
    field('v', &m.V);
    field('t', &m.maxT);
    if (at != spec.size()) return false;
    const struct { const char* name; int value, limit; } checks[] = {
        {"L", m.L, 1 << 12}, {"NH", m.NH, 1 << 12}, {"C", m.C, 1 << 16}, {"V", m.V, 1 << 24}, {"maxT", m.maxT, 1 << 20}};
    for (const auto& c : checks)
        if (c.value < 1 || c.value > c.limit)
            throw InputError("model size " + spec + ": " + c.name + " must be 1.." + std::to_string(c.limit));
    if (m.C % m.NH != 0)
        throw InputError("model size " + spec + ": channels C=" + std::to_string(m.C) +
                         " not divisible by heads NH=" + std::to_string(m.NH));
    m.Vp = (m.V + 63) / 64 * 64;
    *cfg = m;
    return true;
}

// A fresh model's sizes from a named size (d6..d48) or a custom one (l{L}h{NH}c{C}[v{V}][t{maxT}]).
// Returns false when `spec` is neither (then it names a checkpoint file).
inline bool model_size(const std::string& spec, ModelConfig* cfg) {
    return named_model_size(spec, cfg) || custom_model_size(spec, cfg);
}

// Throws InputError unless the sizes can describe a model (positive, heads divide channels).
inline void validate_config(const ModelConfig& c, const std::string& where) {
    if (c.maxT <= 0 || c.V <= 0 || c.Vp < c.V || c.L <= 0 || c.NH <= 0 || c.C <= 0)
        throw InputError(where + ": invalid model sizes (maxT, V, Vp, L, NH, C must be positive, Vp >= V)");
    if (c.C % c.NH != 0)
        throw InputError(where + ": channels C=" + std::to_string(c.C) + " not divisible by heads NH=" +
                         std::to_string(c.NH));
    if (!(c.dt > 0.0f) || !std::isfinite(c.dt)) throw InputError(where + ": residual step dt must be > 0");
}

// AdamW hyperparameters of one update (docs/model.md §5); weight_decay is the value for decaying tensors.
struct AdamWHyper {
    double lr, beta1, beta2, eps, weight_decay;
};

// ---------------------------------------------------------------------------------------------
// Parameter layout (docs/formats.md §2): the tensors in file order. The four Peri-LN output norms have
// size 0 for the other placements, so every backend indexes tensors the same way.

enum ParamIndex {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB, P_LN2W, P_LN2B,
    P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, P_LN1OW, P_LN1OB, P_LN2OW, P_LN2OB,
    NUM_PARAM_TENSORS
};

inline const char* param_name(int i) {
    static const char* names[NUM_PARAM_TENSORS] = {
        "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
        "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "ln1ow", "ln1ob", "ln2ow", "ln2ob"};
    return names[i];
}

// Weight decay applies to the 2-D tensors only (docs/model.md §5).
inline bool param_decays(int i) {
    return i == P_WTE || i == P_WPE || i == P_QKVW || i == P_ATTPROJW || i == P_FCW || i == P_FCPROJW;
}

// Number of floats in each tensor: the product of its shape (see ParamTensors).
inline std::array<size_t, NUM_PARAM_TENSORS> param_sizes(const ModelConfig& m) {
    const size_t C = m.C, L = m.L, Vp = m.Vp, maxT = m.maxT;
    const size_t peri = m.placement == Placement::Peri ? 1 : 0;
    return {Vp * C,                      // wte       (Vp, C)
            maxT * C,                    // wpe       (maxT, C)
            L * C, L * C,                // ln1w, ln1b  (L, C)
            L * 3 * C * C, L * 3 * C,    // qkvw (L, 3C, C), qkvb (L, 3C)
            L * C * C, L * C,            // attprojw (L, C, C), attprojb (L, C)
            L * C, L * C,                // ln2w, ln2b  (L, C)
            L * 4 * C * C, L * 4 * C,    // fcw (L, 4C, C), fcb (L, 4C)
            L * C * 4 * C, L * C,        // fcprojw (L, C, 4C), fcprojb (L, C)
            C, C,                        // lnfw, lnfb  (C)
            peri * L * C, peri * L * C,  // ln1ow, ln1ob (L, C), Peri-LN only
            peri * L * C, peri * L * C}; // ln2ow, ln2ob (L, C), Peri-LN only
}

// Offset of each tensor in the flat parameter buffer (file order).
inline std::array<size_t, NUM_PARAM_TENSORS> param_offsets(const ModelConfig& m) {
    std::array<size_t, NUM_PARAM_TENSORS> sizes = param_sizes(m), offsets{};
    size_t at = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) { offsets[i] = at; at += sizes[i]; }
    return offsets;
}

// The parts of the flat parameter buffer that belong to the blocks: each per-layer tensor's
// part of block l, tensor by tensor in file order, blocks in order within each (the embeddings
// and LNf belong to none). A block's parameter norm sums its parts.
struct BlockPart {
    int block;
    size_t offset, size;
};
inline std::vector<BlockPart> block_param_parts(const ModelConfig& m) {
    const auto sizes = param_sizes(m);
    const auto offsets = param_offsets(m);
    std::vector<BlockPart> parts;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (i == P_WTE || i == P_WPE || i == P_LNFW || i == P_LNFB || sizes[i] == 0) continue;
        const size_t per_layer = sizes[i] / m.L;
        for (int l = 0; l < m.L; l++) parts.push_back({l, offsets[i] + l * per_layer, per_layer});
    }
    return parts;
}

inline size_t num_parameters(const ModelConfig& m) {
    size_t n = 0;
    for (size_t s : param_sizes(m)) n += s;
    return n;
}

// Named pointers into one flat parameter (or gradient) buffer of element type T, in file order.
// Per-layer tensors are stacked along a leading L dimension; a linear layer's weight is
// (out, in), as PyTorch's nn.Linear stores it, and computes x·Wᵀ + b.
template <typename T>
struct ParamTensors {
    T* wte;       // (Vp, C)    token embedding; also the output head (tied)
    T* wpe;       // (maxT, C)  position embedding
    T* ln1w;      // (L, C)     LayerNorm of the attention step: its input (Pre, Peri) or after
    T* ln1b;      // (L, C)     the add (Post); gain and bias
    T* qkvw;      // (L, 3C, C) attention's query, key and value projections, stacked
    T* qkvb;      // (L, 3C)
    T* attprojw;  // (L, C, C)  attention's output projection
    T* attprojb;  // (L, C)
    T* ln2w;      // (L, C)     LayerNorm of the MLP step, as ln1
    T* ln2b;      // (L, C)
    T* fcw;       // (L, 4C, C) MLP's first layer
    T* fcb;       // (L, 4C)
    T* fcprojw;   // (L, C, 4C) MLP's output projection
    T* fcprojb;   // (L, C)
    T* lnfw;      // (C)        final LayerNorm
    T* lnfb;      // (C)
    T* ln1ow;     // (L, C)     Peri-LN only (0 elements otherwise): LayerNorm of attention's output
    T* ln1ob;     // (L, C)
    T* ln2ow;     // (L, C)     Peri-LN only: LayerNorm of the MLP's output
    T* ln2ob;     // (L, C)
};

template <typename T>
ParamTensors<T> param_tensors(T* base, const ModelConfig& m) {
    std::array<size_t, NUM_PARAM_TENSORS> off = param_offsets(m);
    T* p[NUM_PARAM_TENSORS];
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) p[i] = base + off[i];
    return {p[P_WTE], p[P_WPE], p[P_LN1W], p[P_LN1B], p[P_QKVW], p[P_QKVB], p[P_ATTPROJW],
            p[P_ATTPROJB], p[P_LN2W], p[P_LN2B], p[P_FCW], p[P_FCB], p[P_FCPROJW], p[P_FCPROJB],
            p[P_LNFW], p[P_LNFB], p[P_LN1OW], p[P_LN1OB], p[P_LN2OW], p[P_LN2OB]};
}

// Gain and bias of one LayerNorm (C each), in a view of weights or of gradients.
template <typename T>
struct NormWeights {
    T *w, *b;
};

// The LayerNorm `which` of one half of block l in a view of weights or gradients. The input
// LayerNorm and the one after the add (Post-LN) are both ln1 (attention half) or ln2 (MLP
// half); no placement has both. The output LayerNorm (Peri-LN) is ln1o or ln2o.
template <typename T>
NormWeights<T> step_norm(const ParamTensors<T>& t, int l, int C, Half half, StepNorm which) {
    const size_t o = (size_t)l * C;
    const bool attention = half == Half::Attention;
    if (which == StepNorm::Output)
        return attention ? NormWeights<T>{t.ln1ow + o, t.ln1ob + o} : NormWeights<T>{t.ln2ow + o, t.ln2ob + o};
    return attention ? NormWeights<T>{t.ln1w + o, t.ln1b + o} : NormWeights<T>{t.ln2w + o, t.ln2b + o};
}

// ---------------------------------------------------------------------------------------------
// Fresh initialisation (docs/model.md §3): weights N(0, 0.02); the residual output projections
// (attprojw, fcprojw) N(0, 0.02/sqrt(2L)); biases 0; LayerNorm gains 1 and biases 0.
// Tensors are filled in file order from one seeded stream, so a seed names one model.
inline void init_parameters(const ModelConfig& m, float* params, uint64_t seed) {
    std::array<size_t, NUM_PARAM_TENSORS> sizes = param_sizes(m), off = param_offsets(m);
    Rng rng(seed);
    const double residual_std = 0.02 / std::sqrt(2.0 * m.L);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        float* p = params + off[i];
        bool is_gain = i == P_LN1W || i == P_LN2W || i == P_LNFW || i == P_LN1OW || i == P_LN2OW;
        if (param_decays(i)) {
            double std = (i == P_ATTPROJW || i == P_FCPROJW) ? residual_std : 0.02;
            for (size_t k = 0; k < sizes[i]; k++) p[k] = (float)(std * rng.normal());
        } else {
            for (size_t k = 0; k < sizes[i]; k++) p[k] = is_gain ? 1.0f : 0.0f;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Hidden-state statistics of the residual stream X_i (N = B·T rows × C), docs/statistics.md §1.
struct StreamStats {
    double mean_abs = 0;   // mean over n, c of |X[n,c]|
    double entry_var = 0;  // mean over n of the variance over c of X[n,·]
    double data_var = 0;   // mean over c of the variance over n of X[·,c]
};

// cpu_fast_ops.h — the fast CPU ops that CpuModel<float> trains with: the same functions as the
// textbook reference in cpu_ops.h, with the same arguments, rearranged for speed. Only the ops
// whose reference is slow have a version here; the others (encoder, residual add, AdamW) are
// fast as written and are used as they are. test/test_fast_ops.cpp checks every op here against
// its reference at realistic sizes and with 1, 2 and 3 threads (docs/cpu_speed.md).
//
// What is different from the reference:
//   * matrix products, attention's included, go through gemm (matmul.h), a packed, blocked
//     product with an AVX-512 micro-kernel;
//   * sums along a row go through lane_sum (a fixed number of partial sums, added in a fixed
//     order), so the compiler can vectorise them; column sums run with channels innermost;
//   * the exponentials of softmax, cross-entropy and GELU use exp_fast, plain arithmetic
//     instead of an opaque libm call, and GELU is written as x·σ(2u) (one exponential, no tanh).
// Every order of summation is fixed by the sizes alone, never by the thread count, so results
// are the same bit for bit for any -threads.
//
// Shapes as in cpu_ops.h. float only (the gradient checks run the reference in double).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu_ops.h"
#include "matmul.h"

namespace fast {

// ---------------------------------------------------------------------------------------------
// Helpers for loops the compiler can vectorise.

// Σ_{i<n} f(i) accumulated in REDUCE_LANES partial sums (term i goes to partial i mod 16 for
// the full groups of 16, the tail to partials 0, 1, …), then added in order. A single running
// sum is a dependency chain the compiler may not reorder; 16 independent ones map onto vector
// registers. The order is fixed by n alone.
constexpr int REDUCE_LANES = 16;

template <typename T, typename F>
inline T lane_sum(int n, F f) {
    T part[REDUCE_LANES] = {};
    int i = 0;
    for (; i + REDUCE_LANES <= n; i += REDUCE_LANES)
#pragma omp simd
        for (int l = 0; l < REDUCE_LANES; l++) part[l] += f(i + l);
    for (int l = 0; i < n; i++, l++) part[l] += f(i);
    T s = 0;
    for (int l = 0; l < REDUCE_LANES; l++) s += part[l];
    return s;
}

// max_{i<n} x[i] in REDUCE_LANES running maxima (NaNs are skipped, as std::max(m, NaN) = m).
template <typename T>
inline T row_max(const T* x, int n) {
    T part[REDUCE_LANES];
    for (int l = 0; l < REDUCE_LANES; l++) part[l] = -INFINITY;
    int i = 0;
    for (; i + REDUCE_LANES <= n; i += REDUCE_LANES)
#pragma omp simd
        for (int l = 0; l < REDUCE_LANES; l++) part[l] = std::max(part[l], x[i + l]);
    for (int l = 0; i < n; i++, l++) part[l] = std::max(part[l], x[i]);
    T m = -INFINITY;
    for (int l = 0; l < REDUCE_LANES; l++) m = std::max(m, part[l]);
    return m;
}

// e^x in plain arithmetic, so loops calling it vectorise (libm's expf is a call):
// x = n·ln2 + r with n = round(x/ln2) and |r| ≤ ln2/2 (ln2 split in a high part with few
// bits, so n·ln2_hi is exact), e^r by its Taylor series to r⁷ (truncation < 1e-8, below
// float's rounding), and 2ⁿ written straight into the exponent bits. Accurate to a couple of
// ulp; x is clamped to [−87, 88] so 2ⁿ stays a normal float (e^−87 ≈ 2e−38 stands in for
// anything smaller); NaN stays NaN.
inline float exp_fast(float x) {
    x = std::min(std::max(x, -87.0f), 88.0f);
    const float shifter = 12582912.0f;  // 1.5·2²³: adding it rounds to an integer
    const float t = x * 1.44269504f + shifter;
    const float n = t - shifter;  // round(x / ln2)
    const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-6f;
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t bits;  // t's low mantissa bits hold n: bits(t) = bits(shifter) + n
    std::memcpy(&bits, &t, sizeof bits);
    const uint32_t scale_bits = (bits - 0x4B400000u + 127u) << 23;  // 2ⁿ
    float scale;
    std::memcpy(&scale, &scale_bits, sizeof scale);
    return p * scale;
}

// ---------------------------------------------------------------------------------------------
// LayerNorm (cpu_ops.h): the row sums through lane_sum, the weight gradients in column blocks.

inline void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int N, int C) {
    const float eps = 1e-5f;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= parallel_min_work())
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float sum = lane_sum<float>(C, [&](int c) { return x[c]; });
        const float m = sum / C;
        const float sq = lane_sum<float>(C, [&](int c) { return (x[c] - m) * (x[c] - m); });
        const float s = 1.0f / std::sqrt(sq / C + eps);
        float* y = out + (size_t)n * C;
        for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * w[c] + b[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

// Given dout (N,C): dinp += rstd·(g − mean(g) − x̂·mean(g·x̂)) (= with GradOut::Write) with
// g = dout·w and x̂ = (x − mean)·rstd; dw += Σ_n dout·x̂; db += Σ_n dout.
inline void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w, const float* mean,
                        const float* rstd, int N, int C, GradOut dinp_out = GradOut::Add) {
    const bool add = dinp_out == GradOut::Add;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= parallel_min_work())
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float* d = dout + (size_t)n * C;
        const float mu = mean[n], rs = rstd[n];
        const float g_mean = lane_sum<float>(C, [&](int c) { return d[c] * w[c]; }) / C;
        const float gx_mean = lane_sum<float>(C, [&](int c) { return d[c] * w[c] * (x[c] - mu) * rs; }) / C;
        float* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - mu) * rs;
            const float g = rs * (d[c] * w[c] - g_mean - xhat * gx_mean);
            dx[c] = add ? dx[c] + g : g;
        }
    }
    // Column sums over the N rows, in row order, for blocks of CB channels at a time (rows
    // outermost, so every read is a contiguous run of a row).
    constexpr int CB = 64;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= parallel_min_work())
    for (int c0 = 0; c0 < C; c0 += CB) {
        const int nc = std::min(CB, C - c0);
        float sum_dw[CB] = {}, sum_db[CB] = {};
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * C + c0;
            const float* x = inp + (size_t)n * C + c0;
            const float mu = mean[n], rs = rstd[n];
            for (int c = 0; c < nc; c++) {
                sum_dw[c] += d[c] * (x[c] - mu) * rs;
                sum_db[c] += d[c];
            }
        }
        for (int c = 0; c < nc; c++) {
            dw[c0 + c] += sum_dw[c];
            db[c0 + c] += sum_db[c];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Linear layer (cpu_ops.h) through gemm.

inline void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC, int OC) {
    gemm<float>(false, true, N, OC, IC, inp, IC, w, IC, 0.0f, out, OC);
    if (!bias) return;
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= parallel_min_work())
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += bias[o];
}

// dbias (OC) += Σ_n dout (N,OC), rows outermost over blocks of output channels.
inline void bias_backward(float* dbias, const float* dout, int N, int OC) {
    constexpr int OB = 64;  // output channels per block; rows outermost, as in layernorm_backward
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= parallel_min_work())
    for (int o0 = 0; o0 < OC; o0 += OB) {
        const int no = std::min(OB, OC - o0);
        float sum[OB] = {};
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * OC + o0;
            for (int o = 0; o < no; o++) sum[o] += d[o];
        }
        for (int o = 0; o < no; o++) dbias[o0 + o] += sum[o];
    }
}

// dinp (N,IC) += dout · w (= with GradOut::Write: gemm's beta = 0);  dw (OC,IC) += doutᵀ · inp;
// dbias (OC) += Σ_n dout (skipped when null).
inline void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w, int N, int IC,
                     int OC, GradOut dinp_out = GradOut::Add) {
    gemm<float>(false, false, N, IC, OC, dout, OC, w, IC, dinp_out == GradOut::Write ? 0.0f : 1.0f, dinp, IC);
    gemm<float>(true, false, OC, IC, N, dout, OC, inp, IC, 1.0f, dw, IC);
    if (dbias) bias_backward(dbias, dout, N, OC);
}

// ---------------------------------------------------------------------------------------------
// Causal self-attention (cpu_ops.h) as matrix products around a row softmax.
//
// Per (b, h) this is two matrix products around a row softmax, S = Q·Kᵀ and out = P·V, with
// Q, K, V the head's (float × hs) slices of qkv (row stride 3C). They go through gemm (run
// serially inside this loop over heads); P is zero above the diagonal, so P·V only sums t' ≤ t.
inline void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const float scale = 1.0f / std::sqrt((float)hs);
    const int C3 = 3 * C;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float* q = qkv + (size_t)b * T * C3 + h * hs;  // row t of Q at q + t·3C; K at +C, V at +2C
            float* a = att + ((size_t)b * NH + h) * T * T;      // (float × float)
            gemm<float>(false, true, T, T, hs, q, C3, q + C, C3, 0.0f, a, T);  // a = Q·Kᵀ
            for (int t = 0; t < T; t++) {
                float* row = a + (size_t)t * T;
                for (int t2 = 0; t2 <= t; t2++) row[t2] *= scale;
                const float max_score = row_max(row, t + 1);
                for (int t2 = 0; t2 <= t; t2++) row[t2] = exp_fast(row[t2] - max_score);
                const float sum = lane_sum<float>(t + 1, [&](int t2) { return row[t2]; });
                for (int t2 = 0; t2 <= t; t2++) row[t2] /= sum;
                for (int t2 = t + 1; t2 < T; t2++) row[t2] = 0;
            }
            gemm<float>(false, false, T, hs, T, a, T, q + 2 * C, C3, 0.0f, out + (size_t)b * T * C + h * hs, C);
        }
}

// dqkv (B,T,3C) = gradient of attention_forward given dout (B,T,C) (stored). Through the softmax:
// dscore[t'] = att[t'] · (datt[t'] − Σ_u att[u]·datt[u]) with datt[t'] = dout·v[t'].
// Per (b, h), with dO the head's slice of dout and dS the (scaled) dscores, zero above the
// diagonal: datt = dO·Vᵀ, then dQ = dS·K, dK = dSᵀ·Q, dV = Pᵀ·dO (gemm's beta = 0).
inline void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const float scale = 1.0f / std::sqrt((float)hs);
    const int C3 = 3 * C;
#pragma omp parallel
    {
        static thread_local std::vector<float> datt, dscore;  // (float × float) each, per thread
        datt.resize((size_t)T * T);
        dscore.resize((size_t)T * T);
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                const float* q = qkv + (size_t)b * T * C3 + h * hs;
                float* dq = dqkv + (size_t)b * T * C3 + h * hs;
                const float* d = dout + (size_t)b * T * C + h * hs;
                const float* a = att + ((size_t)b * NH + h) * T * T;
                gemm<float>(false, true, T, T, hs, d, C, q + 2 * C, C3, 0.0f, datt.data(), T);  // dO·Vᵀ
                for (int t = 0; t < T; t++) {
                    const float* arow = a + (size_t)t * T;
                    const float* da = datt.data() + (size_t)t * T;
                    float* ds = dscore.data() + (size_t)t * T;
                    const float weighted = lane_sum<float>(t + 1, [&](int t2) { return arow[t2] * da[t2]; });
                    for (int t2 = 0; t2 <= t; t2++) ds[t2] = arow[t2] * (da[t2] - weighted) * scale;
                    for (int t2 = t + 1; t2 < T; t2++) ds[t2] = 0;
                }
                gemm<float>(false, false, T, hs, T, dscore.data(), T, q + C, C3, 0.0f, dq, C3);        // dQ = dS·K
                gemm<float>(true, false, T, hs, T, dscore.data(), T, q, C3, 0.0f, dq + C, C3);         // dK = dSᵀ·Q
                gemm<float>(true, false, T, hs, T, a, T, d, C, 0.0f, dq + 2 * C, C3);                  // dV = Pᵀ·dO
            }
    }
}

// ---------------------------------------------------------------------------------------------
// GELU (cpu_ops.h), tanh approximation, evaluated as y = x·σ(2u) with σ(a) = 1/(1 + e^−a) — the
// same function, since 1 + tanh(u) = 2σ(2u) — so it needs one exp_fast instead of a libm tanh.

inline void gelu_forward(float* out, const float* inp, size_t n) {
    const float s = std::sqrt(2.0f / (float)M_PI);
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = s * (x + 0.044715f * x * x * x);
        out[i] = x / (1.0f + exp_fast(-2.0f * u));
    }
}

// dinp += dout · dy/dx (= with GradOut::Write),
// dy/dx = ½(1 + tanh u) + ½x(1 − tanh²u)·du/dx = σ + 2x·σ(1 − σ)·du/dx
// with σ = σ(2u) (½(1 + tanh u) = σ and 1 − tanh²u = 4σ(1 − σ)).
inline void gelu_backward(float* dinp, const float* dout, const float* inp, size_t n, GradOut dinp_out = GradOut::Add) {
    const bool add = dinp_out == GradOut::Add;
    const float s = std::sqrt(2.0f / (float)M_PI);
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = s * (x + 0.044715f * x * x * x);
        float sig = 1.0f / (1.0f + exp_fast(-2.0f * u));
        float du = s * (1.0f + 3.0f * 0.044715f * x * x);
        const float g = dout[i] * (sig + 2.0f * x * sig * (1.0f - sig) * du);
        dinp[i] = add ? dinp[i] + g : g;
    }
}

// ---------------------------------------------------------------------------------------------
// Softmax + cross-entropy (cpu_ops.h) with exp_fast; the backward writes the row's
// exponentials over it once, sums them, then scales.

inline void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* z = logits + (size_t)n * Vp;
        const float max_z = row_max(z, V);
        const float sum = lane_sum<float>(V, [&](int v) { return exp_fast(z[v] - max_z); });
        losses[n] = std::log(sum) + max_z - z[targets[n]];
    }
}

// Overwrites logits (N,Vp) with d(Σ_n dloss·loss_n)/dlogits = dloss·(softmax − onehot(target))
// for columns < V and 0 for the padding columns, recomputing the softmax (no stored probs):
// the row's exponentials are written over it once, summed, then scaled.
inline void crossentropy_backward_inplace(float* logits, const int32_t* targets, float dloss, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* z = logits + (size_t)n * Vp;
        const float max_z = row_max(z, V);
        for (int v = 0; v < V; v++) z[v] = exp_fast(z[v] - max_z);
        const float sum = lane_sum<float>(V, [&](int v) { return z[v]; });
        for (int v = 0; v < V; v++) z[v] = dloss * z[v] / sum;
        z[targets[n]] -= dloss;
        for (int v = V; v < Vp; v++) z[v] = 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Σ x² (cpu_ops.h) with each chunk summed by lane_sum.

// Σ x² over n elements in double, summed in fixed chunks (each with lane_sum) so the result
// is the same for any number of threads.
inline double sum_of_squares(const float* x, size_t n) {
    constexpr size_t CHUNK = 1 << 16;
    const size_t chunks = (n + CHUNK - 1) / CHUNK;
    double total = 0;
    static thread_local std::vector<double> partial;  // the calling thread's; shared below by pointer
    partial.assign(chunks, 0.0);
    double* part = partial.data();  // (inside the parallel region `partial` would name each thread's own)
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t k = 0; k < chunks; k++) {
        const float* xk = x + k * CHUNK;
        part[k] = lane_sum<double>((int)std::min(CHUNK, n - k * CHUNK), [&](int i) { return (double)xk[i] * xk[i]; });
    }
    for (double s : partial) total += s;
    return total;
}

}  // namespace fast

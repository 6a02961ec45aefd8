// cpu_ops.h — the CPU reference of every forward and backward op of the model, written to be
// read: plain loops, one op per function, OpenMP over independent rows or channels.
//
// Every op is a template on the element type T: float for training, double for the
// finite-difference tests. Backward ops ACCUMULATE (+=) into their gradient outputs, because
// a tensor can feed several consumers and gradients are summed over micro-batches.
//
// Shapes: B batch, T time, C channels, NH heads (head size hs = C/NH), N = B·T positions,
// V real vocabulary, Vp padded vocabulary, OC/IC output/input channels of a linear layer.
// Every parallel loop gives each thread its own outputs and fixes the order of every sum, so
// results do not depend on the number of threads.
//
// Speed (issue 7, docs/cpu_speed.md): the matrix products, attention's included, go through
// gemm (matmul.h); the other loops are arranged so the compiler vectorises them — sums along a
// row go through lane_sum (a fixed number of partial sums, added in a fixed order), column sums
// run with channels innermost, and the exponentials of softmax, cross-entropy and GELU use
// exp_fast (plain arithmetic instead of an opaque libm call). None of it depends on the thread
// count.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "matmul.h"
#include "backend.h"
#include "model.h"

// ---------------------------------------------------------------------------------------------
// Helpers.

// Loops over fewer elements than this run on one thread: waking and joining a team costs more
// than it saves (and, on a machine shared with other processes, often far more).
constexpr size_t PARALLEL_MIN_WORK = 1 << 18;

// The threshold the loops below test: PARALLEL_MIN_WORK, unless changed through this reference
// (the tests lower it so that the threaded branches run at their small sizes).
inline size_t& parallel_min_work() {
    static size_t threshold = PARALLEL_MIN_WORK;
    return threshold;
}

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

// e^x. For float, in plain arithmetic so loops calling it vectorise (libm's expf is a call):
// x = n·ln2 + r with n = round(x/ln2) and |r| ≤ ln2/2 (ln2 split in a high part with few
// bits, so n·ln2_hi is exact), e^r by its Taylor series to r⁷ (truncation < 1e-8, below
// float's rounding), and 2ⁿ written straight into the exponent bits. Accurate to a couple of
// ulp; x is clamped to [−87, 88] so 2ⁿ stays a normal float (e^−87 ≈ 2e−38 stands in for
// anything smaller); NaN stays NaN. double (the finite-difference tests) keeps std::exp.
template <typename T>
inline T exp_fast(T x) {
    if constexpr (std::is_same<T, float>::value) {
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
    } else {
        return std::exp(x);
    }
}

// ---------------------------------------------------------------------------------------------
// Encoder: token embedding plus position embedding.

// out (B,T,C) = wte[tokens[b,t]] + wpe[t]; tokens (B,T), wte (Vp,C), wpe (maxT,C).
template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C) {
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * Tn * C >= parallel_min_work())
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tn; t++) {
            T* o = out + ((size_t)b * Tn + t) * C;
            const T* tok = wte + (size_t)tokens[b * Tn + t] * C;
            const T* pos = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = tok[c] + pos[c];
        }
}

// dwte[tokens[b,t]] += dout[b,t]; dwpe[t] += dout[b,t]. Threads own blocks of channels, so a
// token that appears twice never races; within a block, positions are visited in order.
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C) {
    constexpr int CB = 64;  // channels per block
#pragma omp parallel for schedule(static) if ((size_t)B * Tn * C >= parallel_min_work())
    for (int c0 = 0; c0 < C; c0 += CB) {
        const int c1 = std::min(C, c0 + CB);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tn; t++) {
                const T* d = dout + ((size_t)b * Tn + t) * C;
                T* we = dwte + (size_t)tokens[b * Tn + t] * C;
                T* pe = dwpe + (size_t)t * C;
                for (int c = c0; c < c1; c++) {
                    we[c] += d[c];
                    pe[c] += d[c];
                }
            }
    }
}

// ---------------------------------------------------------------------------------------------
// LayerNorm over the C channels of each of N rows: y = (x − mean) · rstd · w + b,
// rstd = 1/sqrt(var + 1e-5), var biased. mean and rstd (N) are kept for the backward pass.

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N, int C) {
    const T eps = T(1e-5);
#pragma omp parallel for schedule(static) if ((size_t)N * C >= parallel_min_work())
    for (int n = 0; n < N; n++) {
        const T* x = inp + (size_t)n * C;
        const T sum = lane_sum<T>(C, [&](int c) { return x[c]; });
        const T m = sum / C;
        const T sq = lane_sum<T>(C, [&](int c) { return (x[c] - m) * (x[c] - m); });
        const T s = T(1) / std::sqrt(sq / C + eps);
        T* y = out + (size_t)n * C;
        for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * w[c] + b[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

// Given dout (N,C): dinp += rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dout·w and
// x̂ = (x − mean)·rstd; dw += Σ_n dout·x̂; db += Σ_n dout.
template <typename T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean,
                        const T* rstd, int N, int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= parallel_min_work())
    for (int n = 0; n < N; n++) {
        const T* x = inp + (size_t)n * C;
        const T* d = dout + (size_t)n * C;
        const T mu = mean[n], rs = rstd[n];
        const T g_mean = lane_sum<T>(C, [&](int c) { return d[c] * w[c]; }) / C;
        const T gx_mean = lane_sum<T>(C, [&](int c) { return d[c] * w[c] * (x[c] - mu) * rs; }) / C;
        T* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            T xhat = (x[c] - mu) * rs;
            dx[c] += rs * (d[c] * w[c] - g_mean - xhat * gx_mean);
        }
    }
    // Column sums over the N rows, in row order, for blocks of CB channels at a time (rows
    // outermost, so every read is a contiguous run of a row).
    constexpr int CB = 64;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= parallel_min_work())
    for (int c0 = 0; c0 < C; c0 += CB) {
        const int nc = std::min(CB, C - c0);
        T sum_dw[CB] = {}, sum_db[CB] = {};
        for (int n = 0; n < N; n++) {
            const T* d = dout + (size_t)n * C + c0;
            const T* x = inp + (size_t)n * C + c0;
            const T mu = mean[n], rs = rstd[n];
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
// Linear layer: out (N,OC) = inp (N,IC) · wᵀ + bias, w (OC,IC) as PyTorch stores it.

template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int IC, int OC) {
    gemm<T>(false, true, N, OC, IC, inp, IC, w, IC, T(0), out, OC);
    if (!bias) return;
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= parallel_min_work())
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += bias[o];
}

// dinp (N,IC) += dout · w;  dw (OC,IC) += doutᵀ · inp;  dbias (OC) += Σ_n dout.
template <typename T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N, int IC,
                     int OC) {
    gemm<T>(false, false, N, IC, OC, dout, OC, w, IC, T(1), dinp, IC);
    gemm<T>(true, false, OC, IC, N, dout, OC, inp, IC, T(1), dw, IC);
    if (!dbias) return;
    constexpr int OB = 64;  // output channels per block; rows outermost, as in layernorm_backward
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= parallel_min_work())
    for (int o0 = 0; o0 < OC; o0 += OB) {
        const int no = std::min(OB, OC - o0);
        T sum[OB] = {};
        for (int n = 0; n < N; n++) {
            const T* d = dout + (size_t)n * OC + o0;
            for (int o = 0; o < no; o++) sum[o] += d[o];
        }
        for (int o = 0; o < no; o++) dbias[o0 + o] += sum[o];
    }
}

// ---------------------------------------------------------------------------------------------
// Causal multi-head self-attention on the packed projections qkv (B,T,3C) = [q | k | v].
// For head h and time t: att[b,h,t,t'] = softmax_{t' ≤ t}(q·k / sqrt(hs)) (0 for t' > t),
// out[b,t,h·hs:(h+1)·hs] = Σ_{t'} att · v. att (B,NH,T,T) is kept for the backward pass.
//
// Per (b, h) this is two matrix products around a row softmax, S = Q·Kᵀ and out = P·V, with
// Q, K, V the head's (T × hs) slices of qkv (row stride 3C). They go through gemm (run
// serially inside this loop over heads); P is zero above the diagonal, so P·V only sums t' ≤ t.
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
    const int hs = C / NH;
    const T scale = T(1) / std::sqrt(T(hs));
    const int C3 = 3 * C;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const T* q = qkv + (size_t)b * Tn * C3 + h * hs;  // row t of Q at q + t·3C; K at +C, V at +2C
            T* a = att + ((size_t)b * NH + h) * Tn * Tn;      // (T × T)
            gemm<T>(false, true, Tn, Tn, hs, q, C3, q + C, C3, T(0), a, Tn);  // a = Q·Kᵀ
            for (int t = 0; t < Tn; t++) {
                T* row = a + (size_t)t * Tn;
                for (int t2 = 0; t2 <= t; t2++) row[t2] *= scale;
                const T max_score = row_max(row, t + 1);
                for (int t2 = 0; t2 <= t; t2++) row[t2] = exp_fast(row[t2] - max_score);
                const T sum = lane_sum<T>(t + 1, [&](int t2) { return row[t2]; });
                for (int t2 = 0; t2 <= t; t2++) row[t2] /= sum;
                for (int t2 = t + 1; t2 < Tn; t2++) row[t2] = 0;
            }
            gemm<T>(false, false, Tn, hs, Tn, a, Tn, q + 2 * C, C3, T(0), out + (size_t)b * Tn * C + h * hs, C);
        }
}

// dqkv (B,T,3C) += gradient of attention_forward given dout (B,T,C). Through the softmax:
// dscore[t'] = att[t'] · (datt[t'] − Σ_u att[u]·datt[u]) with datt[t'] = dout·v[t'].
// Per (b, h), with dO the head's slice of dout and dS the (scaled) dscores, zero above the
// diagonal: datt = dO·Vᵀ, then dQ += dS·K, dK += dSᵀ·Q, dV += Pᵀ·dO.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int C, int NH) {
    const int hs = C / NH;
    const T scale = T(1) / std::sqrt(T(hs));
    const int C3 = 3 * C;
#pragma omp parallel
    {
        static thread_local std::vector<T> datt, dscore;  // (T × T) each, per thread
        datt.resize((size_t)Tn * Tn);
        dscore.resize((size_t)Tn * Tn);
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                const T* q = qkv + (size_t)b * Tn * C3 + h * hs;
                T* dq = dqkv + (size_t)b * Tn * C3 + h * hs;
                const T* d = dout + (size_t)b * Tn * C + h * hs;
                const T* a = att + ((size_t)b * NH + h) * Tn * Tn;
                gemm<T>(false, true, Tn, Tn, hs, d, C, q + 2 * C, C3, T(0), datt.data(), Tn);  // dO·Vᵀ
                for (int t = 0; t < Tn; t++) {
                    const T* arow = a + (size_t)t * Tn;
                    const T* da = datt.data() + (size_t)t * Tn;
                    T* ds = dscore.data() + (size_t)t * Tn;
                    const T weighted = lane_sum<T>(t + 1, [&](int t2) { return arow[t2] * da[t2]; });
                    for (int t2 = 0; t2 <= t; t2++) ds[t2] = arow[t2] * (da[t2] - weighted) * scale;
                    for (int t2 = t + 1; t2 < Tn; t2++) ds[t2] = 0;
                }
                gemm<T>(false, false, Tn, hs, Tn, dscore.data(), Tn, q + C, C3, T(1), dq, C3);        // dQ += dS·K
                gemm<T>(true, false, Tn, hs, Tn, dscore.data(), Tn, q, C3, T(1), dq + C, C3);         // dK += dSᵀ·Q
                gemm<T>(true, false, Tn, hs, Tn, a, Tn, d, C, T(1), dq + 2 * C, C3);                  // dV += Pᵀ·dO
            }
    }
}

// ---------------------------------------------------------------------------------------------
// GELU, tanh approximation (GPT-2's): y = ½·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³).
// n elements. Evaluated as y = x·σ(2u) with σ(a) = 1/(1 + e^−a) — the same function, since
// 1 + tanh(u) = 2σ(2u) — so it needs one exp_fast instead of a libm tanh call.

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
    const T s = std::sqrt(T(2) / T(M_PI));
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t i = 0; i < n; i++) {
        T x = inp[i];
        T u = s * (x + T(0.044715) * x * x * x);
        out[i] = x / (T(1) + exp_fast(T(-2) * u));
    }
}

// dinp += dout · dy/dx, dy/dx = ½(1 + tanh u) + ½x(1 − tanh²u)·du/dx = σ + 2x·σ(1 − σ)·du/dx
// with σ = σ(2u) (½(1 + tanh u) = σ and 1 − tanh²u = 4σ(1 − σ)).
template <typename T>
void gelu_backward(T* dinp, const T* dout, const T* inp, size_t n) {
    const T s = std::sqrt(T(2) / T(M_PI));
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t i = 0; i < n; i++) {
        T x = inp[i];
        T u = s * (x + T(0.044715) * x * x * x);
        T sig = T(1) / (T(1) + exp_fast(T(-2) * u));
        T du = s * (T(1) + T(3) * T(0.044715) * x * x);
        dinp[i] += dout[i] * (sig + T(2) * x * sig * (T(1) - sig) * du);
    }
}

// ---------------------------------------------------------------------------------------------
// Residual step: out = x + Δt · f over n elements; backward dx += dout, df += Δt · dout.

template <typename T>
void residual_forward(T* out, const T* x, const T* f, T dt, size_t n) {
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t i = 0; i < n; i++) out[i] = x[i] + dt * f[i];
}

template <typename T>
void residual_backward(T* dx, T* df, const T* dout, T dt, size_t n) {
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t i = 0; i < n; i++) {
        dx[i] += dout[i];
        df[i] += dt * dout[i];
    }
}

// ---------------------------------------------------------------------------------------------
// Softmax + cross-entropy over the real vocabulary. logits (N,Vp); only columns < V count.
// losses (N) = log Σ_v exp(logit_v) − logit_target.

template <typename T>
void crossentropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const T* z = logits + (size_t)n * Vp;
        const T max_z = row_max(z, V);
        const T sum = lane_sum<T>(V, [&](int v) { return exp_fast(z[v] - max_z); });
        losses[n] = std::log(sum) + max_z - z[targets[n]];
    }
}

// Overwrites logits (N,Vp) with d(Σ_n dloss·loss_n)/dlogits = dloss·(softmax − onehot(target))
// for columns < V and 0 for the padding columns, recomputing the softmax (no stored probs):
// the row's exponentials are written over it once, summed, then scaled.
template <typename T>
void crossentropy_backward_inplace(T* logits, const int32_t* targets, T dloss, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        T* z = logits + (size_t)n * Vp;
        const T max_z = row_max(z, V);
        for (int v = 0; v < V; v++) z[v] = exp_fast(z[v] - max_z);
        const T sum = lane_sum<T>(V, [&](int v) { return z[v]; });
        for (int v = 0; v < V; v++) z[v] = dloss * z[v] / sum;
        z[targets[n]] -= dloss;
        for (int v = V; v < Vp; v++) z[v] = 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Hidden-state statistics of a residual stream X (N,C), SPEC §5, accumulated in double:
// mean |X|, the mean over rows of the variance across channels (entry_var) and the mean over
// channels of the variance across rows (data_var); variances are biased (divide by C or N).
template <typename T>
StreamStats stream_statistics(const T* x, int N, int C) {
    std::vector<double> col_sum(C, 0.0), col_sq(C, 0.0);
    double abs_sum = 0, entry_var_sum = 0;
    for (int n = 0; n < N; n++) {
        const T* row = x + (size_t)n * C;
        double s = 0, sq = 0;
        for (int c = 0; c < C; c++) {
            const double v = row[c];
            abs_sum += std::fabs(v);
            s += v;
            sq += v * v;
            col_sum[c] += v;
            col_sq[c] += v * v;
        }
        const double mean = s / C;
        entry_var_sum += sq / C - mean * mean;
    }
    double data_var_sum = 0;
    for (int c = 0; c < C; c++) {
        const double mean = col_sum[c] / N;
        data_var_sum += col_sq[c] / N - mean * mean;
    }
    StreamStats st;
    st.mean_abs = abs_sum / ((double)N * C);
    st.entry_var = entry_var_sum / N;
    st.data_var = data_var_sum / C;
    return st;
}

// ---------------------------------------------------------------------------------------------
// Optimiser pieces (SPEC §2).

// Σ x² over n elements in double, summed in fixed chunks (each with lane_sum) so the result
// is the same for any number of threads.
template <typename T>
double sum_of_squares(const T* x, size_t n) {
    constexpr size_t CHUNK = 1 << 16;
    const size_t chunks = (n + CHUNK - 1) / CHUNK;
    double total = 0;
    static thread_local std::vector<double> partial;  // the calling thread's; shared below by pointer
    partial.assign(chunks, 0.0);
    double* part = partial.data();  // (inside the parallel region `partial` would name each thread's own)
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t k = 0; k < chunks; k++) {
        const T* xk = x + k * CHUNK;
        part[k] = lane_sum<double>((int)std::min(CHUNK, n - k * CHUNK), [&](int i) { return (double)xk[i] * xk[i]; });
    }
    for (double s : partial) total += s;
    return total;
}

// One AdamW update of n parameters at step t (1-based), with gradients multiplied by
// grad_scale first (the clipping factor):
//   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;  p ← p − lr·(m̂/(√v̂ + ε) + wd·p).
// Pass weight_decay = 0 for tensors that do not decay.
template <typename T>
void adamw_update(T* params, const T* grads, T* m, T* v, size_t n, const AdamWHyper& h, int t,
                  double grad_scale) {
    // The hyperparameters as local constants: the compiler then knows the stores below cannot
    // change them, and the loop vectorises (sqrt too, when built with -fno-math-errno).
    const double beta1 = h.beta1, beta2 = h.beta2, lr = h.lr, eps = h.eps, wd = h.weight_decay;
    const double correction1 = 1.0 - std::pow(beta1, t);
    const double correction2 = 1.0 - std::pow(beta2, t);
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t i = 0; i < n; i++) {
        const T g = (T)(grads[i] * grad_scale);
        const T mi = (T)(beta1 * m[i] + (1.0 - beta1) * g);
        const T vi = (T)(beta2 * v[i] + (1.0 - beta2) * g * g);
        m[i] = mi;
        v[i] = vi;
        const double m_hat = mi / correction1;
        const double v_hat = vi / correction2;
        params[i] -= (T)(lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * params[i]));
    }
}

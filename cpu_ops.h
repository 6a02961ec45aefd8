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
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "matmul.h"
#include "backend.h"
#include "model.h"

// ---------------------------------------------------------------------------------------------
// Encoder: token embedding plus position embedding.

// out (B,T,C) = wte[tokens[b,t]] + wpe[t]; tokens (B,T), wte (Vp,C), wpe (maxT,C).
template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tn; t++) {
            T* o = out + ((size_t)b * Tn + t) * C;
            const T* tok = wte + (size_t)tokens[b * Tn + t] * C;
            const T* pos = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = tok[c] + pos[c];
        }
}

// dwte[tokens[b,t]] += dout[b,t]; dwpe[t] += dout[b,t]. Threads own channel ranges, so a
// token that appears twice never races.
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C) {
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tn; t++) {
                T d = dout[((size_t)b * Tn + t) * C + c];
                dwte[(size_t)tokens[b * Tn + t] * C + c] += d;
                dwpe[(size_t)t * C + c] += d;
            }
}

// ---------------------------------------------------------------------------------------------
// LayerNorm over the C channels of each of N rows: y = (x − mean) · rstd · w + b,
// rstd = 1/sqrt(var + 1e-5), var biased. mean and rstd (N) are kept for the backward pass.

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N, int C) {
    const T eps = T(1e-5);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const T* x = inp + (size_t)n * C;
        T sum = 0;
        for (int c = 0; c < C; c++) sum += x[c];
        const T m = sum / C;
        T sq = 0;
        for (int c = 0; c < C; c++) sq += (x[c] - m) * (x[c] - m);
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
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const T* x = inp + (size_t)n * C;
        const T* d = dout + (size_t)n * C;
        T g_mean = 0, gx_mean = 0;
        for (int c = 0; c < C; c++) {
            T g = d[c] * w[c];
            g_mean += g;
            gx_mean += g * (x[c] - mean[n]) * rstd[n];
        }
        g_mean /= C;
        gx_mean /= C;
        T* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            T xhat = (x[c] - mean[n]) * rstd[n];
            dx[c] += rstd[n] * (d[c] * w[c] - g_mean - xhat * gx_mean);
        }
    }
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        T sum_dw = 0, sum_db = 0;
        for (int n = 0; n < N; n++) {
            T d = dout[(size_t)n * C + c];
            sum_dw += d * (inp[(size_t)n * C + c] - mean[n]) * rstd[n];
            sum_db += d;
        }
        dw[c] += sum_dw;
        db[c] += sum_db;
    }
}

// ---------------------------------------------------------------------------------------------
// Linear layer: out (N,OC) = inp (N,IC) · wᵀ + bias, w (OC,IC) as PyTorch stores it.

template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int IC, int OC) {
    gemm<T>(false, true, N, OC, IC, inp, IC, w, IC, T(0), out, OC);
    if (!bias) return;
#pragma omp parallel for schedule(static)
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
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; o++) {
        T sum = 0;
        for (int n = 0; n < N; n++) sum += dout[(size_t)n * OC + o];
        dbias[o] += sum;
    }
}

// ---------------------------------------------------------------------------------------------
// Causal multi-head self-attention on the packed projections qkv (B,T,3C) = [q | k | v].
// For head h and time t: att[b,h,t,t'] = softmax_{t' ≤ t}(q·k / sqrt(hs)) (0 for t' > t),
// out[b,t,h·hs:(h+1)·hs] = Σ_{t'} att · v. att (B,NH,T,T) is kept for the backward pass.

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
    const int hs = C / NH;
    const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < Tn; t++) {
                const T* q = qkv + ((size_t)b * Tn + t) * 3 * C + h * hs;
                T* a = att + (((size_t)b * NH + h) * Tn + t) * Tn;
                T max_score = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const T* k = qkv + ((size_t)b * Tn + t2) * 3 * C + C + h * hs;
                    T dot = 0;
                    for (int i = 0; i < hs; i++) dot += q[i] * k[i];
                    a[t2] = dot * scale;
                    max_score = std::max(max_score, a[t2]);
                }
                T sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = std::exp(a[t2] - max_score);
                    sum += a[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) a[t2] /= sum;
                for (int t2 = t + 1; t2 < Tn; t2++) a[t2] = 0;
                T* o = out + ((size_t)b * Tn + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const T* v = qkv + ((size_t)b * Tn + t2) * 3 * C + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
}

// dqkv (B,T,3C) += gradient of attention_forward given dout (B,T,C). Through the softmax:
// dscore[t'] = att[t'] · (datt[t'] − Σ_u att[u]·datt[u]) with datt[t'] = dout·v[t'].
// One thread per (b, h): keys and values at t' receive contributions from every t ≥ t'.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int C, int NH) {
    const int hs = C / NH;
    const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < Tn; t++) {
                const T* a = att + (((size_t)b * NH + h) * Tn + t) * Tn;
                const T* d = dout + ((size_t)b * Tn + t) * C + h * hs;
                const T* q = qkv + ((size_t)b * Tn + t) * 3 * C + h * hs;
                T* dq = dqkv + ((size_t)b * Tn + t) * 3 * C + h * hs;
                T weighted = 0;  // Σ_u att[u]·datt[u]
                for (int t2 = 0; t2 <= t; t2++) {
                    const T* v = qkv + ((size_t)b * Tn + t2) * 3 * C + 2 * C + h * hs;
                    T datt = 0;
                    for (int i = 0; i < hs; i++) datt += d[i] * v[i];
                    weighted += a[t2] * datt;
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    const T* k = qkv + ((size_t)b * Tn + t2) * 3 * C + C + h * hs;
                    const T* v = qkv + ((size_t)b * Tn + t2) * 3 * C + 2 * C + h * hs;
                    T* dk = dqkv + ((size_t)b * Tn + t2) * 3 * C + C + h * hs;
                    T* dv = dqkv + ((size_t)b * Tn + t2) * 3 * C + 2 * C + h * hs;
                    T datt = 0;
                    for (int i = 0; i < hs; i++) datt += d[i] * v[i];
                    const T dscore = a[t2] * (datt - weighted) * scale;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dscore * k[i];
                        dk[i] += dscore * q[i];
                        dv[i] += a[t2] * d[i];
                    }
                }
            }
}

// ---------------------------------------------------------------------------------------------
// GELU, tanh approximation (GPT-2's): y = ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). n elements.

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
    const T s = std::sqrt(T(2) / T(M_PI));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        T x = inp[i];
        out[i] = T(0.5) * x * (T(1) + std::tanh(s * (x + T(0.044715) * x * x * x)));
    }
}

// dinp += dout · dy/dx.
template <typename T>
void gelu_backward(T* dinp, const T* dout, const T* inp, size_t n) {
    const T s = std::sqrt(T(2) / T(M_PI));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        T x = inp[i];
        T u = s * (x + T(0.044715) * x * x * x);
        T th = std::tanh(u);
        T du = s * (T(1) + T(3) * T(0.044715) * x * x);
        dinp[i] += dout[i] * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du);
    }
}

// ---------------------------------------------------------------------------------------------
// Residual step: out = x + Δt · f over n elements; backward dx += dout, df += Δt · dout.

template <typename T>
void residual_forward(T* out, const T* x, const T* f, T dt, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = x[i] + dt * f[i];
}

template <typename T>
void residual_backward(T* dx, T* df, const T* dout, T dt, size_t n) {
#pragma omp parallel for schedule(static)
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
        T max_z = -INFINITY;
        for (int v = 0; v < V; v++) max_z = std::max(max_z, z[v]);
        T sum = 0;
        for (int v = 0; v < V; v++) sum += std::exp(z[v] - max_z);
        losses[n] = std::log(sum) + max_z - z[targets[n]];
    }
}

// Overwrites logits (N,Vp) with d(Σ_n dloss·loss_n)/dlogits = dloss·(softmax − onehot(target))
// for columns < V and 0 for the padding columns, recomputing the softmax (no stored probs).
template <typename T>
void crossentropy_backward_inplace(T* logits, const int32_t* targets, T dloss, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        T* z = logits + (size_t)n * Vp;
        T max_z = -INFINITY;
        for (int v = 0; v < V; v++) max_z = std::max(max_z, z[v]);
        T sum = 0;
        for (int v = 0; v < V; v++) sum += std::exp(z[v] - max_z);
        for (int v = 0; v < V; v++) z[v] = dloss * std::exp(z[v] - max_z) / sum;
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

// Σ x² over n elements in double, summed in fixed chunks so the result is the same for any
// number of threads.
template <typename T>
double sum_of_squares(const T* x, size_t n) {
    constexpr size_t CHUNK = 1 << 16;
    const size_t chunks = (n + CHUNK - 1) / CHUNK;
    double total = 0;
    static thread_local std::vector<double> partial;
    partial.assign(chunks, 0.0);
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < chunks; k++) {
        double s = 0;
        for (size_t i = k * CHUNK; i < std::min(n, (k + 1) * CHUNK); i++) s += (double)x[i] * x[i];
        partial[k] = s;
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
    const double correction1 = 1.0 - std::pow(h.beta1, t);
    const double correction2 = 1.0 - std::pow(h.beta2, t);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const T g = (T)(grads[i] * grad_scale);
        m[i] = (T)(h.beta1 * m[i] + (1.0 - h.beta1) * g);
        v[i] = (T)(h.beta2 * v[i] + (1.0 - h.beta2) * g * g);
        const double m_hat = m[i] / correction1;
        const double v_hat = v[i] / correction2;
        params[i] -= (T)(h.lr * (m_hat / (std::sqrt(v_hat) + h.eps) + h.weight_decay * params[i]));
    }
}

// cpu_ops.h — the textbook reference of every forward and backward op of the model: plain loops
// that follow the equations of docs/model.md one line at a time, std::exp, std::tanh, one op per
// function. They are what the double-precision gradient checks certify and what the CUDA
// kernels and the fast CPU ops (cpu_fast_ops.h) are tested against.
//
// Every op is a template on the element type Real: double for the gradient checks, float where a
// test compares it with a faster op. Backward ops ACCUMULATE (+=) into their gradient outputs,
// because a tensor can feed several consumers and gradients are summed over micro-batches.
// The input gradients of layernorm_backward, matmul_backward, gelu_backward and
// residual_backward can be written instead (GradOut::Write, model.h) by the op that produces
// them first; the value stored is the one that adding into zeros would give (bit for bit, but
// for the sign of a zero).
//
// Shapes: B batch, T time, C channels, NH heads (head size hs = C/NH), N = B·T positions,
// V real vocabulary, Vp padded vocabulary, OC/IC output/input channels of a linear layer.
// Loops over independent rows may run on several OpenMP threads; each thread then writes its
// own outputs and every sum runs in one fixed order, so results do not depend on the number
// of threads.
//
// The optimiser pieces at the end (sum_of_squares, adamw_update) and the hidden-state
// statistics serve both CPU paths.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model.h"

// Loops over fewer elements than this run on one thread: waking and joining a team costs more
// than it saves (and, on a machine shared with other processes, often far more).
constexpr size_t PARALLEL_MIN_WORK = 1 << 18;

// The threshold the loops here and in cpu_fast_ops.h test: PARALLEL_MIN_WORK, unless changed
// through this reference (the tests lower it so that the threaded branches run at small sizes).
inline size_t& parallel_min_work() {
    static size_t threshold = PARALLEL_MIN_WORK;
    return threshold;
}

// ---------------------------------------------------------------------------------------------
// Encoder: token embedding plus position embedding.

// out (B,T,C) = wte[tokens[b,t]] + wpe[t]; tokens (B,T), wte (Vp,C), wpe (maxT,C).
template <typename Real>
void encoder_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * T * C >= parallel_min_work())
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            Real* o = out + ((size_t)b * T + t) * C;
            const Real* tok = wte + (size_t)tokens[b * T + t] * C;
            const Real* pos = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = tok[c] + pos[c];
        }
}

// dwte[tokens[b,t]] += dout[b,t]; dwpe[t] += dout[b,t]. Threads own blocks of channels, so a
// token that appears twice never races; within a block, positions are visited in order.
template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int B, int T, int C) {
    constexpr int CB = 64;  // channels per block
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= parallel_min_work())
    for (int c0 = 0; c0 < C; c0 += CB) {
        const int c1 = std::min(C, c0 + CB);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const Real* d = dout + ((size_t)b * T + t) * C;
                Real* we = dwte + (size_t)tokens[b * T + t] * C;
                Real* pe = dwpe + (size_t)t * C;
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

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* w, const Real* b, int N, int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= parallel_min_work())
    for (int n = 0; n < N; n++) {
        const Real* x = inp + (size_t)n * C;
        Real m = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        Real var = 0;
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        var /= C;
        const Real s = Real(1) / std::sqrt(var + Real(1e-5));
        Real* y = out + (size_t)n * C;
        for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * w[c] + b[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

// Given dout (N,C): dinp += rstd·(g − mean(g) − x̂·mean(g·x̂)) (= with GradOut::Write) with
// g = dout·w and x̂ = (x − mean)·rstd; dw += Σ_n dout·x̂; db += Σ_n dout.
template <typename Real>
void layernorm_backward(Real* dinp, Real* dw, Real* db, const Real* dout, const Real* inp, const Real* w, const Real* mean,
                        const Real* rstd, int N, int C, GradOut dinp_out = GradOut::Add) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= parallel_min_work())
    for (int n = 0; n < N; n++) {
        const Real* x = inp + (size_t)n * C;
        const Real* d = dout + (size_t)n * C;
        Real g_mean = 0, gx_mean = 0;
        for (int c = 0; c < C; c++) {
            const Real xhat = (x[c] - mean[n]) * rstd[n];
            g_mean += d[c] * w[c];
            gx_mean += d[c] * w[c] * xhat;
        }
        g_mean /= C;
        gx_mean /= C;
        Real* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            const Real xhat = (x[c] - mean[n]) * rstd[n];
            const Real g = rstd[n] * (d[c] * w[c] - g_mean - xhat * gx_mean);
            dx[c] = dinp_out == GradOut::Write ? g : dx[c] + g;
        }
    }
    for (int n = 0; n < N; n++) {  // the weight gradients: sums over rows, in row order
        const Real* x = inp + (size_t)n * C;
        const Real* d = dout + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            dw[c] += d[c] * (x[c] - mean[n]) * rstd[n];
            db[c] += d[c];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Linear layer: out (N,OC) = inp (N,IC) · wᵀ + bias, w (OC,IC) as PyTorch stores it.

template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* w, const Real* bias, int N, int IC, int OC) {
#pragma omp parallel for schedule(static) if ((size_t)N * OC * IC >= parallel_min_work())
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            Real s = bias ? bias[o] : Real(0);
            for (int i = 0; i < IC; i++) s += inp[(size_t)n * IC + i] * w[(size_t)o * IC + i];
            out[(size_t)n * OC + o] = s;
        }
}

// dbias (OC) += Σ_n dout (N,OC): the bias gradient of a linear layer.
template <typename Real>
void bias_backward(Real* dbias, const Real* dout, int N, int OC) {
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= parallel_min_work())
    for (int o = 0; o < OC; o++) {
        Real s = 0;
        for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
        dbias[o] += s;
    }
}

// dinp (N,IC) += dout · w (= with GradOut::Write);  dw (OC,IC) += doutᵀ · inp;
// dbias (OC) += Σ_n dout (skipped when null).
template <typename Real>
void matmul_backward(Real* dinp, Real* dw, Real* dbias, const Real* dout, const Real* inp, const Real* w, int N, int IC,
                     int OC, GradOut dinp_out = GradOut::Add) {
#pragma omp parallel for schedule(static) if ((size_t)N * OC * IC >= parallel_min_work())
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IC; i++) {
            Real s = 0;
            for (int o = 0; o < OC; o++) s += dout[(size_t)n * OC + o] * w[(size_t)o * IC + i];
            Real& d = dinp[(size_t)n * IC + i];
            d = dinp_out == GradOut::Write ? s : d + s;
        }
#pragma omp parallel for schedule(static) if ((size_t)N * OC * IC >= parallel_min_work())
    for (int o = 0; o < OC; o++) {
        for (int i = 0; i < IC; i++) {
            Real s = 0;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o] * inp[(size_t)n * IC + i];
            dw[(size_t)o * IC + i] += s;
        }
    }
    if (dbias) bias_backward(dbias, dout, N, OC);
}

// ---------------------------------------------------------------------------------------------
// Causal multi-head self-attention on the packed projections qkv (B,T,3C) = [q | k | v].
// For head h and time t: att[b,h,t,t'] = softmax_{t' ≤ t}(q_t·k_t' / sqrt(hs)) (0 for t' > t),
// out[b,t,h·hs:(h+1)·hs] = Σ_{t' ≤ t} att[b,h,t,t'] · v_t'. att (B,NH,T,T) is kept for backward.

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const Real* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                Real* a = att + (((size_t)b * NH + h) * T + t) * T;
                Real max_score = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const Real* k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    Real s = 0;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    a[t2] = s * scale;
                    max_score = std::max(max_score, a[t2]);
                }
                Real sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = std::exp(a[t2] - max_score);
                    sum += a[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) a[t2] /= sum;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0;
                Real* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) {
                    Real s = 0;
                    for (int t2 = 0; t2 <= t; t2++) s += a[t2] * qkv[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs + i];
                    o[i] = s;
                }
            }
}

// dqkv (B,T,3C) = gradient of attention_forward given dout (B,T,C) (stored: the head's columns
// are zeroed, then summed into). For each (b, h, t): datt[t'] = dout_t · v_t';  through the
// softmax dscore[t'] = att[t'] · (datt[t'] − Σ_u att[u]·datt[u]); then dq_t += Σ_t' dscore[t']·k_t' / sqrt(hs),
// dk_t' += dscore[t']·q_t / sqrt(hs), dv_t' += att[t']·dout_t.
// One thread owns a whole (b, h): the times t' it adds into belong to that head only.
template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* att, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<Real> datt(T);
            for (int t = 0; t < T; t++)
                for (int part = 0; part < 3; part++)
                    std::fill_n(dqkv + ((size_t)b * T + t) * 3 * C + part * C + h * hs, hs, Real(0));
            for (int t = 0; t < T; t++) {
                const Real* a = att + (((size_t)b * NH + h) * T + t) * T;
                const Real* d = dout + ((size_t)b * T + t) * C + h * hs;
                const Real* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                Real* dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
                Real weighted = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const Real* v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    Real s = 0;
                    for (int i = 0; i < hs; i++) s += d[i] * v[i];
                    datt[t2] = s;
                    weighted += a[t2] * s;
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    const size_t row2 = ((size_t)b * T + t2) * 3 * C + h * hs;
                    const Real dscore = a[t2] * (datt[t2] - weighted) * scale;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dscore * qkv[row2 + C + i];
                        dqkv[row2 + C + i] += dscore * q[i];
                        dqkv[row2 + 2 * C + i] += a[t2] * d[i];
                    }
                }
            }
        }
}

// ---------------------------------------------------------------------------------------------
// GELU, tanh approximation (GPT-2's): y = ½·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³).
// n elements.

template <typename Real>
void gelu_forward(Real* out, const Real* inp, size_t n) {
    const Real s = std::sqrt(Real(2) / Real(M_PI));
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t i = 0; i < n; i++) {
        const Real x = inp[i];
        const Real u = s * (x + Real(0.044715) * x * x * x);
        out[i] = Real(0.5) * x * (Real(1) + std::tanh(u));
    }
}

// dinp += dout · dy/dx (= with GradOut::Write) with dy/dx = ½(1 + tanh u) + ½x·(1 − tanh²u)·du/dx,
// du/dx = √(2/π)·(1 + 3·0.044715·x²).
template <typename Real>
void gelu_backward(Real* dinp, const Real* dout, const Real* inp, size_t n, GradOut dinp_out = GradOut::Add) {
    const Real s = std::sqrt(Real(2) / Real(M_PI));
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t i = 0; i < n; i++) {
        const Real x = inp[i];
        const Real th = std::tanh(s * (x + Real(0.044715) * x * x * x));
        const Real du = s * (Real(1) + Real(3) * Real(0.044715) * x * x);
        const Real g = dout[i] * (Real(0.5) * (Real(1) + th) + Real(0.5) * x * (Real(1) - th * th) * du);
        dinp[i] = dinp_out == GradOut::Write ? g : dinp[i] + g;
    }
}

// ---------------------------------------------------------------------------------------------
// Residual add of one step: out = x + Δt · f over n elements; backward df += Δt · dout (= with
// GradOut::Write). The other half of the backward, dx += dout, is no op of its own: the model
// keeps the stream's gradient in one buffer, so dout already is that term of dx
// (docs/block.md §2, line 4).

template <typename Real>
void residual_forward(Real* out, const Real* x, const Real* f, Real dt, size_t n) {
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t i = 0; i < n; i++) out[i] = x[i] + dt * f[i];
}

template <typename Real>
void residual_backward(Real* df, const Real* dout, Real dt, size_t n, GradOut out = GradOut::Add) {
    const bool add = out == GradOut::Add;
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t i = 0; i < n; i++) df[i] = add ? df[i] + dt * dout[i] : dt * dout[i];
}

// ---------------------------------------------------------------------------------------------
// Softmax + cross-entropy over the real vocabulary. logits (N,Vp); only columns < V count.
// losses (N) = log Σ_v exp(logit_v) − logit_target, computed around the row's maximum.

template <typename Real>
void crossentropy_forward(Real* losses, const Real* logits, const int32_t* targets, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const Real* z = logits + (size_t)n * Vp;
        Real max_z = -INFINITY;
        for (int v = 0; v < V; v++) max_z = std::max(max_z, z[v]);
        Real sum = 0;
        for (int v = 0; v < V; v++) sum += std::exp(z[v] - max_z);
        losses[n] = std::log(sum) + max_z - z[targets[n]];
    }
}

// Overwrites logits (N,Vp) with d(Σ_n dloss·loss_n)/dlogits = dloss·(softmax − onehot(target))
// for columns < V and 0 for the padding columns.
template <typename Real>
void crossentropy_backward_inplace(Real* logits, const int32_t* targets, Real dloss, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        Real* z = logits + (size_t)n * Vp;
        Real max_z = -INFINITY;
        for (int v = 0; v < V; v++) max_z = std::max(max_z, z[v]);
        Real sum = 0;
        for (int v = 0; v < V; v++) sum += std::exp(z[v] - max_z);
        for (int v = 0; v < V; v++) z[v] = dloss * std::exp(z[v] - max_z) / sum;
        z[targets[n]] -= dloss;
        for (int v = V; v < Vp; v++) z[v] = 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Hidden-state statistics of a residual stream X (N,C), docs/statistics.md §1, accumulated in
// double: mean |X|, the mean over rows of the variance across channels (entry_var) and the mean
// over channels of the variance across rows (data_var); variances are biased (divide by C or N).
template <typename Real>
StreamStats stream_statistics(const Real* x, int N, int C) {
    std::vector<double> col_sum(C, 0.0), col_sq(C, 0.0);
    double abs_sum = 0, entry_var_sum = 0;
    for (int n = 0; n < N; n++) {
        const Real* row = x + (size_t)n * C;
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
// Optimiser pieces (docs/model.md §5).

// Σ x² over n elements in double, summed in fixed chunks of SUM_CHUNK elements (one chunk per
// loop iteration, so any number of threads), then the chunk sums in order.
constexpr size_t SUM_CHUNK = 1 << 16;

template <typename Real>
double sum_of_squares(const Real* x, size_t n) {
    const size_t chunks = (n + SUM_CHUNK - 1) / SUM_CHUNK;
    std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t k = 0; k < chunks; k++) {
        double s = 0;
        for (size_t i = k * SUM_CHUNK; i < std::min(n, (k + 1) * SUM_CHUNK); i++) s += (double)x[i] * x[i];
        partial[k] = s;
    }
    double total = 0;
    for (double s : partial) total += s;
    return total;
}

// One AdamW update of n parameters at step t (1-based), with gradients multiplied by
// grad_scale first (the clipping factor):
//   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;  p ← p − lr·(m̂/(√v̂ + ε) + wd·p).
// Pass weight_decay = 0 for tensors that do not decay.
template <typename Real>
void adamw_update(Real* params, const Real* grads, Real* m, Real* v, size_t n, const AdamWHyper& h, int t,
                  double grad_scale) {
    // The hyperparameters as local constants: the compiler then knows the stores below cannot
    // change them, and the loop vectorises (sqrt too, when built with -fno-math-errno).
    const double beta1 = h.beta1, beta2 = h.beta2, lr = h.lr, eps = h.eps, wd = h.weight_decay;
    const double correction1 = 1.0 - std::pow(beta1, t);
    const double correction2 = 1.0 - std::pow(beta2, t);
#pragma omp parallel for schedule(static) if (n >= parallel_min_work())
    for (size_t i = 0; i < n; i++) {
        const Real g = (Real)(grads[i] * grad_scale);
        const Real mi = (Real)(beta1 * m[i] + (1.0 - beta1) * g);
        const Real vi = (Real)(beta2 * v[i] + (1.0 - beta2) * g * g);
        m[i] = mi;
        v[i] = vi;
        const double m_hat = mi / correction1;
        const double v_hat = vi / correction2;
        params[i] -= (Real)(lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * params[i]));
    }
}

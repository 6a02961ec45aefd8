// measure/stability.h — the forward- and backward-stability diagnostics that ./eval reports, computed on
// a CPU model at one batch of data: any Gpt2 on CPU ops (CpuModel<Real>, or ./eval's CPU backend,
// the same model with a Backend's interface), the argument's type `Model`:
//
//   * the norm of each block's parameter gradient (the hidden-state statistics, ‖∂loss/∂X_i‖,
//     the per-block parameter norms, ‖∂loss/∂W_fcproj‖ and the MLP's hidden RMS are in
//     diagnostics.h);
//   * local sensitivity: ‖J v‖ for random directions v, J the Jacobian of one block (or of one
//     residual step) at the data, computed EXACTLY by a forward-mode tangent pass (a Jacobian-
//     vector product) that reuses the activations saved by the last forward;
//   * output uncertainty: Gaussian noise N(0, σ²) added to the embedding output X_0, pushed
//     through the blocks; the mean ‖Δx_i‖ per layer and the W2 bound it gives; with σ relative
//     to RMS(X_0), the relative amplification of that noise per layer.
//
// Why a tangent pass and not finite differences: the JVP of a block costs about one block
// forward, has no step size to tune and is accurate to the working precision (float: ~1e-6
// relative), whatever the scale of the hidden states (Pre-LN states grow large, which ruins a
// float finite difference). test/test_stability.cpp checks it against a dense central-difference
// Jacobian of a tiny double-precision model for every placement.
//
// Directions. A direction V (N,C) has one random unit vector per token (each row uniform on the
// sphere of R^C), all tokens perturbed at once. The gain of token n is ‖(J V)_n‖; it includes
// the cross-token terms of causal attention (J_nm for m ≤ n). Mean and max are over the tokens of
// the batch and the directions.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_ops.h"
#include "diagnostics.h"
#include "gpt2_cpu.h"
#include "model.h"
#include "util/rng.h"

namespace stability {

// ---------------------------------------------------------------------------------------------
// Tangent (forward-mode derivative) of each op, at the point saved by the forward pass.
// Arguments named d* are tangents; outputs are overwritten (not accumulated).

// LayerNorm y = x̂·w + b, x̂ = (x − mean)·rstd over C channels of N rows, mean/rstd as saved:
// dy = w ⊙ rstd·(dx − mean_c(dx) − x̂·mean_c(dx ⊙ x̂)).
template <typename Real>
void layernorm_tangent(Real* dy, const Real* dx, const Real* x, const Real* w, const Real* mean, const Real* rstd, int N,
                       int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const Real* xr = x + (size_t)n * C;
        const Real* d = dx + (size_t)n * C;
        Real d_mean = 0, dxhat_mean = 0;
        for (int c = 0; c < C; c++) {
            d_mean += d[c];
            dxhat_mean += d[c] * (xr[c] - mean[n]) * rstd[n];
        }
        d_mean /= C;
        dxhat_mean /= C;
        Real* y = dy + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            const Real xhat = (xr[c] - mean[n]) * rstd[n];
            y[c] = w[c] * rstd[n] * (d[c] - d_mean - xhat * dxhat_mean);
        }
    }
}

// Causal attention out_t = Σ_{t'≤t} a_{tt'} v_{t'}, a = softmax_{t'}(q_t·k_{t'}/√hs), given the
// saved qkv (B,T,3C) and probabilities att (B,NH,T,T) and the tangent dqkv (B,T,3C):
// ds_{t'} = (dq·k_{t'} + q·dk_{t'})/√hs,  da_{t'} = a_{t'}(ds_{t'} − Σ_u a_u ds_u),
// dout_t = Σ_{t'} da_{t'} v_{t'} + a_{t'} dv_{t'}.
template <typename Real>
void attention_tangent(Real* dout, const Real* dqkv, const Real* qkv, const Real* att, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel
    {
        std::vector<Real> ds(T);
#pragma omp for collapse(3) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++) {
                    const size_t row = (size_t)b * T;
                    const Real* q = qkv + (row + t) * 3 * C + h * hs;
                    const Real* dq = dqkv + (row + t) * 3 * C + h * hs;
                    const Real* a = att + (((size_t)b * NH + h) * T + t) * T;
                    Real weighted = 0;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const Real* k = qkv + (row + t2) * 3 * C + C + h * hs;
                        const Real* dk = dqkv + (row + t2) * 3 * C + C + h * hs;
                        Real s = 0;
                        for (int i = 0; i < hs; i++) s += dq[i] * k[i] + q[i] * dk[i];
                        ds[t2] = s * scale;
                        weighted += a[t2] * ds[t2];
                    }
                    Real* o = dout + (row + t) * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] = 0;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const Real* v = qkv + (row + t2) * 3 * C + 2 * C + h * hs;
                        const Real* dv = dqkv + (row + t2) * 3 * C + 2 * C + h * hs;
                        const Real da = a[t2] * (ds[t2] - weighted);
                        for (int i = 0; i < hs; i++) o[i] += da * v[i] + a[t2] * dv[i];
                    }
                }
    }
}

// Buffers for the tangent pass of one model (sized once).
template <typename Real>
struct TangentScratch {
    std::vector<Real> du, dF, df, ds, dx_out;  // the tangents of a step's values         (N,C)
    std::vector<Real> dwide, dwide2;           // inside the module                       (N,4C)
    std::vector<Real> dheads;                  // inside attention                        (N,C)
    explicit TangentScratch(size_t NC)
        : du(NC), dF(NC), df(NC), ds(NC), dx_out(NC), dwide(4 * NC), dwide2(4 * NC), dheads(NC) {}
};

// The module of step (l, half), linearised at the model's last forward: du (N,C) → dF (N,C),
// its matrix products without bias, attention or GELU in between.
template <class Model, typename Real>
void module_tangent(const Model& m, int l, Half half, const Real* du, Real* dF, TangentScratch<Real>& s) {
    const int N = m.N, C = m.cfg.C;
    const auto& a = m.block_activations(l);
    const Real* nobias = nullptr;
    if (half == Half::Attention) {
        m.ops.matmul_forward(s.dwide.data(), du, m.p.qkvw + (size_t)l * 3 * C * C, nobias, N, C, 3 * C);
        attention_tangent(s.dheads.data(), s.dwide.data(), a.qkv.data(), a.att.data(), m.B, m.T, C, m.cfg.NH);
        m.ops.matmul_forward(dF, s.dheads.data(), m.p.attprojw + (size_t)l * C * C, nobias, N, C, C);
    } else {
        m.ops.matmul_forward(s.dwide.data(), du, m.p.fcw + (size_t)l * 4 * C * C, nobias, N, C, 4 * C);
        // gelu'(fc) ⊙ dfc
        m.ops.gelu_backward(s.dwide2.data(), s.dwide.data(), a.fc.data(), 4 * (size_t)N * C, GradOut::Write);
        m.ops.matmul_forward(dF, s.dwide2.data(), m.p.fcprojw + (size_t)l * 4 * C * C, nobias, N, 4 * C, C);
    }
}

// Jacobian-vector product of one residual step of block l at the point of the model's last
// forward: dy (N,C) = J · dx, J the Jacobian of the step at its saved input (X_l for the
// attention step, the attention step's output for the MLP step). Each line is the tangent of
// the same line of Gpt2::step_forward (gpt2.h), at the values that forward kept:
//   u = LN_in(x)?    F = module(u)    f = LN_out(F)?    s = x + Δt·f    x' = LN_after(s)?
template <class Model, typename Real>
void step_jvp(const Model& m, int l, Half half, const Real* dx, Real* dy, TangentScratch<Real>& s) {
    const int N = m.N, C = m.cfg.C;
    const auto& a = m.block_activations(l).step(half);
    // The tangent `out` (N,C) of LayerNorm `which` of this step, given the tangent `in` of its
    // input x.
    auto layernorm = [&](Real* out, const Real* in, const Real* x, const auto& saved, StepNorm which) {
        layernorm_tangent(out, in, x, step_norm(m.p, l, C, half, which).w, saved.mean.data(), saved.rstd.data(), N, C);
        return out;
    };
    const Real* du = m.plan.input ? layernorm(s.du.data(), dx, m.step_input(l, half), a.in, StepNorm::Input) : dx;
    module_tangent(m, l, half, du, s.dF.data(), s);
    const Real* df = s.dF.data();
    if (m.plan.output) df = layernorm(s.df.data(), s.dF.data(), a.module_out.data(), a.out, StepNorm::Output);
    const Real dt = (Real)m.cfg.dt;
    for (size_t i = 0; i < s.ds.size(); i++) s.ds[i] = dx[i] + dt * df[i];  // ds = dx + Δt·df
    const Real* out = s.ds.data();
    if (m.plan.after_add) out = layernorm(s.dx_out.data(), s.ds.data(), a.sum.data(), a.after, StepNorm::AfterAdd);
    std::copy(out, out + (size_t)N * C, dy);
}
template <class Model, typename Real>
void step_jvp(const Model& m, int l, int half, const Real* dx, Real* dy, TangentScratch<Real>& s) {
    step_jvp(m, l, (Half)half, dx, dy, s);
}

// Jacobian-vector product of the whole block l: attention step, then MLP step. `mid` (N,C)
// receives the attention step's tangent.
template <class Model, typename Real>
void block_jvp(const Model& m, int l, const Real* dx, Real* dy, Real* mid, TangentScratch<Real>& s) {
    step_jvp(m, l, Half::Attention, dx, mid, s);
    step_jvp(m, l, Half::Mlp, mid, dy, s);
}

// ---------------------------------------------------------------------------------------------
// Local sensitivity

// Fills v (N,C) with one random unit vector per row (Gaussian entries, each row normalised).
template <typename Real>
void random_unit_rows(Real* v, int N, int C, Rng& rng) {
    for (int n = 0; n < N; n++) {
        double norm = 0;
        std::vector<double> row(C);
        for (int c = 0; c < C; c++) {
            row[c] = rng.normal();
            norm += row[c] * row[c];
        }
        norm = std::sqrt(norm);
        for (int c = 0; c < C; c++) v[(size_t)n * C + c] = (Real)(row[c] / norm);
    }
}

// Running mean and max of per-token gains.
struct GainStats {
    double sum = 0, max = 0;
    long long count = 0;
    template <typename Real>
    void add_rows(const Real* y, int N, int C) {
        for (int n = 0; n < N; n++) {
            double sq = 0;
            for (int c = 0; c < C; c++) sq += (double)y[(size_t)n * C + c] * y[(size_t)n * C + c];
            const double g = std::sqrt(sq);
            sum += g;
            max = std::max(max, g);
            count++;
        }
    }
    double mean() const { return count ? sum / count : 0.0; }
};

// Per-layer sensitivity: block l (L entries) and residual step j (2L entries: 2l attention step,
// 2l + 1 MLP step of block l). mean/max of ‖(J V)_n‖ over tokens n and directions V.
struct Sensitivity {
    int directions = 0;
    std::vector<double> block_mean, block_max, step_mean, step_max;
};

// Estimates the local sensitivity of every block and residual step at the model's last forward,
// with `directions` random directions per block (and per step) drawn from rng in this order:
// for each block l, for each direction k: V (used for the block and its attention step), then
// V' (for its MLP step).
template <class Model>
Sensitivity local_sensitivity(const Model& m, int directions, Rng& rng) {
    using Real = typename Model::Act;
    const int L = m.cfg.L, N = m.N, C = m.cfg.C;
    const size_t NC = (size_t)N * C;
    TangentScratch<Real> scratch(NC);
    std::vector<Real> v(NC), mid(NC), out(NC);
    Sensitivity r;
    r.directions = directions;
    for (int l = 0; l < L; l++) {
        GainStats block, attn, mlp;
        for (int k = 0; k < directions; k++) {
            random_unit_rows(v.data(), N, C, rng);
            block_jvp(m, l, v.data(), out.data(), mid.data(), scratch);
            block.add_rows(out.data(), N, C);
            attn.add_rows(mid.data(), N, C);
            random_unit_rows(v.data(), N, C, rng);
            step_jvp(m, l, 1, v.data(), out.data(), scratch);
            mlp.add_rows(out.data(), N, C);
        }
        r.block_mean.push_back(block.mean());
        r.block_max.push_back(block.max);
        r.step_mean.push_back(attn.mean());
        r.step_max.push_back(attn.max);
        r.step_mean.push_back(mlp.mean());
        r.step_max.push_back(mlp.max);
    }
    return r;
}

// ---------------------------------------------------------------------------------------------
// Output uncertainty: X_0 → X_0 + σ·ε, ε ~ N(0, I) per entry, pushed through every block.
// For each layer i = 0..L: mean_dx = mean over tokens and samples of ‖Δx_i‖ (Δx_i the change of
// a token's hidden state), and w2_bound = sqrt(mean ‖Δx_i‖²), which bounds the 2-Wasserstein
// distance between the clean and noisy distributions of token states (the noisy state paired
// with its clean state is one coupling). At i = 0 both are about σ·√C.
struct Uncertainty {
    double sigma = 0;
    int samples = 0;
    std::vector<double> mean_dx, w2_bound;
    // Filled by relative_output_uncertainty only (σ = sigma_rel · RMS(X_0)).
    double sigma_rel = 0;
    std::vector<double> relative_amplification;
};

// Uses and then restores the residual streams of the model's last forward (the blocks' saved
// activations end up as those of the clean forward again).
template <class Model>
Uncertainty output_uncertainty(Model& m, double sigma, int samples, Rng& rng) {
    using Real = typename Model::Act;
    const int L = m.cfg.L, N = m.N, C = m.cfg.C;
    const size_t NC = (size_t)N * C;
    std::vector<std::vector<Real>> clean(L + 1);
    for (int i = 0; i <= L; i++) clean[i].assign(m.stream(i), m.stream(i) + NC);
    std::vector<double> sum(L + 1, 0.0), sum_sq(L + 1, 0.0);
    std::vector<Real> noisy(NC);
    for (int s = 0; s < samples; s++) {
        for (size_t k = 0; k < NC; k++) noisy[k] = (Real)(clean[0][k] + sigma * rng.normal());
        m.run_blocks_from(noisy.data());
        for (int i = 0; i <= L; i++) {
            const Real* x = m.stream(i);
            for (int n = 0; n < N; n++) {
                double sq = 0;
                for (int c = 0; c < C; c++) {
                    const double d = (double)x[(size_t)n * C + c] - clean[i][(size_t)n * C + c];
                    sq += d * d;
                }
                sum[i] += std::sqrt(sq);
                sum_sq[i] += sq;
            }
        }
    }
    m.run_blocks_from(clean[0].data());
    Uncertainty u;
    u.sigma = sigma;
    u.samples = samples;
    const double count = (double)samples * N;
    for (int i = 0; i <= L; i++) {
        u.mean_dx.push_back(samples ? sum[i] / count : 0.0);
        u.w2_bound.push_back(samples ? std::sqrt(sum_sq[i] / count) : 0.0);
    }
    return u;
}

// Output uncertainty at a noise level relative to the embedding's scale: σ = sigma_rel ·
// RMS(X_0), then output_uncertainty, and per layer i = 0..L the relative amplification
//   relative_amplification_i = (W2_i / (√C · RMS(X_i))) / (σ / RMS(X_0)),
// the noise's size relative to the state's size at X_i over the same ratio at the input. W2_i
// (w2_bound) is a norm over a token's C channels, so W2_i/√C is per entry like RMS and σ; at
// i = 0 the ratio is the sample RMS of the unit draws (≈ 1), and a block that only rescales its
// input leaves it unchanged. Uses and then restores the model's last forward.
template <class Model>
Uncertainty relative_output_uncertainty(Model& m, double sigma_rel, int samples, Rng& rng) {
    const int L = m.cfg.L, C = m.cfg.C;
    const size_t NC = (size_t)m.N * C;
    std::vector<double> rms;
    for (int i = 0; i <= L; i++) rms.push_back(diag::root_mean_square(m.stream(i), NC));
    Uncertainty u = output_uncertainty(m, sigma_rel * rms[0], samples, rng);
    u.sigma_rel = sigma_rel;
    for (int i = 0; i <= L; i++) u.relative_amplification.push_back(u.w2_bound[i] / (std::sqrt((double)C) * rms[i]) / sigma_rel);
    return u;
}

// ---------------------------------------------------------------------------------------------
// Gradient norms

// ‖gradient‖ of the parameters of each block l (every per-layer tensor's slice l), from m.grads.
template <class Model>
std::vector<double> block_param_grad_norms(const Model& m) {
    return diag::block_norms(m.grads.data(), m.cfg);
}

}  // namespace stability

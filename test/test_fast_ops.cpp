// The fast CPU ops (cpu_fast_ops.h, what CpuModel<float> trains with) against the textbook
// reference (cpu_ops.h) at the sizes of a real step (d12's C = 768, B·T = 512 positions, GPT-2's
// vocabulary), with the default number of OpenMP threads:
//   * the fast op in float is close to the reference run in double: norm-wise relative error
//     ‖fast − ref64‖/‖ref64‖ ≤ 2e-6 for the elementwise ops, 1e-5 for sums over hundreds of
//     terms (matmul, attention, the loss), and at most 10× that of the reference run in float;
//   * exp_fast against std::exp over its whole range;
//   * a whole model on the fast ops agrees with the same model on the reference ops.
// That every fast op gives the same bits for 1, 2 and 3 threads, on its parallel branches, is
// checked in test_threads.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cpu_fast_ops.h"
#include "cpu_ops.h"
#include "gpt2_cpu.h"
#include "util/rng.h"

namespace {

using F = std::vector<float>;
using D = std::vector<double>;

constexpr int B = 4, Tn = 128, C = 768, NH = 12, N = B * Tn;
constexpr size_t NC = (size_t)N * C;
constexpr int V = 50257, Vp = 50304;
constexpr double kElementwiseTol = 2e-6, kSumTol = 1e-5;

F random_floats(Rng& rng, size_t n, double scale = 1.0) {
    F v(n);
    for (float& x : v) x = (float)(scale * (2 * rng.uniform() - 1));
    return v;
}
D widen(const F& v) { return D(v.begin(), v.end()); }

// ‖got − want‖ / ‖want‖.
double rel_error(const F& got, const D& want) {
    double d = 0, r = 0;
    for (size_t i = 0; i < want.size(); i++) {
        d += (got[i] - want[i]) * (got[i] - want[i]);
        r += want[i] * want[i];
    }
    return std::sqrt(d / r);
}

// Runs `op` (which fills its outputs from fresh copies of its inputs) and checks its result
// against `want` within `tol`, and that the reference in float (`ref32`) is not much better.
void check(const char* name, const std::function<F()>& op, const D& want, double tol, const F& ref32) {
    const F got = op();
    ASSERT_EQ(got.size(), want.size()) << name;
    const double fast_err = rel_error(got, want), ref_err = rel_error(ref32, want);
    std::printf("[fast-ops] %-28s fast %.2e  reference(float) %.2e  (vs reference in double)\n", name, fast_err, ref_err);
    EXPECT_LE(fast_err, tol) << name;
    EXPECT_LE(fast_err, 10 * ref_err + 1e-7) << name << ": the fast op is much less accurate than the reference";
}

TEST(FastOps, LayerNormForwardAndBackward) {
    Rng rng(1);
    const F x = random_floats(rng, NC, 3.0), w = random_floats(rng, C), b = random_floats(rng, C),
            dout = random_floats(rng, NC);
    const D xd = widen(x), wd = widen(w), bd = widen(b), doutd = widen(dout);
    D out(NC), mean(N), rstd(N), dx(NC, 0.0), dw(C, 0.0), db(C, 0.0);
    ::layernorm_forward(out.data(), mean.data(), rstd.data(), xd.data(), wd.data(), bd.data(), N, C);
    ::layernorm_backward(dx.data(), dw.data(), db.data(), doutd.data(), xd.data(), wd.data(), mean.data(), rstd.data(),
                         N, C);
    F out32(NC), mean32(N), rstd32(N), dx32(NC, 0.0f), dw32(C, 0.0f), db32(C, 0.0f);
    ::layernorm_forward(out32.data(), mean32.data(), rstd32.data(), x.data(), w.data(), b.data(), N, C);
    ::layernorm_backward(dx32.data(), dw32.data(), db32.data(), dout.data(), x.data(), w.data(), mean32.data(),
                         rstd32.data(), N, C);
    auto forward = [&](F& y, F& m, F& r) {
        y.assign(NC, 0); m.assign(N, 0); r.assign(N, 0);
        fast::layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), N, C);
    };
    check("layernorm fwd out", [&] { F y, m, r; forward(y, m, r); return y; }, out, kElementwiseTol, out32);
    check("layernorm fwd rstd", [&] { F y, m, r; forward(y, m, r); return r; }, rstd, kElementwiseTol, rstd32);
    auto backward = [&](int which) {
        F y, m, r;
        forward(y, m, r);
        F gx(NC, 0.0f), gw(C, 0.0f), gb(C, 0.0f);
        fast::layernorm_backward(gx.data(), gw.data(), gb.data(), dout.data(), x.data(), w.data(), m.data(), r.data(),
                                 N, C);
        return which == 0 ? gx : which == 1 ? gw : gb;
    };
    check("layernorm bwd dx", [&] { return backward(0); }, dx, kSumTol, dx32);
    check("layernorm bwd dw", [&] { return backward(1); }, dw, kSumTol, dw32);
    check("layernorm bwd db", [&] { return backward(2); }, db, kSumTol, db32);
}

TEST(FastOps, MatmulForwardAndBackward) {
    Rng rng(2);
    const int IC = C, OC = C + 48;  // not a multiple of the gemm tiles in every direction
    const F inp = random_floats(rng, (size_t)N * IC), w = random_floats(rng, (size_t)OC * IC, 0.05),
            bias = random_floats(rng, OC), dout = random_floats(rng, (size_t)N * OC);
    const D inpd = widen(inp), wd = widen(w), biasd = widen(bias), doutd = widen(dout);
    D out((size_t)N * OC), dinp((size_t)N * IC, 0.0), dw((size_t)OC * IC, 0.0), dbias(OC, 0.0);
    ::matmul_forward(out.data(), inpd.data(), wd.data(), biasd.data(), N, IC, OC);
    ::matmul_backward(dinp.data(), dw.data(), dbias.data(), doutd.data(), inpd.data(), wd.data(), N, IC, OC);
    F out32((size_t)N * OC), dinp32((size_t)N * IC, 0.0f), dw32((size_t)OC * IC, 0.0f), dbias32(OC, 0.0f);
    ::matmul_forward(out32.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
    ::matmul_backward(dinp32.data(), dw32.data(), dbias32.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
    check("matmul fwd", [&] {
        F y((size_t)N * OC);
        fast::matmul_forward(y.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
        return y;
    }, out, kSumTol, out32);
    auto backward = [&](int which) {
        F gi((size_t)N * IC, 0.0f), gw((size_t)OC * IC, 0.0f), gb(OC, 0.0f);
        fast::matmul_backward(gi.data(), gw.data(), gb.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
        return which == 0 ? gi : which == 1 ? gw : gb;
    };
    check("matmul bwd dinp", [&] { return backward(0); }, dinp, kSumTol, dinp32);
    check("matmul bwd dw", [&] { return backward(1); }, dw, kSumTol, dw32);
    check("matmul bwd dbias", [&] { return backward(2); }, dbias, kSumTol, dbias32);
}

// GradOut::Write (model.h) stores what GradOut::Add gives on a zeroed buffer, for the input
// gradients of layernorm_backward, matmul_backward, gelu_backward and residual_backward: the
// same values bit for bit (EXPECT_EQ: a zero may differ in sign), whatever the buffer held
// before (NaN here), and the weight gradients, which always add, unchanged. Odd sizes, off the
// gemm tiles.
template <class Ops>
void expect_write_equals_add_into_zeros() {
    Rng rng(9);
    const int n = 37, IC = 50, OC = 70;
    const size_t ni = (size_t)n * IC;
    const F dout = random_floats(rng, (size_t)n * OC), inp = random_floats(rng, ni),
            w = random_floats(rng, (size_t)OC * IC, 0.1), dx_in = random_floats(rng, ni);
    F ln_out(ni), mean(n), rstd(n);
    const F ln_w = random_floats(rng, IC), ln_b = random_floats(rng, IC);
    Ops::layernorm_forward(ln_out.data(), mean.data(), rstd.data(), inp.data(), ln_w.data(), ln_b.data(), n, IC);
    auto run = [&](GradOut mode) {
        const float before = mode == GradOut::Write ? NAN : 0.0f;
        std::vector<F> g{F(ni, before), F((size_t)OC * IC, 0.0f), F(OC, 0.0f), F(ni, before), F(ni, before),
                         F(ni, before), F(IC, 0.0f), F(IC, 0.0f)};
        Ops::matmul_backward(g[0].data(), g[1].data(), g[2].data(), dout.data(), inp.data(), w.data(), n, IC, OC,
                             mode);
        Ops::gelu_backward(g[3].data(), dx_in.data(), inp.data(), ni, mode);
        ::residual_backward(g[4].data(), dx_in.data(), 0.3f, ni, mode);  // both op sets' (cpu_ops.h)
        Ops::layernorm_backward(g[5].data(), g[6].data(), g[7].data(), dx_in.data(), inp.data(), ln_w.data(),
                                mean.data(), rstd.data(), n, IC, mode);
        return g;
    };
    const std::vector<F> added = run(GradOut::Add), written = run(GradOut::Write);
    const char* names[] = {"matmul dinp", "matmul dw", "matmul dbias", "gelu dinp", "residual df",
                           "layernorm dinp", "layernorm dw", "layernorm db"};
    for (size_t k = 0; k < added.size(); k++)
        for (size_t i = 0; i < added[k].size(); i++)
            ASSERT_EQ(written[k][i], added[k][i]) << names[k] << " [" << i << "]";
}

TEST(FastOps, WritingAGradientEqualsAddingIntoZeros) {
    expect_write_equals_add_into_zeros<ReferenceOps<float>>();
    expect_write_equals_add_into_zeros<FastOps>();
}

TEST(FastOps, AttentionForwardAndBackward) {
    Rng rng(3);
    const F qkv = random_floats(rng, 3 * NC), dout = random_floats(rng, NC);
    const D qkvd = widen(qkv), doutd = widen(dout);
    const size_t A = (size_t)B * NH * Tn * Tn;
    D out(NC), att(A), dqkv(3 * NC, 0.0);
    ::attention_forward(out.data(), att.data(), qkvd.data(), B, Tn, C, NH);
    ::attention_backward(dqkv.data(), doutd.data(), qkvd.data(), att.data(), B, Tn, C, NH);
    F out32(NC), att32(A), dqkv32(3 * NC, 0.0f);
    ::attention_forward(out32.data(), att32.data(), qkv.data(), B, Tn, C, NH);
    ::attention_backward(dqkv32.data(), dout.data(), qkv.data(), att32.data(), B, Tn, C, NH);
    auto run = [&](int which) {
        F y(NC), a(A), g(3 * NC, 0.0f);
        fast::attention_forward(y.data(), a.data(), qkv.data(), B, Tn, C, NH);
        if (which == 2) fast::attention_backward(g.data(), dout.data(), qkv.data(), a.data(), B, Tn, C, NH);
        return which == 0 ? y : which == 1 ? a : g;
    };
    check("attention fwd out", [&] { return run(0); }, out, kSumTol, out32);
    check("attention fwd att", [&] { return run(1); }, att, kSumTol, att32);
    check("attention bwd dqkv", [&] { return run(2); }, dqkv, kSumTol, dqkv32);
}

TEST(FastOps, GeluForwardAndBackward) {
    Rng rng(4);
    const size_t n = 4 * NC;
    const F x = random_floats(rng, n, 4.0), dout = random_floats(rng, n);
    const D xd = widen(x), doutd = widen(dout);
    D out(n), dx(n, 0.0);
    ::gelu_forward(out.data(), xd.data(), n);
    ::gelu_backward(dx.data(), doutd.data(), xd.data(), n);
    F out32(n), dx32(n, 0.0f);
    ::gelu_forward(out32.data(), x.data(), n);
    ::gelu_backward(dx32.data(), dout.data(), x.data(), n);
    check("gelu fwd", [&] { F y(n); fast::gelu_forward(y.data(), x.data(), n); return y; }, out,
                  kElementwiseTol, out32);
    check("gelu bwd", [&] { F g(n, 0.0f); fast::gelu_backward(g.data(), dout.data(), x.data(), n); return g; },
                  dx, kElementwiseTol, dx32);
}

TEST(FastOps, CrossEntropyForwardAndBackward) {
    Rng rng(5);
    const int rows = 64;  // rows of GPT-2's full vocabulary
    const F logits = random_floats(rng, (size_t)rows * Vp, 6.0);
    std::vector<int32_t> targets(rows);
    for (int32_t& t : targets) t = (int32_t)(rng.uniform() * V) % V;
    const D logitsd = widen(logits);
    const double dloss = 1.0 / rows;
    D losses(rows), grad = logitsd;
    ::crossentropy_forward(losses.data(), logitsd.data(), targets.data(), rows, V, Vp);
    ::crossentropy_backward_inplace(grad.data(), targets.data(), dloss, rows, V, Vp);
    F losses32(rows), grad32 = logits;
    ::crossentropy_forward(losses32.data(), logits.data(), targets.data(), rows, V, Vp);
    ::crossentropy_backward_inplace(grad32.data(), targets.data(), (float)dloss, rows, V, Vp);
    check("crossentropy fwd", [&] {
        F l(rows);
        fast::crossentropy_forward(l.data(), logits.data(), targets.data(), rows, V, Vp);
        return l;
    }, losses, kSumTol, losses32);
    check("crossentropy bwd", [&] {
        F g = logits;
        fast::crossentropy_backward_inplace(g.data(), targets.data(), (float)dloss, rows, V, Vp);
        return g;
    }, grad, kSumTol, grad32);
}

TEST(FastOps, SumOfSquares) {
    Rng rng(6);
    const F x = random_floats(rng, 3 * NC + 17);
    const D want = {::sum_of_squares(widen(x).data(), x.size())};
    const F ref32 = {(float)::sum_of_squares(x.data(), x.size())};
    check("sum of squares", [&] { return F{(float)fast::sum_of_squares(x.data(), x.size())}; }, want,
                  kElementwiseTol, ref32);
}

// ---------------------------------------------------------------------------------------------
// exp_fast: e^x for float by range reduction and a polynomial (cpu_fast_ops.h)

// Every 1/1024 of [−87, 88] (180,000 points, the whole range it serves without clamping) against
// std::exp in double: within 4·2⁻²⁴ relative (a couple of float ulp). Outside it clamps: e^−87
// below, e^88 above; NaN stays NaN; e^0 is exactly 1.
TEST(FastOps, ExpFastMatchesStdExpOverItsRange) {
    double worst = 0;
    for (int i = -87 * 1024; i <= 88 * 1024; i++) {
        const float x = (float)i / 1024;
        const double want = std::exp((double)x);
        worst = std::max(worst, std::fabs(fast::exp_fast(x) - want) / want);
    }
    std::printf("[exp_fast] worst relative error over [-87, 88]: %.3g (%.2f float ulp)\n", worst, worst * (1 << 24));
    EXPECT_LT(worst, 4.0 / (1 << 24));
    EXPECT_EQ(fast::exp_fast(0.0f), 1.0f);
    EXPECT_NEAR(fast::exp_fast(-1000.0f), std::exp(-87.0), 4e-7 * std::exp(-87.0));
    EXPECT_NEAR(fast::exp_fast(1000.0f), std::exp(88.0), 4e-7 * std::exp(88.0));
    EXPECT_TRUE(std::isnan(fast::exp_fast(NAN)));
}


// A small whole model, once on the fast ops (CpuModel<float>) and once on the reference ops in
// float: the loss and every gradient agree (norm-wise over each tensor).
TEST(FastOps, WholeModelAgreesWithReferenceModel) {
    for (Placement placement : {Placement::Pre, Placement::Post, Placement::Peri}) {
        ModelConfig cfg;
        cfg.L = 2; cfg.NH = 4; cfg.C = 128; cfg.V = 500; cfg.Vp = 512; cfg.maxT = 64;
        cfg.placement = placement;
        cfg.dt = 0.5f;
        const int b = 2, t = 48;
        std::vector<float> params(num_parameters(cfg));
        init_parameters(cfg, params.data(), 11);
        Rng rng(12);
        std::vector<int32_t> tokens(b * t + 1);
        for (int32_t& tok : tokens) tok = (int32_t)(rng.uniform() * cfg.V) % cfg.V;
        CpuModel<float> fast_model(cfg, b, t);
        Gpt2<ReferenceOps<float>> reference(cfg, b, t);
        fast_model.params = params;
        reference.params = params;
        const float fast_loss = fast_model.forward(tokens.data(), tokens.data() + 1);
        const float ref_loss = reference.forward(tokens.data(), tokens.data() + 1);
        EXPECT_NEAR(fast_loss, ref_loss, 1e-5 * std::fabs(ref_loss)) << placement_name(placement);
        fast_model.backward(1.0f);
        reference.backward(1.0f);
        const auto sizes = param_sizes(cfg), offsets = param_offsets(cfg);
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
            if (sizes[i] == 0) continue;
            const F got(fast_model.grads.begin() + offsets[i], fast_model.grads.begin() + offsets[i] + sizes[i]);
            const D want(reference.grads.begin() + offsets[i], reference.grads.begin() + offsets[i] + sizes[i]);
            EXPECT_LE(rel_error(got, want), 1e-4) << placement_name(placement) << " gradient of " << param_name(i);
        }
    }
}

}  // namespace

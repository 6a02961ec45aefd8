// Every CPU op of cpu_ops.h (and gemm of matmul.h) checked in double precision:
//   * each backward against central finite differences of the scalar objective
//     L = Σ out·R with a fixed random R, so the whole vector-Jacobian product is checked;
//   * that backward ops ACCUMULATE into their gradient outputs;
//   * gemm against a naive triple loop (all transposes, non-square, beta 0/1, padded strides);
//   * stream_statistics, sum_of_squares and adamw_update against direct formulas;
//   * GELU, the reference and the fast version (cpu_fast_ops.h), against PyTorch's values.
// Their threaded branches are checked in test_threads.cpp.
//
// Error measure of a gradient check: max_i |fd_i − an_i| / max_i |an_i| (worst entry relative to
// the largest entry of the tensor). Each check prints its measured error ("[gradcheck] ...").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cpu_fast_ops.h"
#include "cpu_ops.h"
#include "matmul.h"
#include "util/rng.h"

namespace {

using Vec = std::vector<double>;

constexpr double kEps = 1e-6;     // finite-difference step
constexpr double kGradTol = 1e-7; // max |fd − an| / max |an|, for every op

// Random values of magnitude in [0.2, 1.2]·scale with random sign: never zero, never tiny.
Vec random_vec(Rng& rng, size_t n, double scale = 1.0) {
    Vec v(n);
    for (double& x : v) x = (0.2 + rng.uniform()) * scale * (rng.uniform() < 0.5 ? -1.0 : 1.0);
    return v;
}

double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
    return s;
}

// Central differences of f with respect to every entry of x (x is restored afterwards).
Vec fd_gradient(Vec& x, const std::function<double()>& f, double eps = kEps) {
    Vec g(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        const double saved = x[i];
        x[i] = saved + eps;
        const double fp = f();
        x[i] = saved - eps;
        const double fm = f();
        x[i] = saved;
        g[i] = (fp - fm) / (2 * eps);
    }
    return g;
}

// max |a − b| / max |b| (absolute when b is all zeros).
double grad_error(const Vec& a, const Vec& b) {
    double diff = 0, ref = 0;
    for (size_t i = 0; i < a.size(); i++) {
        diff = std::max(diff, std::fabs(a[i] - b[i]));
        ref = std::max(ref, std::fabs(b[i]));
    }
    return ref > 0 ? diff / ref : diff;
}

// Checks analytic gradient `an` of tensor `name` against finite differences of f over x.
void check_grad(const char* name, Vec& x, const Vec& an, const std::function<double()>& f,
                double tol = kGradTol) {
    const Vec fd = fd_gradient(x, f);
    const double err = grad_error(fd, an);
    std::printf("[gradcheck] %-34s max|fd-an|/max|an| = %.2e\n", name, err);
    EXPECT_LT(err, tol) << name;
    // A gradient that is identically zero would make the check vacuous.
    double mx = 0;
    for (double v : an) mx = std::max(mx, std::fabs(v));
    EXPECT_GT(mx, 0.0) << name << ": analytic gradient is all zeros";
}

// a == 2·b up to rounding (gemm-based accumulation adds term by term).
void expect_doubled(const Vec& twice, const Vec& once, const char* name) {
    for (size_t i = 0; i < once.size(); i++)
        ASSERT_NEAR(twice[i], 2 * once[i], 1e-13 * (1 + std::fabs(once[i]))) << name << " entry " << i;
}

// ---------------------------------------------------------------------------------------------
// Encoder

struct EncoderCase {
    int B = 2, Tn = 3, C = 4, Vp = 7, maxT = 5;
    std::vector<int32_t> tokens{3, 1, 3, 0, 3, 5};  // token 3 repeats, tokens 2, 4, 6 unused
    Vec wte, wpe, R;
    explicit EncoderCase(Rng& rng)
        : wte(random_vec(rng, (size_t)Vp * C)), wpe(random_vec(rng, (size_t)maxT * C)),
          R(random_vec(rng, (size_t)B * Tn * C)) {}
    double loss() {
        Vec out((size_t)B * Tn * C);
        encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);
        return dot(out, R);
    }
    void backward(Vec& dwte, Vec& dwpe) {
        encoder_backward(dwte.data(), dwpe.data(), R.data(), tokens.data(), B, Tn, C);
    }
};

TEST(GradcheckOps, Encoder) {
    Rng rng(1);
    EncoderCase e(rng);
    Vec dwte(e.wte.size(), 0.0), dwpe(e.wpe.size(), 0.0);
    e.backward(dwte, dwpe);
    auto f = [&] { return e.loss(); };
    check_grad("encoder dwte", e.wte, dwte, f);
    check_grad("encoder dwpe", e.wpe, dwpe, f);
    // Unused tokens and positions t >= T get exactly zero gradient.
    for (int tok : {2, 4, 6})
        for (int c = 0; c < e.C; c++) EXPECT_EQ(dwte[(size_t)tok * e.C + c], 0.0);
    for (int t = e.Tn; t < e.maxT; t++)
        for (int c = 0; c < e.C; c++) EXPECT_EQ(dwpe[(size_t)t * e.C + c], 0.0);
    // The repeated token 3 (three occurrences) sums its three contributions.
    for (int c = 0; c < e.C; c++) {
        const double expect = e.R[0 * e.C + c] + e.R[2 * e.C + c] + e.R[4 * e.C + c];
        EXPECT_NEAR(dwte[3 * e.C + c], expect, 1e-15);
    }
}

TEST(GradcheckOps, EncoderAccumulates) {
    Rng rng(2);
    EncoderCase e(rng);
    Vec w1(e.wte.size(), 0.0), p1(e.wpe.size(), 0.0), w2(e.wte.size(), 0.0), p2(e.wpe.size(), 0.0);
    e.backward(w1, p1);
    e.backward(w2, p2);
    e.backward(w2, p2);
    expect_doubled(w2, w1, "dwte");
    expect_doubled(p2, p1, "dwpe");
}

// ---------------------------------------------------------------------------------------------
// LayerNorm

// Inputs offset + random_vec(scale): scale 2 by default; a small scale (variance below
// LayerNorm's ε = 1e-5) makes ε matter.
struct LayerNormCase {
    int N = 6, C = 7;
    Vec inp, w, b, R, out, mean, rstd;
    explicit LayerNormCase(Rng& rng, double scale = 2.0, double offset = 0.0)
        : inp(random_vec(rng, (size_t)N * C, scale)), w(random_vec(rng, C)), b(random_vec(rng, C)),
          R(random_vec(rng, (size_t)N * C)), out((size_t)N * C), mean(N), rstd(N) {
        for (double& x : inp) x += offset;
    }
    double loss() {
        layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
        return dot(out, R);
    }
    void backward(Vec& dinp, Vec& dw, Vec& db) {
        loss();  // fresh mean/rstd
        layernorm_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), mean.data(),
                           rstd.data(), N, C);
    }
};

// The forward pass of case c against (x − mean)/sqrt(var + 1e-5)·w + b written out.
void expect_layernorm_definition(LayerNormCase& c, double tol) {
    c.loss();
    for (int n = 0; n < c.N; n++) {
        double m = 0, v = 0;
        for (int k = 0; k < c.C; k++) m += c.inp[(size_t)n * c.C + k] / c.C;
        for (int k = 0; k < c.C; k++) v += std::pow(c.inp[(size_t)n * c.C + k] - m, 2) / c.C;
        for (int k = 0; k < c.C; k++) {
            const double y = (c.inp[(size_t)n * c.C + k] - m) / std::sqrt(v + 1e-5) * c.w[k] + c.b[k];
            EXPECT_NEAR(c.out[(size_t)n * c.C + k], y, tol);
        }
    }
}

// The backward pass of case c against finite differences.
void expect_layernorm_gradients(LayerNormCase& c) {
    Vec dinp(c.inp.size(), 0.0), dw(c.C, 0.0), db(c.C, 0.0);
    c.backward(dinp, dw, db);
    auto f = [&] { return c.loss(); };
    check_grad("layernorm dinp", c.inp, dinp, f);
    check_grad("layernorm dw", c.w, dw, f);
    check_grad("layernorm db", c.b, db, f);
}

TEST(GradcheckOps, LayerNormForwardMatchesDefinition) {
    Rng rng(3);
    LayerNormCase c(rng);
    expect_layernorm_definition(c, 1e-13);
}

TEST(GradcheckOps, LayerNorm) {
    Rng rng(4);
    LayerNormCase c(rng);
    expect_layernorm_gradients(c);
}

// Rows of spread 1e-3 around 0.5 (variance about 5e-7, below ε = 1e-5): the outputs depend on ε
// at first order, so an ε other than 1e-5, or one added outside the square root, fails.
TEST(GradcheckOps, LayerNormWithSmallVarianceWhereEpsilonMatters) {
    Rng rng(30);
    LayerNormCase c(rng, 1e-3, 0.5);
    expect_layernorm_definition(c, 1e-12);
    expect_layernorm_gradients(c);
}

TEST(GradcheckOps, LayerNormAccumulates) {
    Rng rng(5);
    LayerNormCase c(rng);
    Vec x1(c.inp.size(), 0.0), w1(c.C, 0.0), b1(c.C, 0.0);
    Vec x2(c.inp.size(), 0.0), w2(c.C, 0.0), b2(c.C, 0.0);
    c.backward(x1, w1, b1);
    c.backward(x2, w2, b2);
    c.backward(x2, w2, b2);
    expect_doubled(x2, x1, "dinp");
    expect_doubled(w2, w1, "dw");
    expect_doubled(b2, b1, "db");
}

// ---------------------------------------------------------------------------------------------
// gemm against a naive triple loop

// C (M,N) = beta·C + op(A)·op(B), all row-major with strides, computed the obvious way.
void naive_gemm(bool ta, bool tb, int M, int N, int K, const double* A, int lda, const double* B, int ldb,
                double beta, double* C, int ldc) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                const double a = ta ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k];
                const double b = tb ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n];
                s += a * b;
            }
            C[(size_t)m * ldc + n] = (beta == 0 ? 0.0 : beta * C[(size_t)m * ldc + n]) + s;
        }
}

TEST(GemmOps, MatchesNaiveAllTransposesStridesAndBeta) {
    struct Shape { int M, N, K; };
    // Non-square shapes; the last ones cross the cache blocks (KC = 256 along k, and for
    // double NC = 1024 columns, MC = 128 rows) and none is a multiple of the register tile.
    const Shape shapes[] = {{3, 5, 7}, {7, 2, 4}, {1, 9, 3}, {6, 1, 5}, {4, 530, 300}, {5, 1030, 260}, {130, 17, 9}};
    Rng rng(6);
    double worst = 0;
    for (const Shape& s : shapes)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (double beta : {0.0, 1.0}) {
                    // Stored shapes: A is (M,K) or (K,M), B is (K,N) or (N,K); strides exceed widths.
                    const int a_rows = ta ? s.K : s.M, a_cols = ta ? s.M : s.K;
                    const int b_rows = tb ? s.N : s.K, b_cols = tb ? s.K : s.N;
                    const int lda = a_cols + 3, ldb = b_cols + 2, ldc = s.N + 5;
                    const Vec A = random_vec(rng, (size_t)a_rows * lda);
                    const Vec B = random_vec(rng, (size_t)b_rows * ldb);
                    Vec C0 = random_vec(rng, (size_t)s.M * ldc);
                    const double sentinel = 12345.678;
                    for (int m = 0; m < s.M; m++)
                        for (int n = s.N; n < ldc; n++) C0[(size_t)m * ldc + n] = sentinel;
                    if (beta == 0)  // beta = 0 must ignore C entirely, even NaN
                        for (int m = 0; m < s.M; m++)
                            for (int n = 0; n < s.N; n++) C0[(size_t)m * ldc + n] = NAN;
                    Vec C = C0, Cref = C0;
                    gemm<double>(ta, tb, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
                    naive_gemm(ta, tb, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, beta, Cref.data(), ldc);
                    double diff = 0, ref = 0;
                    for (int m = 0; m < s.M; m++) {
                        for (int n = 0; n < s.N; n++) {
                            const double c = C[(size_t)m * ldc + n], r = Cref[(size_t)m * ldc + n];
                            ASSERT_TRUE(std::isfinite(c));
                            diff = std::max(diff, std::fabs(c - r));
                            ref = std::max(ref, std::fabs(r));
                        }
                        for (int n = s.N; n < ldc; n++)
                            ASSERT_EQ(C[(size_t)m * ldc + n], sentinel) << "gemm wrote past N (ldc padding)";
                    }
                    const double err = diff / ref;
                    worst = std::max(worst, err);
                    EXPECT_LT(err, 1e-13) << "M=" << s.M << " N=" << s.N << " K=" << s.K << " transA=" << ta
                                          << " transB=" << tb << " beta=" << beta;
                }
    std::printf("[gradcheck] %-34s max|C-naive|/max|naive| = %.2e\n", "gemm (all cases)", worst);
}

// The float path (what training runs; an AVX-512 micro-kernel where the compiler targets it)
// against the naive product in double. Shapes cross the float blocks (MR 8, NR 48, KC 256,
// MC 256, NC 1536) as well as the double ones. Error bound per element: relative to
// Σ_k |a·b| + |beta·C| (the float rounding scale of the sum).
TEST(GemmOps, FloatMatchesNaiveAllTransposesStridesAndBeta) {
    struct Shape { int M, N, K; };
    const Shape shapes[] = {{3, 5, 7}, {9, 49, 17}, {260, 50, 270}, {9, 1540, 20}, {1, 1, 1}};
    Rng rng(26);
    double worst = 0;
    for (const Shape& s : shapes)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (float beta : {0.0f, 1.0f}) {
                    const int a_rows = ta ? s.K : s.M, a_cols = ta ? s.M : s.K;
                    const int b_rows = tb ? s.N : s.K, b_cols = tb ? s.K : s.N;
                    const int lda = a_cols + 1, ldb = b_cols + 7, ldc = s.N + 3;
                    const Vec Ad = random_vec(rng, (size_t)a_rows * lda), Bd = random_vec(rng, (size_t)b_rows * ldb);
                    const Vec Cd = random_vec(rng, (size_t)s.M * ldc);
                    const std::vector<float> A(Ad.begin(), Ad.end()), B(Bd.begin(), Bd.end());
                    std::vector<float> C(Cd.begin(), Cd.end());
                    const float sentinel = -777.25f;
                    for (int m = 0; m < s.M; m++)
                        for (int n = 0; n < ldc; n++)
                            if (n >= s.N) C[(size_t)m * ldc + n] = sentinel;
                            else if (beta == 0) C[(size_t)m * ldc + n] = NAN;
                    const std::vector<float> C0 = C;
                    gemm<float>(ta, tb, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
                    double err = 0;
                    for (int m = 0; m < s.M; m++) {
                        for (int n = 0; n < s.N; n++) {
                            double ref = beta == 0 ? 0.0 : (double)C0[(size_t)m * ldc + n];
                            double scale = std::fabs(ref);
                            for (int k = 0; k < s.K; k++) {
                                const double a = ta ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k];
                                const double b = tb ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n];
                                ref += a * b;
                                scale += std::fabs(a * b);
                            }
                            const double c = C[(size_t)m * ldc + n];
                            ASSERT_TRUE(std::isfinite(c)) << "m=" << m << " n=" << n;
                            err = std::max(err, std::fabs(c - ref) / scale);
                        }
                        for (int n = s.N; n < ldc; n++)
                            ASSERT_EQ(C[(size_t)m * ldc + n], sentinel) << "gemm wrote past N (ldc padding)";
                    }
                    worst = std::max(worst, err);
                    EXPECT_LT(err, 1e-6) << "M=" << s.M << " N=" << s.N << " K=" << s.K << " transA=" << ta
                                         << " transB=" << tb << " beta=" << beta;
                }
    std::printf("[gradcheck] %-34s max|C-naive|/sum|a*b| = %.2e\n", "gemm<float> (all cases)", worst);
}

// K = 0 is an empty sum: C = beta·C.
TEST(GemmOps, EmptyInnerDimension) {
    Vec C = {1, 2, 3, 4}, C1 = C;
    const double dummy = 5;
    gemm<double>(false, false, 2, 2, 0, &dummy, 1, &dummy, 2, 1.0, C1.data(), 2);
    EXPECT_EQ(C1, C);
    gemm<double>(false, false, 2, 2, 0, &dummy, 1, &dummy, 2, 0.0, C1.data(), 2);
    EXPECT_EQ(C1, Vec(4, 0.0));
}

// ---------------------------------------------------------------------------------------------
// Linear layer

struct MatmulCase {
    int N = 5, IC = 7, OC = 6;
    Vec inp, w, bias, R;
    explicit MatmulCase(Rng& rng)
        : inp(random_vec(rng, (size_t)N * IC)), w(random_vec(rng, (size_t)OC * IC)), bias(random_vec(rng, OC)),
          R(random_vec(rng, (size_t)N * OC)) {}
    double loss(bool with_bias = true) {
        Vec out((size_t)N * OC);
        matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : (const double*)nullptr, N, IC,
                       OC);
        return dot(out, R);
    }
    void backward(Vec& dinp, Vec& dw, Vec* dbias) {
        matmul_backward(dinp.data(), dw.data(), dbias ? dbias->data() : (double*)nullptr, R.data(), inp.data(),
                        w.data(), N, IC, OC);
    }
};

TEST(GradcheckOps, MatmulForwardMatchesDefinition) {
    Rng rng(7);
    MatmulCase c(rng);
    Vec out((size_t)c.N * c.OC);
    matmul_forward(out.data(), c.inp.data(), c.w.data(), c.bias.data(), c.N, c.IC, c.OC);
    for (int n = 0; n < c.N; n++)
        for (int o = 0; o < c.OC; o++) {
            double s = c.bias[o];
            for (int i = 0; i < c.IC; i++) s += c.inp[(size_t)n * c.IC + i] * c.w[(size_t)o * c.IC + i];
            EXPECT_NEAR(out[(size_t)n * c.OC + o], s, 1e-13);
        }
}

TEST(GradcheckOps, Matmul) {
    Rng rng(8);
    MatmulCase c(rng);
    Vec dinp(c.inp.size(), 0.0), dw(c.w.size(), 0.0), db(c.OC, 0.0);
    c.backward(dinp, dw, &db);
    auto f = [&] { return c.loss(); };
    check_grad("matmul dinp", c.inp, dinp, f);
    check_grad("matmul dw", c.w, dw, f);
    check_grad("matmul dbias", c.bias, db, f);
    // Without a bias (the tied LM head): same dinp and dw.
    Vec dinp2(c.inp.size(), 0.0), dw2(c.w.size(), 0.0);
    c.backward(dinp2, dw2, nullptr);
    auto f2 = [&] { return c.loss(false); };
    check_grad("matmul (no bias) dinp", c.inp, dinp2, f2);
    check_grad("matmul (no bias) dw", c.w, dw2, f2);
}

TEST(GradcheckOps, MatmulAccumulates) {
    Rng rng(9);
    MatmulCase c(rng);
    Vec x1(c.inp.size(), 0.0), w1(c.w.size(), 0.0), b1(c.OC, 0.0);
    Vec x2(c.inp.size(), 0.0), w2(c.w.size(), 0.0), b2(c.OC, 0.0);
    c.backward(x1, w1, &b1);
    c.backward(x2, w2, &b2);
    c.backward(x2, w2, &b2);
    expect_doubled(x2, x1, "dinp");
    expect_doubled(w2, w1, "dw");
    expect_doubled(b2, b1, "dbias");
    // Accumulation onto arbitrary existing values, not only onto zeros.
    Rng rng2(10);
    const Vec x0 = random_vec(rng2, x1.size()), w0 = random_vec(rng2, w1.size()), b0 = random_vec(rng2, b1.size());
    Vec x3 = x0, w3 = w0, b3 = b0;
    c.backward(x3, w3, &b3);
    for (size_t i = 0; i < x3.size(); i++) EXPECT_NEAR(x3[i], x0[i] + x1[i], 1e-13);
    for (size_t i = 0; i < w3.size(); i++) EXPECT_NEAR(w3[i], w0[i] + w1[i], 1e-13);
    for (size_t i = 0; i < b3.size(); i++) EXPECT_NEAR(b3[i], b0[i] + b1[i], 1e-13);
}

// ---------------------------------------------------------------------------------------------
// Attention

struct AttentionCase {
    int B = 2, Tn = 5, C = 12, NH = 3;
    Vec qkv, R, out, att;
    explicit AttentionCase(Rng& rng)
        : qkv(random_vec(rng, (size_t)B * Tn * 3 * C)), R(random_vec(rng, (size_t)B * Tn * C)),
          out((size_t)B * Tn * C), att((size_t)B * NH * Tn * Tn) {}
    double loss() {
        attention_forward(out.data(), att.data(), qkv.data(), B, Tn, C, NH);
        return dot(out, R);
    }
    void backward(Vec& dqkv, const Vec& dout) {
        attention_forward(out.data(), att.data(), qkv.data(), B, Tn, C, NH);
        attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, NH);
    }
};

TEST(GradcheckOps, AttentionForwardMatchesDefinition) {
    Rng rng(11);
    AttentionCase a(rng);
    a.loss();
    const int hs = a.C / a.NH;
    for (int b = 0; b < a.B; b++)
        for (int h = 0; h < a.NH; h++)
            for (int t = 0; t < a.Tn; t++) {
                auto at = [&](int tt, int part, int i) {
                    return a.qkv[((size_t)b * a.Tn + tt) * 3 * a.C + part * a.C + h * hs + i];
                };
                Vec score(t + 1);
                double mx = -INFINITY, sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    double d = 0;
                    for (int i = 0; i < hs; i++) d += at(t, 0, i) * at(t2, 1, i);
                    score[t2] = d / std::sqrt((double)hs);
                    mx = std::max(mx, score[t2]);
                }
                for (double& s : score) sum += (s = std::exp(s - mx));
                const double* arow = &a.att[(((size_t)b * a.NH + h) * a.Tn + t) * a.Tn];
                for (int t2 = 0; t2 < a.Tn; t2++) {
                    if (t2 <= t) EXPECT_NEAR(arow[t2], score[t2] / sum, 1e-14);
                    else EXPECT_EQ(arow[t2], 0.0) << "causal mask: att[t=" << t << ", t'=" << t2 << "]";
                }
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int t2 = 0; t2 <= t; t2++) o += score[t2] / sum * at(t2, 2, i);
                    EXPECT_NEAR(a.out[((size_t)b * a.Tn + t) * a.C + h * hs + i], o, 1e-14);
                }
            }
}

TEST(GradcheckOps, Attention) {
    Rng rng(12);
    AttentionCase a(rng);
    Vec dqkv(a.qkv.size(), 0.0);
    a.backward(dqkv, a.R);
    check_grad("attention dqkv", a.qkv, dqkv, [&] { return a.loss(); });
}

TEST(GradcheckOps, AttentionIsCausal) {
    Rng rng(13);
    AttentionCase a(rng);
    // Forward: changing q, k, v at times > t leaves the output at times <= t bit-identical.
    a.loss();
    const Vec out0 = a.out;
    const int t_cut = 2;
    for (int b = 0; b < a.B; b++)
        for (int t = t_cut + 1; t < a.Tn; t++)
            for (int j = 0; j < 3 * a.C; j++) a.qkv[((size_t)b * a.Tn + t) * 3 * a.C + j] += 0.7;
    a.loss();
    for (int b = 0; b < a.B; b++)
        for (int t = 0; t <= t_cut; t++)
            for (int c = 0; c < a.C; c++)
                EXPECT_EQ(a.out[((size_t)b * a.Tn + t) * a.C + c], out0[((size_t)b * a.Tn + t) * a.C + c]);
    // Backward: a gradient only at times <= t_cut reaches no q, k, v at later times.
    Vec dout(a.R.size(), 0.0);
    for (int b = 0; b < a.B; b++)
        for (int t = 0; t <= t_cut; t++)
            for (int c = 0; c < a.C; c++) dout[((size_t)b * a.Tn + t) * a.C + c] = a.R[((size_t)b * a.Tn + t) * a.C + c];
    Vec dqkv(a.qkv.size(), 0.0);
    a.backward(dqkv, dout);
    for (int b = 0; b < a.B; b++)
        for (int t = 0; t < a.Tn; t++) {
            double mx = 0;
            for (int j = 0; j < 3 * a.C; j++) mx = std::max(mx, std::fabs(dqkv[((size_t)b * a.Tn + t) * 3 * a.C + j]));
            if (t > t_cut) EXPECT_EQ(mx, 0.0) << "gradient leaked to future time " << t;
            else EXPECT_GT(mx, 0.0) << "no gradient at time " << t;
        }
}

// Attention's backward stores dqkv: what the buffer held before, and a second call, change nothing.
TEST(GradcheckOps, AttentionStores) {
    Rng rng(14);
    AttentionCase a(rng);
    Vec d1(a.qkv.size(), 0.0), d2(a.qkv.size(), 5.0);
    a.backward(d1, a.R);
    a.backward(d2, a.R);
    a.backward(d2, a.R);
    for (size_t i = 0; i < d1.size(); i++) ASSERT_EQ(d2[i], d1[i]) << "dqkv[" << i << "]";
}

// ---------------------------------------------------------------------------------------------
// GELU

TEST(GradcheckOps, Gelu) {
    Rng rng(15);
    Vec x = random_vec(rng, 40, 3.0), R = random_vec(rng, 40);
    Vec out(x.size());
    auto f = [&] {
        gelu_forward(out.data(), x.data(), x.size());
        return dot(out, R);
    };
    f();
    for (size_t i = 0; i < x.size(); i++) {
        const double y = 0.5 * x[i] * (1 + std::tanh(std::sqrt(2 / M_PI) * (x[i] + 0.044715 * std::pow(x[i], 3))));
        EXPECT_NEAR(out[i], y, 1e-14);
    }
    Vec dx(x.size(), 0.0);
    gelu_backward(dx.data(), R.data(), x.data(), x.size());
    check_grad("gelu dinp", x, dx, f);
    Vec dx2(x.size(), 0.0);
    gelu_backward(dx2.data(), R.data(), x.data(), x.size());
    gelu_backward(dx2.data(), R.data(), x.data(), x.size());
    expect_doubled(dx2, dx, "gelu dinp");
}

// GPT-2's GELU at fixed points against PyTorch: torch.nn.functional.gelu(x, approximate="tanh")
// and its autograd derivative, in float64 (torch 1.13), typed in from that run. The points reach
// |x| = 5, where the cubic term's constant 0.044715 matters (0.045 moves y(2) by 1.6e-4).
TEST(Gelu, MatchesPyTorchAtFixedPoints) {
    const Vec x = {-5.0, -3.0, -1.5, -0.5, 0.25, 1.0, 2.0, 3.0, 4.5};
    const Vec y = {-2.2917961972623857e-07, -0.0036373920817729943, -0.10042842301976707, -0.15428599017485606,
                   0.149675350701685,       0.8411919906082768,     1.954597694087775,    2.996362607918227,
                   4.499994863262588};
    const Vec dy = {-1.5463619879596227e-06, -0.011584166630969648, -0.12771079315143308, 0.13263009646535764,
                    0.6953540951510604,      1.0829640838457826,    1.0860992566236183,   1.0115841666309695,
                    1.0000293222704426};
    const size_t n = x.size();
    Vec out(n), dinp(n, 0.0);
    const Vec ones(n, 1.0);
    gelu_forward(out.data(), x.data(), n);
    gelu_backward(dinp.data(), ones.data(), x.data(), n);
    for (size_t i = 0; i < n; i++) {
        EXPECT_NEAR(out[i], y[i], 1e-15) << "x = " << x[i];
        EXPECT_NEAR(dinp[i], dy[i], 1e-15) << "x = " << x[i];
    }
    // The fast version in float, as training runs it (cpu_fast_ops.h; x·σ(2u) keeps float's
    // relative precision for negative x, where the reference's 1 + tanh u cancels).
    const std::vector<float> xf(x.begin(), x.end()), onesf(n, 1.0f);
    std::vector<float> outf(n), dinpf(n, 0.0f);
    fast::gelu_forward(outf.data(), xf.data(), n);
    fast::gelu_backward(dinpf.data(), onesf.data(), xf.data(), n);
    for (size_t i = 0; i < n; i++) {
        EXPECT_NEAR(outf[i], y[i], 4e-7 * std::fabs(y[i]) + 1e-8) << "fast float, x = " << x[i];
        EXPECT_NEAR(dinpf[i], dy[i], 3e-6) << "fast float, x = " << x[i];  // σ(1 − σ) cancels at large x
    }
}

// ---------------------------------------------------------------------------------------------
// Residual step with Δt

TEST(GradcheckOps, ResidualWithDt) {
    for (double dt : {1.0, 0.1, 0.37}) {
        Rng rng(16);
        const size_t n = 30;
        Vec x = random_vec(rng, n), fv = random_vec(rng, n), R = random_vec(rng, n), out(n);
        auto f = [&] {
            residual_forward(out.data(), x.data(), fv.data(), dt, n);
            return dot(out, R);
        };
        f();
        for (size_t i = 0; i < n; i++) EXPECT_EQ(out[i], x[i] + dt * fv[i]);
        Vec df(n, 0.0);
        residual_backward(df.data(), R.data(), dt, n);
        const std::string tag = " (dt=" + std::to_string(dt).substr(0, 4) + ")";
        // x's gradient is the output's gradient itself, which the model therefore leaves in
        // place (docs/block.md §2, line 4): no op computes it.
        check_grad(("residual dx" + tag).c_str(), x, R, f);
        check_grad(("residual df" + tag).c_str(), fv, df, f);
        for (size_t i = 0; i < n; i++) EXPECT_EQ(df[i], dt * R[i]);
        Vec df2(n, 0.0);
        residual_backward(df2.data(), R.data(), dt, n);
        residual_backward(df2.data(), R.data(), dt, n);
        expect_doubled(df2, df, "residual df");
    }
}

// ---------------------------------------------------------------------------------------------
// Cross-entropy over the real vocabulary V of Vp padded columns

struct CrossEntropyCase {
    int N = 6, V = 7, Vp = 10;
    std::vector<int32_t> targets{0, 6, 3, 3, 1, 5};
    Vec logits;
    double dloss = 0.37;
    explicit CrossEntropyCase(Rng& rng) : logits(random_vec(rng, (size_t)N * Vp, 2.0)) {}
    // dloss · Σ_n loss_n
    double loss() {
        Vec losses(N);
        crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
        double s = 0;
        for (double l : losses) s += l;
        return dloss * s;
    }
};

TEST(GradcheckOps, CrossEntropyForwardMatchesDefinition) {
    Rng rng(17);
    CrossEntropyCase c(rng);
    Vec losses(c.N);
    crossentropy_forward(losses.data(), c.logits.data(), c.targets.data(), c.N, c.V, c.Vp);
    for (int n = 0; n < c.N; n++) {
        double z = 0;
        for (int v = 0; v < c.V; v++) z += std::exp(c.logits[(size_t)n * c.Vp + v]);
        EXPECT_NEAR(losses[n], std::log(z) - c.logits[(size_t)n * c.Vp + c.targets[n]], 1e-14);
    }
}

TEST(GradcheckOps, CrossEntropy) {
    Rng rng(18);
    CrossEntropyCase c(rng);
    Vec grad = c.logits;
    crossentropy_backward_inplace(grad.data(), c.targets.data(), c.dloss, c.N, c.V, c.Vp);
    check_grad("crossentropy dlogits", c.logits, grad, [&] { return c.loss(); });
    // Padding columns: exactly zero gradient, and they do not change the loss at all.
    for (int n = 0; n < c.N; n++)
        for (int v = c.V; v < c.Vp; v++) EXPECT_EQ(grad[(size_t)n * c.Vp + v], 0.0) << "n=" << n << " v=" << v;
    const double before = c.loss();
    for (int n = 0; n < c.N; n++)
        for (int v = c.V; v < c.Vp; v++) c.logits[(size_t)n * c.Vp + v] = 1000.0 * (v % 2 ? 1 : -1);
    EXPECT_EQ(c.loss(), before);
    // ... nor the gradient of the real columns.
    Vec grad2 = c.logits;
    crossentropy_backward_inplace(grad2.data(), c.targets.data(), c.dloss, c.N, c.V, c.Vp);
    EXPECT_EQ(grad2, grad);
    // Each row of the gradient sums to zero (softmax minus one-hot).
    for (int n = 0; n < c.N; n++) {
        double s = 0;
        for (int v = 0; v < c.Vp; v++) s += grad[(size_t)n * c.Vp + v];
        EXPECT_NEAR(s, 0.0, 1e-15);
    }
}

// ---------------------------------------------------------------------------------------------
// Hidden-state statistics (docs/statistics.md)

TEST(StreamStatistics, SmallKnownTensor) {
    // X = [[1, -2, 3], [4, 6, -8]] (N = 2 tokens, C = 3 channels)
    //   mean_abs  = (1+2+3+4+6+8)/6 = 4
    //   entry_var = mean(var(1,-2,3), var(4,6,-8)) = mean(38/9, 344/9) = 191/9
    //   data_var  = mean(var(1,4), var(-2,6), var(3,-8)) = mean(9/4, 16, 121/4) = 97/6
    const double x[] = {1, -2, 3, 4, 6, -8};
    const StreamStats s = stream_statistics(x, 2, 3);
    EXPECT_NEAR(s.mean_abs, 4.0, 1e-15);
    EXPECT_NEAR(s.entry_var, 191.0 / 9.0, 1e-13);
    EXPECT_NEAR(s.data_var, 97.0 / 6.0, 1e-13);
    const float xf[] = {1, -2, 3, 4, 6, -8};
    const StreamStats sf = stream_statistics(xf, 2, 3);
    EXPECT_NEAR(sf.mean_abs, 4.0, 1e-15);
    EXPECT_NEAR(sf.entry_var, 191.0 / 9.0, 1e-13);
    EXPECT_NEAR(sf.data_var, 97.0 / 6.0, 1e-13);
}

TEST(StreamStatistics, RandomTensorAgainstTwoPassFormulas) {
    Rng rng(19);
    const int N = 13, C = 9;
    Vec x = random_vec(rng, (size_t)N * C, 3.0);
    for (double& v : x) v += 1.5;  // non-zero mean so a missing centring would show
    std::vector<float> xf(x.begin(), x.end());
    double mean_abs = 0, entry_var = 0, data_var = 0;
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += (double)xf[(size_t)n * C + c] / C;
        for (int c = 0; c < C; c++) v += std::pow(xf[(size_t)n * C + c] - m, 2) / C;
        entry_var += v / N;
        for (int c = 0; c < C; c++) mean_abs += std::fabs((double)xf[(size_t)n * C + c]) / (N * C);
    }
    for (int c = 0; c < C; c++) {
        double m = 0, v = 0;
        for (int n = 0; n < N; n++) m += (double)xf[(size_t)n * C + c] / N;
        for (int n = 0; n < N; n++) v += std::pow(xf[(size_t)n * C + c] - m, 2) / N;
        data_var += v / C;
    }
    const StreamStats s = stream_statistics(xf.data(), N, C);
    EXPECT_NEAR(s.mean_abs, mean_abs, 1e-12 * mean_abs);
    EXPECT_NEAR(s.entry_var, entry_var, 1e-12 * entry_var);
    EXPECT_NEAR(s.data_var, data_var, 1e-12 * data_var);
}

// ---------------------------------------------------------------------------------------------
// sum_of_squares

TEST(SumOfSquares, SmallVector) {
    const double x[] = {1.5, -2, 0.25, 3};
    EXPECT_EQ(sum_of_squares(x, 4), 2.25 + 4 + 0.0625 + 9);
    const float xf[] = {1.5f, -2.f, 0.25f, 3.f};
    EXPECT_EQ(sum_of_squares(xf, 4), 2.25 + 4 + 0.0625 + 9);
    EXPECT_EQ(sum_of_squares(xf, 0), 0.0);
}

// ---------------------------------------------------------------------------------------------
// AdamW (docs/model.md §5)

// Step 1 with β1 = 0.9, β2 = 0.999: m = 0.1·g, v = 0.001·g², m̂ = g, v̂ = g², so
// p1 = p0 − lr·(g/(|g| + ε) + wd·p0) with g the scaled gradient.
TEST(AdamW, HandComputedScalarsOverThreeSteps) {
    for (double wd : {0.0, 0.1}) {
        const AdamWHyper h{0.1, 0.9, 0.999, 1e-8, wd};
        const double grad_scale = 2.0;
        // three parameters, three steps of raw gradients (before grad_scale)
        double p[3] = {1.0, -0.5, 2.0};
        double m[3] = {0, 0, 0}, v[3] = {0, 0, 0};
        const double g[3][3] = {{0.5, -0.25, 1.5}, {-0.25, 0.125, 1.0}, {0.75, -0.5, -2.0}};

        // Step 1, values worked out by hand.
        adamw_update(p, g[0], m, v, 3, h, 1, grad_scale);
        const double m1[3] = {0.1, -0.05, 0.3}, v1[3] = {0.001, 0.00025, 0.009};
        const double p1[3] = {1.0 - 0.1 * (1.0 / (1.0 + 1e-8) + wd * 1.0),
                              -0.5 - 0.1 * (-0.5 / (0.5 + 1e-8) + wd * -0.5),
                              2.0 - 0.1 * (3.0 / (3.0 + 1e-8) + wd * 2.0)};
        for (int i = 0; i < 3; i++) {
            EXPECT_NEAR(m[i], m1[i], 1e-16);
            EXPECT_NEAR(v[i], v1[i], 1e-16);
            EXPECT_NEAR(p[i], p1[i], 1e-15);
        }
        // Step 2 for parameter 0, by hand: g = −0.5, m = 0.09 − 0.05 = 0.04,
        // v = 0.000999 + 0.00025 = 0.001249, m̂ = 0.04/0.19, v̂ = 0.001249/0.001999.
        adamw_update(p, g[1], m, v, 3, h, 2, grad_scale);
        EXPECT_NEAR(m[0], 0.04, 1e-16);
        EXPECT_NEAR(v[0], 0.001249, 1e-16);
        const double p2_0 = p1[0] - 0.1 * ((0.04 / 0.19) / (std::sqrt(0.001249 / 0.001999) + 1e-8) + wd * p1[0]);
        EXPECT_NEAR(p[0], p2_0, 1e-15);

        // Steps 2 and 3 for every parameter against the docs/model.md §5 formulas written out.
        double rp[3] = {p1[0], p1[1], p1[2]}, rm[3] = {m1[0], m1[1], m1[2]}, rv[3] = {v1[0], v1[1], v1[2]};
        for (int t = 2; t <= 3; t++) {
            if (t == 3) adamw_update(p, g[2], m, v, 3, h, 3, grad_scale);
            for (int i = 0; i < 3; i++) {
                const double gi = grad_scale * g[t - 1][i];
                rm[i] = 0.9 * rm[i] + 0.1 * gi;
                rv[i] = 0.999 * rv[i] + 0.001 * gi * gi;
                const double mh = rm[i] / (1 - std::pow(0.9, t)), vh = rv[i] / (1 - std::pow(0.999, t));
                rp[i] = rp[i] - 0.1 * (mh / (std::sqrt(vh) + 1e-8) + wd * rp[i]);
                EXPECT_NEAR(m[i], rm[i], 1e-15) << "step " << t << " param " << i << " wd " << wd;
                EXPECT_NEAR(v[i], rv[i], 1e-15) << "step " << t << " param " << i << " wd " << wd;
                EXPECT_NEAR(p[i], rp[i], 1e-14) << "step " << t << " param " << i << " wd " << wd;
            }
        }
    }
}

TEST(AdamW, ZeroGradientOnlyDecays) {
    const AdamWHyper h{0.01, 0.9, 0.95, 1e-8, 0.1};
    double p[2] = {3.0, -1.5}, m[2] = {0, 0}, v[2] = {0, 0};
    const double g[2] = {0, 0};
    adamw_update(p, g, m, v, 2, h, 1, 1.0);
    EXPECT_NEAR(p[0], 3.0 * (1 - 0.01 * 0.1), 1e-15);
    EXPECT_NEAR(p[1], -1.5 * (1 - 0.01 * 0.1), 1e-15);
}

// Gradients of the size of ε = 1e-8, where its place matters: at step 1 (m̂ = g, v̂ = g²) the
// update direction is g/(|g| + ε), worked out by hand: 1e-8 → 0.5, −3e-8 → −0.75, 1e-9 → 1/11,
// 0 → 0. (ε inside the square root would give about g/1e-4, nearly 0.) Double and float.
TEST(AdamW, EpsilonPlacementWithSmallGradients) {
    const AdamWHyper h{0.1, 0.9, 0.95, 1e-8, 0.0};
    const double g[4] = {1e-8, -3e-8, 1e-9, 0.0}, direction[4] = {0.5, -0.75, 1.0 / 11, 0.0};
    double p[4] = {1, 1, 1, 1}, m[4] = {}, v[4] = {};
    adamw_update(p, g, m, v, 4, h, 1, 1.0);
    float pf[4] = {1, 1, 1, 1}, mf[4] = {}, vf[4] = {};
    const float gf[4] = {1e-8f, -3e-8f, 1e-9f, 0.0f};
    adamw_update(pf, gf, mf, vf, 4, h, 1, 1.0);
    for (int i = 0; i < 4; i++) {
        EXPECT_NEAR(p[i], 1.0 - 0.1 * direction[i], 1e-15) << "gradient " << g[i];
        EXPECT_NEAR(pf[i], 1.0 - 0.1 * direction[i], 1e-6) << "float, gradient " << g[i];
    }
}

TEST(AdamW, FloatMatchesDoubleReference) {
    const AdamWHyper h{1e-3, 0.9, 0.95, 1e-8, 0.1};
    Rng rng(25);
    const size_t n = 64;
    Vec pd = random_vec(rng, n), md(n, 0.0), vd(n, 0.0);
    std::vector<float> pf(pd.begin(), pd.end()), mf(n, 0.f), vf(n, 0.f);
    pd.assign(pf.begin(), pf.end());
    for (int t = 1; t <= 3; t++) {
        const Vec gd0 = random_vec(rng, n, 0.01);
        std::vector<float> gf(gd0.begin(), gd0.end());
        const Vec gd(gf.begin(), gf.end());
        adamw_update(pd.data(), gd.data(), md.data(), vd.data(), n, h, t, 0.5);
        adamw_update(pf.data(), gf.data(), mf.data(), vf.data(), n, h, t, 0.5);
    }
    for (size_t i = 0; i < n; i++) EXPECT_NEAR(pf[i], pd[i], 1e-6 * std::fabs(pd[i]) + 1e-9);
}

}  // namespace

"""experiments/stats.py against values worked out independently of it: R's fisher.test and
binom.test, hand counts of permutations and of hypergeometric tables, Welch's t by hand, least
squares by hand, and synthetic data from known laws. Run by build/test_experiments (make test)."""
import math
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from experiments.python import require  # noqa: E402

require(("numpy", "scipy", "pandas"), "test_stats.py")

from experiments import stats as S  # noqa: E402


class Tests(unittest.TestCase):
    def test_fisher_exact_against_r(self):
        # R: fisher.test(matrix(c(1, 11, 9, 3), 2))$p.value etc.
        self.assertAlmostEqual(S.fisher_exact(1, 9, 11, 3), 0.002759456, delta=1e-9)
        self.assertAlmostEqual(S.fisher_exact(3, 1, 1, 3), 0.4857142857, delta=1e-9)
        self.assertAlmostEqual(S.fisher_exact(5, 0, 0, 5), 0.0079365079, delta=1e-9)
        self.assertAlmostEqual(S.fisher_exact(0, 5, 0, 5), 1.0, delta=1e-12)
        # 5 of 20 against 0 of 20, by hand: P(k of the 5 failures in the first row) =
        # C(20, k)·C(20, 5 − k)/C(40, 5); the tables no more likely than k = 5 are k = 0 and 5,
        # each 15504/658008, so p = 31008/658008.
        self.assertAlmostEqual(S.fisher_exact(5, 15, 0, 20), 31008 / 658008, delta=1e-12)

    def test_sign_test_by_hand(self):
        # 2·Σ_{i≤k} C(n, i)/2^n (R's binom.test gives the same).
        self.assertAlmostEqual(S.sign_test(0, 8), 2 / 256, delta=1e-15)
        self.assertAlmostEqual(S.sign_test(8, 8), 2 / 256, delta=1e-15)
        self.assertAlmostEqual(S.sign_test(1, 8), 2 * 9 / 256, delta=1e-15)
        self.assertAlmostEqual(S.sign_test(3, 10), 2 * 176 / 1024, delta=1e-15)
        self.assertAlmostEqual(S.sign_test(4, 8), 1.0, delta=1e-15)
        self.assertAlmostEqual(S.sign_test(40, 40), 2 / 2 ** 40, delta=1e-25)
        self.assertIsNone(S.sign_test(0, 0))

    def test_welch_by_hand(self):
        # Means 3 and 6, variances 2.5 and 10: t = −3/sqrt(2.5/5 + 10/5) = −3/sqrt(2.5); p from
        # Student's t with the Welch–Satterthwaite df 2.5²/(0.5²/4 + 2²/4) = 5.882, by numerical
        # integration of its density: 0.1075312.
        t, p = S.welch([1, 2, 3, 4, 5], [2, 4, 6, 8, 10])
        self.assertAlmostEqual(t, -3 / math.sqrt(2.5), delta=1e-12)
        self.assertAlmostEqual(p, 0.1075312, delta=1e-6)
        self.assertIsNone(S.welch([1.0], [2.0, 3.0]))
        self.assertIsNone(S.welch([1.0, 1.0], [2.0, 2.0]))
        self.assertEqual(S.welch([1, 2, float("nan"), 3], [2, 4, None, 6])[0], S.welch([1, 2, 3], [2, 4, 6])[0])

    def test_spearman_exact_p_by_counting(self):
        # n = 4 in order: 2 of the 24 orderings reach |ρ| = 1; n = 5 with two adjacent swaps
        # (ρ = 0.8): 16 of 120 orderings have Σd² ≤ 4 or ≥ 36.
        rho, p = S.spearman([1, 2, 3, 4], [10, 20, 30, 40])
        self.assertAlmostEqual(rho, 1.0, delta=1e-12)
        self.assertAlmostEqual(p, 2 / 24, delta=1e-12)
        rho, p = S.spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
        self.assertAlmostEqual(rho, 0.8, delta=1e-12)
        self.assertAlmostEqual(p, 16 / 120, delta=1e-12)
        rho, p = S.spearman([1, 2, 3, 4, 5], [5, 4, 3, 2, 1])
        self.assertAlmostEqual(rho, -1.0, delta=1e-12)
        self.assertAlmostEqual(p, 2 / 120, delta=1e-12)
        self.assertIsNone(S.spearman([1, 2, 3, 4], [1, 1, 1, 1]))
        self.assertIsNone(S.spearman([1, 2, 3], [1, 2, 3]))

    def test_spearman_ties_get_their_mean_rank(self):
        # x ranks 1, 2.5, 2.5, 4, 5, 6; y = (1, 3, 2, 4, 4, 6) ranks 1, 3, 2, 4.5, 4.5, 6. Around the
        # mean 3.5: Σ dx·dy = 16.5, Σ dx² = Σ dy² = 17, so ρ = 16.5/17 = 33/34 (ranked by position
        # instead, 16.5/17.5 = 0.943).
        rho, _ = S.spearman([1, 2, 2, 3, 4, 5], [1, 3, 2, 4, 4, 6])
        self.assertAlmostEqual(rho, 33 / 34, delta=1e-12)
        # Above 8 points the p of Student's t with n − 2 df. Five adjacent swaps of 10 ranks: Σd² = 10,
        # ρ = 1 − 6·10/990; for an even df ν the two-sided p is 1 − A(t|ν) with A = sin θ·(1 +
        # cos²θ/2 + 1·3/(2·4)·cos⁴θ + 1·3·5/(2·4·6)·cos⁶θ), θ = atan(t/√ν) (Abramowitz & Stegun
        # 26.7.3, here ν = 8).
        rho, p = S.spearman(list(range(10)), [1, 0, 3, 2, 5, 4, 7, 6, 9, 8])
        self.assertAlmostEqual(rho, 1 - 60 / 990, delta=1e-12)
        t = rho * math.sqrt(8 / (1 - rho * rho))
        theta = math.atan(t / math.sqrt(8))
        c = math.cos(theta) ** 2
        self.assertAlmostEqual(p, 1 - math.sin(theta) * (1 + c / 2 + 3 / 8 * c ** 2 + 15 / 48 * c ** 3), delta=1e-12)

    def test_aicc_formula(self):
        # n = 6, k = 3, RSS = 2: 6·ln(2/6) + 2·3 + 2·3·4/(6 − 3 − 1) = −6.591674 + 6 + 12.
        self.assertAlmostEqual(S.aicc(2.0, 6, 3), 11.408326, delta=1e-6)
        self.assertIsNone(S.aicc(2.0, 5, 4))  # n ≤ k + 1

    def test_linear_fit_minimises_the_relative_residuals(self):
        # 1 + 0.5·x plus noise at x = 1..6, fitted with weights w = 1/y² (relative residuals): the
        # normal equations of weighted least squares solved by hand in plain arithmetic.
        xs, ys = list(range(1, 7)), [1.0, 1.9, 2.4, 2.9, 3.5, 3.6]
        w = [1 / y ** 2 for y in ys]
        s0, s1, s2 = sum(w), sum(wi * x for wi, x in zip(w, xs)), sum(wi * x * x for wi, x in zip(w, xs))
        t0, t1 = sum(wi * y for wi, y in zip(w, ys)), sum(wi * x * y for wi, x, y in zip(w, xs, ys))
        b = (s0 * t1 - s1 * t0) / (s0 * s2 - s1 * s1)
        a = (t0 - b * s1) / s0
        rss = sum(wi * (y - a - b * x) ** 2 for wi, x, y in zip(w, xs, ys))
        fits, winner = S.fit_laws(xs, ys)
        self.assertAlmostEqual(fits["linear"]["params"]["a"], a, delta=1e-12)
        self.assertAlmostEqual(fits["linear"]["params"]["b"], b, delta=1e-12)
        self.assertAlmostEqual(fits["linear"]["rss"], rss, delta=1e-12)
        self.assertAlmostEqual(fits["linear"]["aicc"], 6 * math.log(rss / 6) + 6 + 12, delta=1e-9)
        self.assertEqual(winner, "linear")  # the three-coefficient laws do not pay for their penalty

    def test_fit_laws_recover_exact_laws(self):
        xs = list(range(1, 25))
        fits, winner = S.fit_laws(xs, [5 + 2 * math.exp(0.15 * x) for x in xs])
        self.assertEqual(S.law_name(winner, fits[winner]["params"]), "exponential")
        for k, v in dict(a=5, b=2, r=0.15).items():
            self.assertAlmostEqual(fits["exponential"]["params"][k], v, delta=1e-5 * abs(v))
        fits, winner = S.fit_laws(xs, [1 + 3 * math.sqrt(x) for x in xs])
        self.assertEqual(S.law_name(winner, fits[winner]["params"]), "sub-linear power")
        self.assertAlmostEqual(fits["power"]["params"]["p"], 0.5, delta=1e-6)
        fits, winner = S.fit_laws(xs, [4 - 3 * math.exp(-0.3 * x) for x in xs])
        self.assertEqual(S.law_name(winner, fits[winner]["params"]), "saturating exponential")
        fits, winner = S.fit_laws(xs, [1 + 0.3 * x + 0.05 * x * x for x in xs])
        self.assertEqual(S.law_name(winner, fits[winner]["params"]), "convex quadratic")
        self.assertAlmostEqual(S.law_rate("quadratic", fits["quadratic"]["params"])[1], 0.05, delta=1e-9)
        fits, winner = S.fit_laws([1, 2, 3, 4, 5], [1.0, 2.0, 3.5, 4.0, 5.2])
        self.assertIsNone(fits["quadratic"]["aicc"])  # n ≤ k + 1: not compared
        self.assertEqual(winner, "linear")  # the one law with enough points
        self.assertIsNone(S.fit_laws([1, 2, 3, 4, 5], [1, 2, 0, 4, 5])[1])  # not positive

    def test_law_selection_recovers_known_laws_at_the_noise_of_real_profiles(self):
        # The noise level: the median RMS relative residual of the best law over the published E2
        # profiles after training (L ≥ 8, both quantities). At that level each law is named right in
        # most of 40 simulated profiles at L = 32 and 64, the depths whose profiles E2 fits.
        from experiments.results import load
        layers = load(os.path.join(REPO, "docs", "e2")).layers
        residuals = []
        for _, rows in layers.groupby("run"):
            for key in ("mean_abs", "entry_var"):
                y = list(rows.sort_values("layer")[key])[1:]
                if len(y) >= 8:
                    fits, winner = S.fit_laws(range(1, len(y) + 1), y)
                    residuals.append(S.relative_residual(fits, winner, len(y)))
        noise = sorted(residuals)[len(residuals) // 2]
        self.assertTrue(0.001 < noise < 0.2, noise)
        laws = {"linear": lambda x: 1 + 0.5 * x, "convex quadratic": lambda x: 1 + 0.1 * x + 0.05 * x * x,
                "exponential": lambda x: 5 + S.np.exp(0.1 * x), "sub-linear power": lambda x: 1 + S.np.sqrt(x)}
        recovered = S.simulate_law_recovery(laws, [32, 64], noise, draws=40)
        for (name, depth), share in recovered.items():
            self.assertGreater(share, 0.5, f"{name} at L = {depth}: {share:.0%} of the draws (noise {noise:.3f})")

    def test_ols_by_hand(self):
        # y = (1, 3, 4, 8) at x = 0..3: x̄ = 1.5, ȳ = 4, Sxx = 5, Sxy = 11: b = 2.2, a = 0.7; residuals
        # 0.3, 0.1, −1.1, 0.7, RSS = 1.8, s² = 0.9 on 2 df, se(b) = sqrt(0.9/5); with 2 df the
        # two-sided p of t is 1 − t/sqrt(t² + 2).
        fit = S.ols([[1, 1, 1, 1], [0, 1, 2, 3]], [1, 3, 4, 8])
        beta, se, p, rss, df = fit
        self.assertAlmostEqual(beta[0], 0.7, delta=1e-12)
        self.assertAlmostEqual(beta[1], 2.2, delta=1e-12)
        self.assertAlmostEqual(rss, 1.8, delta=1e-12)
        self.assertEqual(df, 2)
        self.assertAlmostEqual(se[1], math.sqrt(0.9 / 5), delta=1e-12)
        t = 2.2 / math.sqrt(0.9 / 5)
        self.assertAlmostEqual(p[1], 1 - t / math.sqrt(t * t + 2), delta=1e-12)
        # The 95% interval's ends are where the t-test against them gives p = 0.05 (2 df, as above).
        est, low, high = S.coefficient_ci(fit, 1)
        self.assertAlmostEqual(est, 2.2, delta=1e-12)
        for end in (low, high):
            t = abs(2.2 - end) / math.sqrt(0.9 / 5)
            self.assertAlmostEqual(1 - t / math.sqrt(t * t + 2), 0.05, delta=1e-9)
        self.assertIsNone(S.ols([[1, 1], [0, 1]], [1, 2]))  # no degree of freedom left

    def test_intervals(self):
        # Welch's interval: shifting x by either end gives Welch's p = 0.05.
        x, y = [1, 2, 3, 4, 5], [2, 4, 6, 8, 10]
        diff, low, high = S.welch_ci(x, y)
        self.assertAlmostEqual(diff, -3.0, delta=1e-12)
        for end in (low, high):
            self.assertAlmostEqual(S.welch([v - end for v in x], y)[1], 0.05, delta=1e-9)
        mean, low, high = S.mean_ci([1.0, 2.0, 4.0])
        self.assertAlmostEqual(mean, 7 / 3, delta=1e-12)
        for end in (low, high):
            self.assertAlmostEqual(S.stats.ttest_1samp([1.0, 2.0, 4.0], end).pvalue, 0.05, delta=1e-9)
        self.assertIsNone(S.mean_ci([1.0]))

    def test_holm_by_hand(self):
        # Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 → running max
        # 0.02, 0.03, 0.06, 0.06; back in the given order.
        self.assertEqual([round(p, 12) for p in S.holm([0.01, 0.04, 0.03, 0.005])], [0.03, 0.06, 0.06, 0.02])
        self.assertEqual(S.holm([0.5, None]), [1.0, 1.0])
        self.assertEqual(S.holm([0.001]), [0.001])

    def test_lr_sensitivity_by_hand(self):
        # L(1e-3) = 5, L(1e-2) = 4, 1e-1 stopped (counts as L_init = 8): L* = 4, mean(1, 0, 4) = 5/3.
        best, lr, sens = S.lr_sensitivity({1e-3: 5.0, 1e-2: 4.0, 1e-1: None}, 8.0)
        self.assertEqual((best, lr), (4.0, 1e-2))
        self.assertAlmostEqual(sens, 5 / 3, delta=1e-12)
        self.assertAlmostEqual(S.lr_sensitivity({1e-3: 9.0, 1e-2: 4.0}, 8.0)[2], 2.0, delta=1e-12)  # capped at L_init
        self.assertEqual(S.lr_sensitivity({1e-3: None}, 8.0), (None, None, None))

    def test_failure_edge_by_hand(self):
        F, T = False, True
        failed = {1e-3: [F, T, F], 3e-3: [F, F, F], 1e-2: [F, T, F], 3e-2: [T, T, F], 0.1: [T, T, T]}
        # Above the best lr 3e-3 (the failure at 1e-3 does not count): 1/3 at 1e-2, 2/3 at 3e-2:
        # halfway in ln η between them, sqrt(1e-2 · 3e-2).
        edge = S.failure_edge(failed, 3e-3)
        self.assertEqual((edge["low"], edge["high"]), (1e-2, 3e-2))
        self.assertAlmostEqual(edge["edge"], math.sqrt(3e-4), delta=1e-15)
        self.assertEqual(edge["rates"][3e-2], (2, 3))
        self.assertNotIn(1e-3, edge["rates"])
        # Exactly half at the first lr above: the edge is that lr (f_hi = 1/2 is reached there).
        edge = S.failure_edge({1e-3: [F, F], 1e-2: [T, F]}, 1e-3)
        self.assertEqual((edge["low"], edge["high"]), (1e-3, 1e-2))
        self.assertAlmostEqual(edge["edge"], 1e-2, delta=1e-15)
        # Never half: not bracketed.
        edge = S.failure_edge({1e-3: [F, F], 1e-2: [T, F, F]}, 1e-3)
        self.assertIsNone(edge["edge"])
        self.assertIsNone(edge["high"])
        self.assertEqual(edge["low"], 1e-2)
        self.assertEqual(S.best_lr({1e-3: [5.0, 5.2], 1e-2: [4.0, 8.3], 3e-2: [4.5, 4.6]}), 3e-2)

    def test_mean_sd(self):
        mean, sd, n = S.mean_sd([0.1, 0.1, 0.1])
        self.assertEqual((sd, n), (0.0, 3))  # summed exactly: equal values have sd 0, not 1e-17
        self.assertAlmostEqual(mean, 0.1, delta=1e-16)
        mean, sd, n = S.mean_sd([1, 2, None, float("nan"), 4])
        self.assertEqual((n, mean), (3, 7 / 3))
        self.assertAlmostEqual(sd, math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2), delta=1e-12)
        self.assertEqual(S.mean_sd([]), (None, None, 0))



def logit_loglik(X, y, beta):
    """The plain log-likelihood of a logistic regression, written out: Σ y·ln p + (1 − y)·ln(1 − p)."""
    p = 1 / (1 + S.np.exp(-(X @ beta)))
    return float((y * S.np.log(p) + (1 - y) * S.np.log(1 - p)).sum())


def firth_objective(X, y, beta):
    """Firth's penalised log-likelihood, written out: the plain one + ½·ln det(Xᵀ·diag(p(1 − p))·X)."""
    p = 1 / (1 + S.np.exp(-(X @ beta)))
    return logit_loglik(X, y, beta) + 0.5 * S.np.linalg.slogdet(X.T @ (X * (p * (1 - p))[:, None]))[1]


def maximise(f, start):
    """The maximiser of f by scipy's Nelder–Mead, to tight tolerances (an optimiser of its own, not
    the Newton steps of firth_logistic)."""
    found = S.optimize.minimize(lambda b: -f(b), start, method="Nelder-Mead",
                                options=dict(xatol=1e-10, fatol=1e-12, maxiter=40000, maxfev=40000))
    return found.x


def dose_response(rng, lrs, seeds, alpha, beta, shift=0.0, flagged=None):
    """Runs at each lr × `seeds`: an event with P = 1/(1 + e^{−(α + β·ln lr + γ·flag)}), γ = −β·shift
    (the flagged runs reach 50% at e^{shift} times the lr); `flagged` per run, or None."""
    x = S.np.repeat(S.np.log(lrs), seeds)
    flags = S.np.zeros(len(x)) if flagged is None else S.np.asarray(flagged(len(x)), dtype=float)
    p = 1 / (1 + S.np.exp(-(alpha + beta * x - beta * shift * flags)))
    return x, (rng.random(len(x)) < p).astype(float), flags


class DoseResponse(unittest.TestCase):
    """Firth's logistic regression and the dose-response estimates built on it."""

    def test_firth_agrees_with_plain_maximum_likelihood_on_a_large_sample(self):
        # 4000 runs without separation: Firth's penalty moves the estimates by O(1/n), so they agree
        # with a plain maximum-likelihood fit (scipy's Nelder–Mead on the log-likelihood) to 1e-2;
        # its penalised likelihood is the one written out here, at its own maximum.
        rng = S.np.random.default_rng(11)
        x = rng.normal(size=4000)
        X = S.np.column_stack([S.np.ones(4000), x])
        y = (rng.random(4000) < 1 / (1 + S.np.exp(-(-0.5 + 1.2 * x)))).astype(float)
        beta, cov, penalised = S.firth_logistic(X, y)
        plain = maximise(lambda b: logit_loglik(X, y, b), [0.0, 0.0])
        for got, want in zip(beta, plain):
            self.assertAlmostEqual(got, want, delta=1e-2)
        self.assertAlmostEqual(penalised, firth_objective(X, y, beta), delta=1e-9)
        self.assertAlmostEqual(beta[1], 1.2, delta=4 * math.sqrt(cov[1, 1]))  # near the truth, within its SE
        # The covariance is the inverse of the information at the estimate.
        p = 1 / (1 + S.np.exp(-(X @ beta)))
        want = S.np.linalg.inv(X.T @ (X * (p * (1 - p))[:, None]))
        self.assertTrue(S.np.allclose(cov, want, rtol=1e-6), (cov, want))

    def test_firth_stays_finite_under_complete_separation(self):
        # Every run above lr 0.3 has the event, none below: the plain likelihood grows without bound
        # as the slope does; Firth's penalised one has a finite maximum, the same one that a
        # general-purpose optimiser finds on the objective written out here.
        lrs = [0.1, 0.15, 0.2, 0.25, 0.35, 0.5, 0.7, 1.0]
        x = S.np.repeat(S.np.log(lrs), 5)
        y = (x > math.log(0.3)).astype(float)
        X = S.np.column_stack([S.np.ones(len(x)), x])
        beta, cov, penalised = S.firth_logistic(X, y)
        self.assertTrue(S.np.isfinite(beta).all() and S.np.isfinite(cov).all(), (beta, cov))
        self.assertGreater(beta[1], 0)
        self.assertLess(logit_loglik(X, y, 2 * beta), 0.0)
        self.assertGreater(logit_loglik(X, y, 2 * beta), logit_loglik(X, y, beta))  # the plain one still rises
        found = maximise(lambda b: firth_objective(X, y, b), [0.0, 1.0])
        for got, want in zip(beta, found):
            self.assertAlmostEqual(got, want, delta=1e-4)
        self.assertAlmostEqual(penalised, firth_objective(X, y, found), delta=1e-7)
        edge = S.logistic_edge(x, y)
        self.assertTrue(0.25 < edge[0] < 0.35 and edge[1] < edge[0] < edge[2], edge)
        # With one coefficient held (`fixed`), the others maximise the penalised likelihood with it held.
        held = S.firth_logistic(X, y, fixed={1: 2.0})[0]
        self.assertEqual(held[1], 2.0)
        found = maximise(lambda b: firth_objective(X, y, S.np.array([b[0], 2.0])), [0.0])
        self.assertAlmostEqual(held[0], found[0], delta=1e-4)

    def test_logistic_edge_recovers_a_known_fifty_percent_lr(self):
        # α = 4, β = 3: P = 1/2 at ln lr = −4/3, lr = 0.2636; 400 runs at each of 8 lrs.
        rng = S.np.random.default_rng(5)
        lrs = [0.1, 0.13, 0.17, 0.23, 0.31, 0.42, 0.56, 0.75]
        x, y, _ = dose_response(rng, lrs, 400, 4.0, 3.0)
        lr, low, high = S.logistic_edge(x, y)
        want = math.exp(-4 / 3)
        self.assertTrue(low < want < high, (low, want, high))
        self.assertAlmostEqual(lr / want, 1.0, delta=0.05)
        self.assertLess(high / low, 1.2)
        # No dose-response: an event that falls with the lr has no 50% learning rate, nor one that no
        # run has or every run has (its fitted slope is 0 up to rounding).
        self.assertIsNone(S.logistic_edge(x, 1 - y))
        self.assertIsNone(S.logistic_edge(x, [0.0] * len(x)))
        self.assertIsNone(S.logistic_edge(x, [1.0] * len(x)))
        # One learning rate: no curve to fit (the design's columns are collinear, the information singular).
        self.assertIsNone(S.logistic_edge([math.log(0.3)] * 6, [0, 1, 0, 1, 1, 0]))
        self.assertIsNone(S.firth_logistic([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]], [0.0, 1.0, 1.0]))

    def test_logistic_shift_recovers_a_known_shift(self):
        # Two strata (weight decays) with their own intercepts, one slope β = 4; the flagged runs
        # reach 50% at 1.5 times the lr of the others: ratio 1.5, γ = −4·ln 1.5. 200 runs per lr,
        # stratum and group.
        rng = S.np.random.default_rng(7)
        lrs = [0.13, 0.17, 0.23, 0.31, 0.42, 0.56, 0.75, 1.0]
        xs, ys, flags, strata = [], [], [], []
        for stratum, alpha in (("wd0", 5.0), ("wd0.1", 4.0)):
            for flag in (0, 1):
                x, y, f = dose_response(rng, lrs, 200, alpha, 4.0, math.log(1.5), lambda n: [flag] * n)
                xs += list(x)
                ys += list(y)
                flags += list(f)
                strata += [stratum] * len(x)
        found = S.logistic_shift(xs, ys, flags, strata)
        self.assertTrue(found["low"] < 1.5 < found["high"], found)
        self.assertAlmostEqual(found["ratio"], 1.5, delta=0.1)
        self.assertAlmostEqual(found["slope"], 4.0, delta=0.4)
        self.assertAlmostEqual(found["gamma"], -found["slope"] * math.log(found["ratio"]), delta=1e-9)
        self.assertLess(found["p"], 1e-6)
        # Turned the other way (the event falls with the lr), or no run with the event: no
        # dose-response, None.
        self.assertIsNone(S.logistic_shift(xs, [1 - v for v in ys], flags, strata))
        self.assertIsNone(S.logistic_shift(xs, [0.0] * len(xs), flags, strata))
        self.assertIsNone(S.logistic_shift([0.1] * 8, [0, 1] * 4, [0, 0, 1, 1] * 2, ["a"] * 4 + ["b"] * 4))

    def test_logistic_shift_interval_and_p_keep_their_level_at_e3s_size(self):
        # E3's size: 8 lrs × 5 seeds × 2 groups × 2 strata per Δt. Under no shift the test rejects at
        # 5% in about 5% of 150 draws; with a shift of ×1.3 the 95% interval holds the truth in
        # about 95% (binomial bounds at 150 draws: 1–11% and 88–99.5%).
        rng = S.np.random.default_rng(3)
        lrs = [0.13, 0.17, 0.23, 0.31, 0.42, 0.56, 0.75, 1.0]
        rejected, covered, draws = 0, 0, 150
        for _ in range(draws):
            for shift, tally in ((0.0, "null"), (math.log(1.3), "shifted")):
                xs, ys, flags, strata = [], [], [], []
                for stratum, alpha in (("a", 4.5), ("b", 3.5)):
                    for flag in (0, 1):
                        x, y, f = dose_response(rng, lrs, 5, alpha, 4.0, shift, lambda n: [flag] * n)
                        xs += list(x)
                        ys += list(y)
                        flags += list(f)
                        strata += [stratum] * len(x)
                found = S.logistic_shift(xs, ys, flags, strata)
                if tally == "null":
                    rejected += found is not None and found["p"] < 0.05
                else:
                    covered += found is not None and found["low"] < 1.3 < found["high"]
        self.assertTrue(0.01 <= rejected / draws <= 0.11, rejected)
        self.assertTrue(0.88 <= covered / draws <= 0.995, covered)


class WithinCells(unittest.TestCase):
    """The estimates within cells against scipy's t-tests or least squares by hand, on balanced
    data."""

    def setUp(self):
        rng = S.np.random.default_rng(2)
        # Three cells with their own levels (0, 5, −3), two groups of 4 each, group 1 above by 0.7.
        self.cells = [c for c in ("a", "b", "c") for _ in range(8)]
        self.groups = S.np.array([g for _ in range(3) for g in [True] * 4 + [False] * 4])
        level = {"a": 0.0, "b": 5.0, "c": -3.0}
        self.y = S.np.array([level[c] + 0.7 * g for c, g in zip(self.cells, self.groups)]) + rng.normal(size=24)

    def test_mean_test_is_students_one_sample_test(self):
        x = [1.2, 0.4, 2.2, 1.9, 0.8]
        mean, low, high, p = S.mean_test(x, 0.5)
        want = S.stats.ttest_1samp(x, 0.5)
        self.assertAlmostEqual(mean, sum(x) / 5, delta=1e-12)
        self.assertAlmostEqual(p, want.pvalue, delta=1e-12)
        for end in (low, high):
            self.assertAlmostEqual(S.stats.ttest_1samp(x, end).pvalue, 0.05, delta=1e-9)
        self.assertIsNone(S.mean_test([1.0]))
        self.assertEqual(S.mean_test([2.0, 2.0], 1.0)[3], 0.0)  # no spread, away from the value
        self.assertEqual(S.mean_test([2.0, 2.0], 2.0)[3], 1.0)

    def test_cell_contrast_in_one_cell_is_the_pooled_two_sample_t_test(self):
        y, g = self.y[:8], self.groups[:8]
        d, low, high, p, cells = S.cell_contrast(["a"] * 8, y, g)
        want = S.stats.ttest_ind(y[g], y[~g], equal_var=True)
        self.assertAlmostEqual(d, y[g].mean() - y[~g].mean(), delta=1e-12)
        self.assertAlmostEqual(p, want.pvalue, delta=1e-12)
        self.assertEqual(cells, 1)
        for end in (low, high):
            self.assertAlmostEqual(S.stats.ttest_ind(y[g] - end, y[~g], equal_var=True).pvalue, 0.05, delta=1e-9)

    def test_cell_contrast_over_balanced_cells_by_hand(self):
        # Balanced: d = the mean of the within-cell differences; the fitted value of a run is its cell's
        # mean + d·(g − ½); the residual variance on 24 − 3 − 1 df; var(d) = s²·(1/12 + 1/12).
        y, g, cell = self.y, self.groups, S.np.array(self.cells)
        diffs = [y[(cell == c) & g].mean() - y[(cell == c) & ~g].mean() for c in "abc"]
        d_want = sum(diffs) / 3
        fitted = S.np.array([y[cell == c].mean() for c in cell]) + d_want * (g - 0.5)
        s2 = ((y - fitted) ** 2).sum() / 20
        se = math.sqrt(s2 * (1 / 12 + 1 / 12))
        d, low, high, p, cells = S.cell_contrast(self.cells, y, g)
        self.assertAlmostEqual(d, d_want, delta=1e-12)
        self.assertAlmostEqual(p, 2 * S.stats.t.sf(abs(d_want) / se, 20), delta=1e-12)
        self.assertAlmostEqual(high - d, S.stats.t.ppf(0.975, 20) * se, delta=1e-12)
        self.assertEqual(cells, 3)
        # A cell holding one group only says nothing about d: added, it changes nothing.
        more = S.cell_contrast(self.cells + ["d"] * 3, list(y) + [100.0, 90.0, 80.0], list(g) + [True] * 3)
        self.assertAlmostEqual(more[0], d_want, delta=1e-12)
        self.assertAlmostEqual(more[3], p, delta=1e-12)
        self.assertEqual(more[4], 3)
        self.assertIsNone(S.cell_contrast(["a", "a", "b"], [1.0, 2.0, 3.0], [True, True, False]))  # no cell with both
        self.assertIsNone(S.cell_contrast(["a", "a", "a"], [1.0, 2.0, 4.0], [True, False, False]))  # 1 df left

    def test_cells_mean_by_hand(self):
        # One cell: Student's one-sample test.
        x = list(self.y[:8])
        mean, low, high, p, cells = S.cells_mean(["a"] * 8, x, 1.0)
        self.assertAlmostEqual(p, S.stats.ttest_1samp(x, 1.0).pvalue, delta=1e-12)
        self.assertAlmostEqual(mean, sum(x) / 8, delta=1e-12)
        # Three cells of 8: the mean of the cell means, the within-cell variance pooled on 24 − 3 df,
        # var = s²·Σ(1/8)/3² = s²/24; the levels of the cells do not enter the variance.
        y, cell = self.y, S.np.array(self.cells)
        means = [y[cell == c].mean() for c in "abc"]
        s2 = sum(((y[cell == c] - m) ** 2).sum() for c, m in zip("abc", means)) / 21
        mean, low, high, p, cells = S.cells_mean(self.cells, y, 0.5)
        self.assertAlmostEqual(mean, sum(means) / 3, delta=1e-12)
        self.assertAlmostEqual(p, 2 * S.stats.t.sf(abs(mean - 0.5) / math.sqrt(s2 / 24), 21), delta=1e-12)
        self.assertAlmostEqual(high - mean, S.stats.t.ppf(0.975, 21) * math.sqrt(s2 / 24), delta=1e-12)
        self.assertEqual(cells, 3)
        self.assertIsNone(S.cells_mean(["a", "b", "c"], [1.0, 2.0, 3.0]))  # no df within a cell
        self.assertIsNone(S.cells_mean(["a", "a"], [1.0, float("nan")]))

    def test_cell_slopes_by_hand(self):
        # Each cell holds one group (as a cell per placement, Δt, lr does): each group's slope is its
        # pooled within-cell slope, Σ(x − x̄_c)(y − ȳ_c)/Σ(x − x̄_c)², with one residual variance on
        # N − cells − 2 df, and the two slopes independent.
        rng = S.np.random.default_rng(4)
        cells = [c for c in ("p1", "p2", "q1", "q2") for _ in range(6)]
        g = S.np.array([c.startswith("p") for c in cells])
        x = rng.normal(size=24)
        level = {"p1": 1.0, "p2": 3.0, "q1": -1.0, "q2": 0.0}
        y = S.np.array([level[c] for c in cells]) + S.np.where(g, 0.9, 0.2) * x + 0.3 * rng.normal(size=24)
        cell = S.np.array(cells)
        dx = x - S.np.array([x[cell == c].mean() for c in cell])
        dy = y - S.np.array([y[cell == c].mean() for c in cell])
        b_p = (dx[g] * dy[g]).sum() / (dx[g] ** 2).sum()
        b_q = (dx[~g] * dy[~g]).sum() / (dx[~g] ** 2).sum()
        rss = ((dy - S.np.where(g, b_p, b_q) * dx) ** 2).sum()
        s2 = rss / (24 - 4 - 2)
        se = math.sqrt(s2 / (dx[g] ** 2).sum() + s2 / (dx[~g] ** 2).sum())
        d, low, high, p, first, second = S.cell_slopes(cells, x, y, g)
        self.assertAlmostEqual(first, b_p, delta=1e-12)
        self.assertAlmostEqual(second, b_q, delta=1e-12)
        self.assertAlmostEqual(d, b_p - b_q, delta=1e-12)
        self.assertAlmostEqual(p, 2 * S.stats.t.sf(abs(b_p - b_q) / se, 18), delta=1e-12)
        self.assertAlmostEqual(high - d, S.stats.t.ppf(0.975, 18) * se, delta=1e-12)
        # One cell per group: the slopes are the two least-squares lines' (scipy's linregress).
        one = ["p"] * 6 + ["q"] * 6
        d, low, high, p, first, second = S.cell_slopes(one, x[:12], y[:12], [True] * 6 + [False] * 6)
        self.assertAlmostEqual(first, S.stats.linregress(x[:6], y[:6]).slope, delta=1e-12)
        self.assertAlmostEqual(second, S.stats.linregress(x[6:12], y[6:12]).slope, delta=1e-12)
        # x constant inside every cell: no within-cell variation, singular.
        self.assertIsNone(S.cell_slopes(cells, [level[c] for c in cells], y, g))
        self.assertIsNone(S.cell_slopes(["p", "p", "q", "q"], [1.0, 2.0, 1.0, 2.0], [1.0, 2.0, 3.0, 5.0],
                                        [True, True, False, False]))  # no df left

    def test_combined_means_against_welch(self):
        # Weights 1 and −1: Welch's test of the difference of two means.
        x, y = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 4.0, 6.0, 8.0, 10.0, 11.0]
        est, low, high, p = S.combined_means([(1.0, x), (-1.0, y)])
        self.assertAlmostEqual(p, S.stats.ttest_ind(x, y, equal_var=False).pvalue, delta=1e-12)
        for got, want in zip((est, low, high), S.welch_ci(x, y)):
            self.assertAlmostEqual(got, want, delta=1e-12)
        # Weights 1 and −¾ (claim 1's rate at 2L against ¾ of the rate at L), by hand: variance
        # 1·v_x/5 + (9/16)·v_y/6, Welch–Satterthwaite df = V²/Σ(part²/(n − 1)).
        vx, vy = S.np.var(x, ddof=1) / 5, 0.5625 * S.np.var(y, ddof=1) / 6
        df = (vx + vy) ** 2 / (vx ** 2 / 4 + vy ** 2 / 5)
        want = 3.0 - 0.75 * S.np.mean(y)
        est, low, high, p = S.combined_means([(1.0, x), (-0.75, y)])
        self.assertAlmostEqual(est, want, delta=1e-12)
        self.assertAlmostEqual(p, 2 * S.stats.t.sf(abs(want) / math.sqrt(vx + vy), df), delta=1e-12)
        self.assertAlmostEqual(high - est, S.stats.t.ppf(0.975, df) * math.sqrt(vx + vy), delta=1e-12)
        self.assertIsNone(S.combined_means([(1.0, x), (-1.0, [3.0])]))  # one value: no variance
        self.assertIsNone(S.combined_means([(1.0, [2.0, 2.0]), (-1.0, [1.0, 1.0])]))  # no spread at all


if __name__ == "__main__":
    unittest.main()

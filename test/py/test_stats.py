"""experiments/stats.py against values worked out independently of it: R's fisher.test and
binom.test, hand counts of permutations and of hypergeometric tables, Welch's t by hand, least
squares by hand, and synthetic data from known laws. Run by build/test_experiments (make test)."""
import math
import os
import random
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

    def test_depth_law_tells_an_exponential_from_a_power_of_depth(self):
        depths = [4, 8, 16, 32, 64] * 2
        fit = S.depth_law(depths, [2 * math.exp(0.05 * L) for L in depths])
        self.assertAlmostEqual(fit["both"][0][1], 0.05, delta=1e-9)   # r
        self.assertAlmostEqual(fit["both"][0][2], 0.0, delta=1e-9)    # p
        self.assertLess(fit["aicc"]["exponential"], fit["aicc"]["power"])
        fit = S.depth_law(depths, [3 * L ** 0.7 for L in depths])
        self.assertAlmostEqual(fit["both"][0][1], 0.0, delta=1e-9)
        self.assertAlmostEqual(fit["both"][0][2], 0.7, delta=1e-9)
        self.assertAlmostEqual(fit["power"][0][1], 0.7, delta=1e-9)
        self.assertIsNone(S.depth_law([4, 8, 4, 8], [1, 2, 1, 2]))  # two depths: nothing to tell apart

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
        t = (2.2 - 2) / math.sqrt(0.9 / 5)
        self.assertAlmostEqual(S.coefficient_test(fit, 1, 2.0), 1 - t / math.sqrt(t * t + 2), delta=1e-12)
        # The 95% interval's ends are where the test against them gives p = 0.05.
        est, low, high = S.coefficient_ci(fit, 1)
        self.assertAlmostEqual(S.coefficient_test(fit, 1, low), 0.05, delta=1e-9)
        self.assertAlmostEqual(S.coefficient_test(fit, 1, high), 0.05, delta=1e-9)
        self.assertIsNone(S.ols([[1, 1], [0, 1]], [1, 2]))  # no degree of freedom left

    def test_mann_whitney_by_counting(self):
        # x all below y: U = 0, and 2 of the C(6, 3) = 20 splits are as extreme: p = 0.1.
        share, p = S.mann_whitney([1, 2, 3], [4, 5, 6])
        self.assertEqual(share, 0.0)
        self.assertAlmostEqual(p, 0.1, delta=1e-12)
        # One swap (3 > 3.5 no; 4 > 3.5): U = 1 of 9; splits with U ≤ 1 or ≥ 8: 4 of 20.
        share, p = S.mann_whitney([1, 2, 4], [3.5, 5, 6])
        self.assertAlmostEqual(share, 1 / 9, delta=1e-12)
        self.assertAlmostEqual(p, 0.2, delta=1e-12)
        # A stopped run (inf) ranks above every finished one; None is dropped.
        share, _ = S.mann_whitney([float("inf"), 1.0, None], [2.0, 3.0])
        self.assertAlmostEqual(share, 0.5, delta=1e-12)
        self.assertEqual(S.mann_whitney([1.0, 1.0], [1.0]), (0.5, 1.0))
        self.assertIsNone(S.mann_whitney([], [1.0]))

    def test_intervals(self):
        # Wilson's interval of 0/10: (0, z²/(n + z²)); Newcombe's (1998) worked example of his
        # method 10: 56/70 − 48/80 = 0.2, interval 0.0524 to 0.3339.
        z2 = 1.959963984540054 ** 2
        low, high = S.wilson_interval(0, 10)
        self.assertAlmostEqual(low, 0.0, delta=1e-12)
        self.assertAlmostEqual(high, z2 / (10 + z2), delta=1e-12)
        d, low, high = S.rate_difference(56, 70, 48, 80)
        self.assertAlmostEqual(d, 0.2, delta=1e-12)
        self.assertAlmostEqual(low, 0.0524, delta=5e-5)
        self.assertAlmostEqual(high, 0.3339, delta=5e-5)
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


if __name__ == "__main__":
    unittest.main()

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

    def test_aicc_prefers_the_true_law_on_few_points(self):
        # 1 + 0.5·x plus noise at x = 1..6. By hand: x̄ = 3.5, ȳ = 2.55, Sxx = 17.5, Sxy = 9.15,
        # Syy = 4.975, so the line's RSS = 4.975 − 9.15²/17.5 = 0.190857 and its AICc =
        # 6·ln(0.190857/6) + 6 + 12 = −2.688. The quadratic's smaller RSS does not pay for its
        # correction term 40 (AIC without the correction would pick it).
        fits, winner = S.fit_laws(range(1, 7), [1.0, 1.9, 2.4, 2.9, 3.5, 3.6])
        self.assertAlmostEqual(fits["linear"]["rss"], 4.975 - 9.15 ** 2 / 17.5, delta=1e-9)
        self.assertAlmostEqual(fits["linear"]["aicc"], -2.688, delta=1e-3)
        self.assertAlmostEqual(fits["linear"]["params"]["b"], 9.15 / 17.5, delta=1e-12)
        self.assertEqual(winner, "linear")

    def test_fit_laws_recover_synthetic_laws(self):
        rng = random.Random(7)
        xs = list(range(1, 25))
        for law, f, rate in (("exponential", lambda x: 0.2 * math.exp(0.15 * x), math.exp(0.15)),
                             ("quadratic", lambda x: 1 + 0.3 * x + 0.05 * x * x, 0.05),
                             ("linear", lambda x: 2 + 0.7 * x, 0.7)):
            ys = [f(x) * (1 + 0.01 * rng.gauss(0, 1)) for x in xs]
            fits, winner = S.fit_laws(xs, ys)
            self.assertEqual(winner, law, {k: v["aicc"] for k, v in fits.items()})
            self.assertAlmostEqual(S.law_rate(winner, fits[winner]["params"])[1], rate, delta=0.05 * rate)
        # An exact exponential: a and r recovered.
        fits, _ = S.fit_laws(xs, [3 * math.exp(-0.2 * x) for x in xs])
        self.assertAlmostEqual(fits["exponential"]["params"]["a"], 3, delta=1e-6)
        self.assertAlmostEqual(fits["exponential"]["params"]["r"], -0.2, delta=1e-8)
        fits, winner = S.fit_laws([1, 2, 3], [1.0, 2.0, 3.5])
        self.assertIsNone(winner)  # too few points to compare
        self.assertIsNone(fits["quadratic"]["aicc"])

    def test_lr_sensitivity_by_hand(self):
        # L(1e-3) = 5, L(1e-2) = 4, 1e-1 stopped (counts as L_init = 8): L* = 4, mean(1, 0, 4) = 5/3.
        best, lr, sens = S.lr_sensitivity({1e-3: 5.0, 1e-2: 4.0, 1e-1: None}, 8.0)
        self.assertEqual((best, lr), (4.0, 1e-2))
        self.assertAlmostEqual(sens, 5 / 3, delta=1e-12)
        self.assertAlmostEqual(S.lr_sensitivity({1e-3: 9.0, 1e-2: 4.0}, 8.0)[2], 2.0, delta=1e-12)  # capped at L_init
        self.assertEqual(S.lr_sensitivity({1e-3: None}, 8.0), (None, None, None))

    def test_edge_of_stability(self):
        e1 = {("pre", 1e-3): [("ok", 5.2)], ("pre", 1e-2): [("ok", 4.8)], ("pre", 3e-2): [("diverged", None)],
              ("peri", 1e-3): [("collapsed", 6.0)], ("peri", 1e-2): [("ok", 4.9)], ("peri", 3e-2): [("ok", 5.0)],
              ("post", 1e-2): [("diverged", None)]}
        self.assertEqual(S.edge_of_stability(e1, ("pre", "peri"))[0], 3e-2)  # the collapse below the best lr does not count
        self.assertEqual(S.edge_of_stability({("pre", 1e-3): [("ok", 5.0)]}, ("pre", "peri"))[0], 1e-3)
        self.assertIsNone(S.edge_of_stability({("pre", 1e-3): [("diverged", None)]}, ("pre",))[0])

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

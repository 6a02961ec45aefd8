"""The claims table: README.md's table and docs/claims.md are what `sweep.py --claims` writes from
the published tables under docs/; the number formats of its prose; the primary tests and the
verdict rule on synthetic published experiments whose verdicts are known by construction (an
exponential growth, a power law, Δt shrinking everything, a placement that diverges often, a
metric that contradicts "best on every metric"); and every primary test on simulated experiments
(power.py) where the placements do not differ (never supported in more than 5% of the draws) and
where the claim holds at the powered effect (supported about as often as docs/power.csv says).
Run by build/test_experiments."""
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from experiments.python import require  # noqa: E402

require(("numpy", "scipy", "pandas"), "test_claims.py")

import pandas as pd  # noqa: E402

from experiments import claim_rows, claims, findings, power, primary, stats, tables  # noqa: E402
from experiments.collect import RESULT_COLUMNS  # noqa: E402
from experiments.grid import Run  # noqa: E402


class Published(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.x = claims.load_experiments(os.path.join(REPO, "docs"))
        cls.lines = claims.claims_table(os.path.join(REPO, "docs"), cls.x)

    def test_readme_table_is_the_generated_one(self):
        with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        self.assertEqual(readme, claims.readme_with_table(readme, self.lines),
                         "README.md's claims table differs from what `python3 sweep.py --claims` writes: run it")

    def test_readme_findings_are_the_generated_ones(self):
        with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        self.assertEqual(readme, claims.readme_with_table(readme, findings.findings(self.x), findings.BEGIN,
                                                          findings.END),
                         "README.md's *What the runs found* differs from what `python3 sweep.py --claims` writes: run it")

    def test_docs_claims_is_the_generated_one(self):
        with open(os.path.join(REPO, "docs", "claims.md"), encoding="utf-8") as f:
            self.assertEqual(f.read(), claims.claims_markdown(self.lines),
                             "docs/claims.md differs from what `python3 sweep.py --claims` writes: run it")

    def test_one_row_per_claim(self):
        self.assertEqual(len(self.lines), 2 + len(claim_rows.CLAIMS))
        for i, line in enumerate(self.lines[2:], 1):
            self.assertTrue(line.startswith(f"| {i}. "), line)
            self.assertEqual(line.count(" | "), 5, line)  # six cells: no stray | in the prose

    def test_markers(self):
        self.assertEqual(claims.readme_with_table("a\n<!-- claims:begin -->\nold\n<!-- claims:end -->\nb", ["x"]),
                         "a\n<!-- claims:begin -->\nx\n<!-- claims:end -->\nb")
        for broken in ("no markers", "<!-- claims:end --> <!-- claims:begin -->"):
            with self.assertRaises(ValueError):
                claims.readme_with_table(broken, ["x"])

    def test_number_formats(self):
        self.assertEqual([tables.two_digits(x) for x in (4.55731, 16.14972, 178.29, 0.022629, 11.7)],
                         ["4.6", "16", "178", "0.023", "12"])
        self.assertEqual(tables.two_digits(1.9629, like=4.557), "2.0")
        self.assertEqual(tables.two_digits(5.92, like=16.1), "6")
        self.assertEqual([tables.p_value(p) for p in (0.0479, 0.12, 0.0047, 0.00053, 3.1e-11)],
                         ["0.048", "0.12", "0.005", "5e-4", "3e-11"])
        self.assertEqual([tables.decimals2(x) for x in (0.6727, 1.70397, 1.118)], ["0.67", "1.7", "1.12"])
        self.assertEqual(tables.minus(-0.38), "−0.38")


class Rule(unittest.TestCase):
    P = primary.Primary

    def test_verdict_rule(self):
        v = claim_rows.verdict
        self.assertEqual(v(self.P(0.001, "claimed", ""), 0.049), "**supported**")
        self.assertEqual(v(self.P(0.001, "claimed", ""), 0.05), "**inconclusive** at this scale")  # not below
        self.assertEqual(v(self.P(0.001, "opposite", ""), 0.01), "**not supported**")
        self.assertEqual(v(self.P(0.3, "opposite", ""), 0.6), "**inconclusive** at this scale")
        self.assertEqual(v(self.P(0.001, "mixed", ""), 0.01),
                         "**inconclusive** at this scale (the matched learning rates disagree)")
        self.assertEqual(v(primary.not_tested("no runs"), 1.0), "**inconclusive** at this scale (not tested: no runs)")

    def test_intersection(self):
        both = primary.both
        got = both([self.P(0.01, "claimed", "a"), self.P(0.2, "claimed", "b")])
        self.assertEqual((got.p, got.direction), (0.2, "claimed"))  # the largest p
        got = both([self.P(0.001, "claimed", "a"), self.P(0.3, "opposite", "b"), self.P(0.04, "opposite", "c")])
        self.assertEqual((got.p, got.direction), (0.04, "opposite"))  # the strongest evidence against
        self.assertIsNone(both([self.P(0.01, "claimed", "a"), primary.not_tested("x")]).p)

    def test_directions_must_agree_at_the_matched_learning_rates(self):
        agreeing = primary.agreeing
        got = agreeing({1e-3: self.P(0.01, "claimed", "a"), 1e-2: self.P(0.002, "claimed", "b")})
        self.assertEqual((got.p, got.direction), (0.01, "claimed"))  # the larger p
        got = agreeing({1e-3: self.P(0.03, "opposite", "a"), 1e-2: self.P(0.001, "opposite", "b")})
        self.assertEqual((got.p, got.direction), (0.03, "opposite"))
        got = agreeing({1e-3: self.P(1e-6, "claimed", "a"), 1e-2: self.P(1e-5, "opposite", "b")})
        self.assertEqual((got.p, got.direction), (1e-5, "mixed"))
        self.assertEqual(agreeing({1e-3: self.P(0.01, "claimed", "a")}).why, "fewer than two matched learning rates")
        self.assertIn("at lr 0.01: x", agreeing({1e-3: self.P(0.01, "claimed", "a"), 1e-2: primary.not_tested("x")}).why)


    def test_claim_3_needs_both_placements(self):
        # Pre-LN tighter at Δt = 0.1 in 12 of 12 pairs, Peri-LN looser in 12 of 12: against (either
        # placement looser decides); both tighter: claimed, with the larger p.
        def pairs(ln, factor):
            return pd.DataFrame(dict(ln=[ln] * 12, mean_abs_large=1.0, entry_var_large=1.0,
                                     mean_abs_small=factor, entry_var_small=factor ** 2))
        mixed = primary.dt_tightens(pd.concat([pairs("pre", 0.2), pairs("peri", 2.0)]))
        self.assertEqual((mixed.direction, mixed.p), ("opposite", stats.sign_test(0, 12)))
        both_ways = primary.dt_tightens(pd.concat([pairs("pre", 0.2), pairs("peri", 0.5)]))
        self.assertEqual(both_ways.direction, "claimed")
        self.assertIn("no Peri-LN depth", primary.dt_tightens(pairs("pre", 0.2)).why)


def noisy(rng, x, level=0.02):
    return x * (1 + level * rng.gauss(0, 1))


def write(folder, name, rows, columns=None):
    pd.DataFrame(rows, columns=columns).to_csv(os.path.join(folder, name), index=False)


def result(run, **values):
    row = dict(run=run.name, ln=run.ln, dt=run.dt, wd=run.wd, lr=run.lr, depth=run.depth, precision=None, seed=run.seed,
               outcome="ok", unigram_ce=5.8, bigram_ce=4.6, first_train_loss=8.3, final_train_loss=4.7)
    row.update(values)
    return row


MATCHED = (1e-3, 1e-2)


def synthetic_e1(folder, rng):
    """Every Pre- and Peri-LN configuration learns at 1e-3 and 1e-2 (the matched lrs); at 0.1 Pre-LN
    fails. Peri-LN Δt = 0.1 has the lowest loss, ppl_seq and the highest ROUGE-1, but a much lower
    accuracy than Pre-LN Δt = 1 at every lr: "best on every metric" is contradicted at both.
    mean|X_L| grows as √lr; Pre-LN's largest block sensitivity as mean|X_L|^0.8, Peri-LN's stays at 2
    (10% noise on each): claim 4's slopes 0.8 against 0."""
    losses = {("peri", 0.1): (4.9, 4.5, 4.7), ("pre", 1.0): (4.95, 5.0, 5.7), ("pre", 0.1): (5.0, 4.95, 5.7),
              ("peri", 1.0): (5.0, 4.75, 5.2)}
    rows = []
    for (ln, dt), per_lr in losses.items():
        for lr, loss in zip(MATCHED + (0.1,), per_lr):
            for seed in (1, 2, 3):
                run = Run(ln, dt, 0.1, lr, None, None, seed, "/nowhere")
                val = loss + 0.005 * rng.gauss(0, 1)
                mean_abs = noisy(rng, (3.0 if ln == "pre" else 1.5) * (lr / 1e-3) ** 0.5, 0.1)
                sensitivity = noisy(rng, 0.5 * mean_abs ** 0.8 if ln == "pre" else 2.0, 0.1)
                rows.append(result(run, val_loss=val, ppl_seq=1.1 * math.exp(val), mean_abs_L=mean_abs,
                                   sens_mean_max=sensitivity,
                                   accuracy=noisy(rng, 0.20 if (ln, dt) == ("peri", 0.1) else
                                                  0.25 if (ln, dt) == ("pre", 1.0) else 0.18, 0.005),
                                   rouge1_stem=noisy(rng, 0.25 if (ln, dt) == ("peri", 0.1) else 0.2, 0.005)))
    write(folder, "e1_results.csv", rows, RESULT_COLUMNS)
    write(folder, "e1_layers.csv", [], ["run", "layer"])


def profile(run, depth, mean_abs, entry_var, w2, sens, rng):
    rows = []
    for i in range(depth + 1):
        rows.append(dict(run=run.name, ln=run.ln, dt=run.dt, wd=run.wd, lr=run.lr, depth=depth, seed=run.seed, layer=i,
                         mean_abs=noisy(rng, mean_abs(i)), entry_var=noisy(rng, entry_var(i)), rms=mean_abs(i),
                         grad_norm_scaled=1.0, w2_bound=w2(i), relative_amplification=1.0,
                         fcproj_grad_norm=None if i == 0 else noisy(rng, 1.0),
                         mlp_hidden_rms=None if i == 0 else noisy(rng, 1.0), sens_mean=None if i == 0 else sens(i),
                         sens_max=None if i == 0 else sens(i)))
    return rows


def synthetic_e2(folder, rng, pre_law):
    """At both matched lrs: Pre-LN Δt = 1's X_i follows `pre_law`; Peri-LN's mean |X_i| grows as
    √i and its variance as i; Δt = 0.1 shrinks everything (×0.2, ×0.04); the noise on X_0 grows
    through Pre-LN as e^{0.1·i} and hardly through Peri-LN; under the intervention Pre-LN's block 1
    sensitivity is ∝ k, its blocks 2..L ∝ k^0.3, and Peri-LN's do not move."""
    results, layers, init, intervention = [], [], [], []
    for ln in ("pre", "peri"):
        for dt in (1.0, 0.1):
            scale = 1.0 if dt == 1.0 else 0.2
            for lr in MATCHED:
                for depth in (4, 8, 16, 32):
                    for seed in (1, 2, 3):
                        run = Run(ln, dt, 0.1, lr, depth, None, seed, "/nowhere")
                        results.append(result(run, val_loss=4.5))
                        if ln == "pre":
                            mean_abs = lambda i, s=scale: s * pre_law(i)
                            w2 = lambda i: 0.01 * math.exp(0.1 * i)
                        else:
                            mean_abs = lambda i, s=scale: s * 0.5 * math.sqrt(i + 1)
                            w2 = lambda i: 0.01 * (1 + 0.01 * i)
                        entry = ((lambda i, m=mean_abs: m(i) ** 2) if ln == "pre" else
                                 (lambda i, s=scale: s * s * 0.3 * (i + 1)))
                        layers += profile(run, depth, mean_abs, entry, w2, lambda i: 1.5, rng)
                        init += profile(run, depth, lambda i: 0.02, lambda i: 0.0004, w2, lambda i: 1.0, rng)
                        for k in (0.5, 1.0, 2.0, 4.0):
                            for block in range(1, depth + 1):
                                sens = (2 * k if block == 1 else 1.5 * k ** 0.3) if ln == "pre" else 1.2
                                intervention.append(dict(run=run.name, ln=ln, dt=dt, wd=0.1, lr=lr, depth=depth,
                                                         seed=seed, k=k, layer=block, sens_mean=noisy(rng, sens, 0.01)))
    write(folder, "e2_results.csv", results, RESULT_COLUMNS)
    write(folder, "e2_layers.csv", layers)
    write(folder, "e2_init_layers.csv", init)
    write(folder, "e2_intervention.csv", intervention)


def synthetic_e3(folder):
    """At two learning rates: Pre-LN diverges (collapses after a blow-up to 10.5, 2.2 nats above its
    first loss) in 3 of 10 runs per Δt without weight decay and 2 of 10 with it; a Pre-LN run that
    ends ok but whose last training loss stayed above its first counts as diverged too (seed 10,
    Δt = 1, wd 0.1): 6a per Δt 12 of 40 (Δt = 1) and 10 of 40 against 0 of 40, 6b 12 of 40 against
    10 of 40, Fisher's p far from small. Peri-LN never diverges; one Peri-LN run (seed 10, Δt = 0.1,
    wd 0, each lr) collapses without a blow-up, under-learning: the broad event only."""
    rows = []
    for ln in ("pre", "peri"):
        for dt in (1.0, 0.1):
            for wd in (0.0, 0.1):
                for lr in (0.2, 0.3):
                    for seed in range(1, 11):
                        fails = ln == "pre" and seed <= (3 if wd == 0 else 2)
                        unrecovered = ln == "pre" and (dt, wd, seed) == (1.0, 0.1, 10)
                        slow = ln == "peri" and (dt, wd, seed) == (0.1, 0.0, 10)
                        run = Run(ln, dt, wd, lr, None, None, seed, "/nowhere")
                        rows.append(result(run, outcome="collapsed" if fails or slow else "ok",
                                           val_loss=5.85 if fails or slow else 4.8,
                                           final_train_loss=9.0 if unrecovered else 5.9 if fails or slow else 4.8,
                                           max_loss=10.5 if fails or unrecovered else 8.3,
                                           train_max_attn_logit=80.0 if ln == "pre" else 6.0))
    write(folder, "e3_results.csv", rows, RESULT_COLUMNS)
    write(folder, "e3_layers.csv", [], ["run", "layer"])


class Synthetic(unittest.TestCase):
    """The primary tests and verdicts on published experiments made here."""

    def table(self, pre_law):
        folder = tempfile.mkdtemp()
        try:
            rng = random.Random(5)
            synthetic_e1(folder, rng)
            synthetic_e2(folder, rng, pre_law)
            synthetic_e3(folder)
            for name in ("e1", "e2", "e3"):
                with open(os.path.join(folder, f"{name}_sweep.json"), "w") as f:
                    json.dump(dict(steps=100), f)
            lines = claims.claims_table(folder)
        finally:
            shutil.rmtree(folder)
        return {int(line[2]): line.split(" | ") for line in lines[2:]}

    def test_verdicts_follow_the_constructed_effects(self):
        rows = self.table(lambda i: 0.05 * max(i, 1) ** 1.6 * math.exp(0.08 * i))
        verdict = {claim: cells[5] for claim, cells in rows.items()}
        for claim in (1, 2, 3, 4, 5):
            self.assertEqual(verdict[claim], "**supported** |", rows[claim])
        self.assertEqual(verdict[6], "6a: **supported**; 6b: **inconclusive** at this scale |", rows[6])
        self.assertEqual(verdict[7], "**not supported** |", rows[7])
        self.assertEqual(rows[1][4], "—")  # no power.csv beside these tables
        # Claim 1: Pre-LN's X_L grows as L^1.6·e^{0.08·L}, Peri-LN's as a power: r_pre − r_peri near
        # 0.08 at both matched lrs (Peri-LN's √(L+1) with the noise leaves it a few thousandths off) (claim 2: Pre-LN's powers of L alone are far above 1 and 2). Claim 3: 24 of 24 pairs at each lr, ×5 in mean |x| and ×25 in variance.
        for found in re.findall(r"r_pre − r_peri = ([-\d.]+) \(95% CI ([-\d.]+) to ([-\d.]+)\)", rows[1][2]):
            r, low, high = map(float, found)
            self.assertTrue(0.06 <= low < r < high <= 0.1, rows[1][2])
        self.assertEqual(rows[1][2].count("r_pre − r_peri"), 2, rows[1][2])
        self.assertIn("lr 0.01: Pre-LN mean_abs: smaller in 12 of 12 pairs, ×5", rows[3][2])
        self.assertIn("Peri-LN entry_var: smaller in 12 of 12 pairs, ×25", rows[3][2])
        self.assertIn("Peri-LN within its bounds", rows[2][2])
        self.assertIn("Pre-LN outside them", rows[2][2])
        # Claim 4: Pre-LN's sensitivity grows as mean|X_L|^0.8, Peri-LN's not at all.
        d, low, high = map(float, re.search(r"b_pre − b_peri = ([-\d.]+) \(95% CI ([-\d.]+) to ([-\d.]+)\)",
                                            rows[4][2]).groups())
        self.assertTrue(0.6 < low < d < high < 1.0, rows[4][2])
        self.assertIn("worse on accuracy against Pre-LN Δt = 1", rows[7][2])
        self.assertIn("Δt = 1: 12/40 against 0/40", rows[6][2])  # 10 collapsed after a blow-up + 2 unrecovered
        self.assertIn("Δt = 0.1: 10/40 against 0/40", rows[6][2])
        self.assertIn("any collapse or stop (broad) Pre-LN 22/80, Peri-LN 2/80", rows[6][2])
        # The p column: raw → Holm, 8 primary tests (claim 6 has two). 6b's Fisher p (12 of 40
        # against 10 of 40, both lrs) is the largest of the eight, so Holm multiplies it by 1.
        self.assertTrue(rows[6][3].startswith("6a: "), rows[6][3])
        self.assertIn("12/40 against 10/40", rows[6][2])
        p = stats.fisher_exact(12, 28, 10, 30)
        self.assertIn(f"6b: {tables.p_value(p)} → {tables.p_value(p)}", rows[6][3])

    def test_a_power_law_is_not_read_as_exponential(self):
        # X_L ∝ L^0.7 with 2% noise: Pre-LN's r is near Peri-LN's, so claim 1 is not supported.
        rows = self.table(lambda i: 0.3 * (i + 1) ** 0.7)
        self.assertNotIn("**supported**", rows[1][5], rows[1])


class Power(unittest.TestCase):
    """Every primary test on simulated experiments (power.py, the functions the claims table calls)."""
    DRAWS = 100

    def test_no_test_is_supported_when_the_placements_do_not_differ(self):
        for name, experiment, simulate, _ in power.WORLDS:
            share = power.share_supported(simulate, power.SEEDS[experiment], True, power.ALPHA, self.DRAWS, seed=7)
            self.assertLessEqual(share, 0.05, f"claim {name}: supported in {share:.0%} of the draws with no difference")

    def test_each_test_is_supported_about_as_often_as_its_stated_power(self):
        stated = power.read_powers(os.path.join(REPO, "docs", power.POWER_FILE))
        self.assertEqual(set(stated), {name for name, *_ in power.WORLDS})
        for name, experiment, simulate, _ in power.WORLDS:
            share = power.share_supported(simulate, power.SEEDS[experiment], False, power.POWER_ALPHA, self.DRAWS,
                                          seed=7)
            spread = 3 * math.sqrt(max(stated[name] * (1 - stated[name]), 0.01) / self.DRAWS)
            self.assertLessEqual(abs(share - stated[name]), spread,
                                 f"claim {name}: supported in {share:.0%} of {self.DRAWS} draws, docs/power.csv says "
                                 f"{stated[name]:.0%}")


if __name__ == "__main__":
    unittest.main()

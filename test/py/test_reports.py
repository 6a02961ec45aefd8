"""The reports of E1, E2 and E3 and the per-configuration table on hand-made runs, every number
worked out by hand. Run by build/test_experiments (make test)."""
import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from experiments.python import require  # noqa: E402

require(("numpy", "scipy", "pandas"), "test_reports.py")

import pandas as pd  # noqa: E402

from experiments import cli, e1, e2, e3, summary  # noqa: E402
from experiments.reports import EXPERIMENTS as REPORTS  # noqa: E402
from experiments.collect import RESULT_COLUMNS  # noqa: E402
from experiments.grid import Run  # noqa: E402
from experiments.results import Sweep  # noqa: E402
from experiments.settings import DEFAULTS  # noqa: E402
from experiments.tables import on_grid  # noqa: E402


def hand_made(runs):
    """(grid, results) of hand-made runs: (ln, dt, wd, lr, seed, outcome, val_loss, first loss, extra)."""
    grid, rows = [], []
    for ln, dt, wd, lr, seed, outcome, loss, first, extra in runs:
        run = Run(ln, dt, wd, lr, None, None, seed, "/nowhere")
        grid.append(run)
        if outcome:
            rows.append(dict(run=run.name, ln=ln, dt=dt, wd=wd, lr=lr, seed=seed, outcome=outcome, val_loss=loss,
                             unigram_ce=5.8 if loss is not None else None, first_train_loss=first, spikes=0, **extra))
    return grid, pd.DataFrame(rows, columns=RESULT_COLUMNS)


class E1(unittest.TestCase):
    def setUp(self):
        # Pre-LN: seed 1 finishes at both lrs; seed 2 collapses at 1e-3 and diverges at 1e-2. Its
        # four runs start at 8.0, 8.2, 8.4 and 8.6: L_init = their mean, 8.3. Peri-LN starts at 8.0.
        self.grid, self.results = hand_made([
            ("pre", 1.0, 0.1, 1e-3, 1, "ok", 5.0, 8.0, dict(accuracy=0.20)),
            ("pre", 1.0, 0.1, 1e-2, 1, "ok", 4.0, 8.2, dict(accuracy=0.25)),
            ("pre", 1.0, 0.1, 1e-3, 2, "collapsed", 6.0, 8.4, dict(accuracy=0.10)),
            ("pre", 1.0, 0.1, 1e-2, 2, "diverged", None, 8.6, {}),
            ("peri", 0.1, 0.1, 1e-3, 1, "ok", 4.5, 8.0, dict(accuracy=0.30)),
            ("peri", 0.1, 0.1, 1e-2, 1, "ok", 4.4, 8.0, dict(accuracy=0.32)),
            ("peri", 0.1, 0.1, 1e-3, 2, "ok", 4.7, 8.0, dict(accuracy=0.28)),
            ("peri", 0.1, 0.1, 1e-2, 2, "ok", 4.5, 8.0, dict(accuracy=0.34))])
        self.lines, self.tables = e1.report(None, on_grid(self.grid, self.results))

    def test_cells_best_loss_and_sensitivity(self):
        # Pre-LN: L* 4.0 (seed 1) and 6.0 (seed 2: its only finished run); sensitivity (1 + 0)/2 =
        # 0.5 and (0 + (8.3 − 6))/2 = 1.15 (the stopped run counts as L_init = 8.3): 0.825 ± 0.460.
        # Peri-LN: L* 4.4, 4.5; sensitivity 0.05 and 0.1.
        for want in ["| Pre-LN Δt=1 | 5.500 ± 0.707 (2) [1 c] | 4.000 (1) [1 stopped] | 5.000 ± 1.414 (2) (0.001, 0.01) "
                     "| 0.825 ± 0.460 (2) |",
                     "| Peri-LN Δt=0.1 | 4.600 ± 0.141 (2) | 4.450 ± 0.071 (2) | 4.450 ± 0.071 (2) (0.01) | 0.075 ± 0.035 (2) |"]:
            self.assertIn(want, self.lines, "\n".join(self.lines))

    def test_initial_loss_is_the_mean_first_loss(self):
        lr = self.tables["lr.csv"]
        self.assertEqual(len(lr), 8)
        self.assertEqual(set(lr.seed), {1, 2})
        self.assertAlmostEqual(lr[lr.ln == "pre"].initial_loss.iloc[0], 8.3, delta=1e-12)
        self.assertAlmostEqual(lr[lr.ln == "peri"].initial_loss.iloc[0], 8.0, delta=1e-12)

    def test_welch_tests_against_peri_at_its_smallest_dt(self):
        text = "\n".join(self.lines)
        self.assertTrue(any(l.startswith("| Pre-LN Δt=1 | LR sensitivity | 0.825 ± 0.460 (2) | Peri-LN Δt=0.1 "
                                         "0.075 ± 0.035 (2) | ") for l in self.lines), text)
        self.assertTrue(any(l.startswith("| Pre-LN Δt=1 | L* | 5.000 ± 1.414 (2) | Peri-LN Δt=0.1 4.450 ± 0.071 (2) | ")
                            for l in self.lines), text)
        # The best lr by mean finished loss: Pre-LN's 1e-2 (4.0; 1e-3: 5.5), Peri-LN's 1e-2 (4.45; 1e-3: 4.6).
        self.assertIn("| Pre-LN Δt=1 | accuracy at the best lr | 0.250 (1) | Peri-LN Δt=0.1 0.330 ± 0.014 (2) | — |",
                      self.lines, text)

    def test_one_seed_cells_show_the_outcome(self):
        grid, results = hand_made([("pre", 1.0, 0.1, 1e-3, 1, "ok", 5.0, 8.0, {}),
                                   ("pre", 1.0, 0.1, 1e-2, 1, "diverged", None, 8.0, dict(stopped_step=35)),
                                   ("pre", 1.0, 0.1, 1e-1, 1, None, None, None, {})])
        lines, _ = e1.report(None, on_grid(grid, results))
        self.assertIn("| Pre-LN Δt=1 | 5.000 | diverged @35 | … | 5.000 (0.001) | — (not every lr recorded) |", lines,
                      "\n".join(lines))


class E2(unittest.TestCase):
    def test_over_seeds_of_hand_made_fits(self):
        def fit(dt, seed, last, winner, delta, c=None):
            return dict(ln="pre", dt=dt, depth=8, seed=seed, stage="trained", quantity="mean_abs", last=last,
                        winner=winner, delta_aicc=delta, quadratic_c=c)
        fits = pd.DataFrame([fit(1.0, 1, 10.0, "quadratic", 5.0, -0.1), fit(1.0, 2, 12.0, "quadratic", 1.0, 0.2),
                             fit(0.1, 1, 1.0, "linear", 3.0), fit(0.1, 2, 13.0, "linear", 3.0)])

        def diag(ln, seed, rho, p, sens, amp):
            return dict(ln=ln, dt=1.0, precision=None, depth=8, seed=seed, rho=rho, rho_p=p, max_sensitivity=sens,
                        amplification=amp, gradient_ratio=None)
        diags = pd.DataFrame([diag("pre", 1, 0.9, 0.01, 6.0, 1.0), diag("pre", 2, 0.5, 0.2, 8.0, 3.0),
                              diag("peri", 1, -0.9, 0.01, 1.0, 0.1), diag("peri", 2, -0.7, 0.04, 1.2, 0.1)])
        lines = e2.over_seeds(fits, diags)
        for want in ["| Pre-LN Δt=1 | 8 | trained | mean_abs | 11 ± 1.41 (2) | concave quadratic 1, convex quadratic 1 | "
                     "concave quadratic 1 |",
                     "| Pre-LN Δt=0.1 | 8 | trained | mean_abs | 7 ± 8.49 (2) | linear 2 | linear 2 |",
                     "| trained | mean_abs | Pre-LN | 1 of 2 | 1 |",  # sign test of 1 of 2: p = 1
                     "| Pre-LN Δt=1 | 8 | 0.70 ± 0.28 (2) | 1 / 0 | 7 ± 1.41 (2) | 2 ± 1.41 (2) |",
                     "| Peri-LN Δt=1 | 8 | -0.80 ± 0.14 (2) | 0 / 2 | 1.1 ± 0.141 (2) | 0.1 ± 0 (2) |"]:
            self.assertIn(want, lines, "\n".join(lines))
        self.assertTrue(any(l.startswith("| 1 | 8 | max sensitivity | 7 ± 1.41 (2) | 1.1 ± 0.141 (2) | ") for l in lines))

    def test_fits_and_diagnostics_of_a_hand_made_run(self):
        # One Pre-LN run of 8 blocks: mean_abs = 1 + 2·i ± 0.01 after training (a straight line
        # with alternating noise); the gradient of W_fcproj rises with the hidden RMS over the
        # blocks except for one swap.
        grid, results = hand_made([("pre", 1.0, 0.1, 1e-3, 1, "ok", 5.0, 8.0, {})])
        name = grid[0].name
        layers = pd.DataFrame([dict(run=name, layer=i, mean_abs=1 + 2 * i + 0.01 * (-1) ** i, entry_var=(1 + 2 * i) ** 2,
                                    fcproj_grad_norm=None if i == 0 else [1, 2, 3, 5, 4, 6, 7, 8][i - 1],
                                    mlp_hidden_rms=None if i == 0 else float(i), sens_mean=None if i == 0 else 1.0 + i,
                                    grad_norm_scaled=2.0 if i == 0 else 1.0, relative_amplification=0.5)
                               for i in range(9)])
        lines, tables = e2.report(None, on_grid(grid, results), Sweep(results, layers, None))
        fits = tables["fits.csv"]
        trained = fits[fits.quantity == "mean_abs"].iloc[0]
        self.assertEqual(trained.winner, "linear")
        self.assertAlmostEqual(trained.linear_b, 2.0, delta=0.01)
        self.assertEqual((trained["first"], trained["last"]), (2.99, 17.01))  # X_1 and X_8 (X_0 left out)
        # One adjacent swap of 8: ρ = 1 − 6·2/(8·63) = 0.976; exact p: of the 8! orderings, the 7
        # adjacent swaps and the identity reach ρ ≥ 0.976, their reverses ρ ≤ −0.976: 16/40320.
        # Largest sensitivity 9; gradient ratio 2/1.
        self.assertIn("| Pre-LN Δt=1 (seed 1) | 8 | 0.98 | 0.0004 | 9 | 0.5 | 2 |", lines, "\n".join(lines))


class E3(unittest.TestCase):
    def test_counts_and_fisher_tests(self):
        runs = []
        for ln, failures in (("pre", {0.0: 4, 0.1: 1}), ("peri", {0.0: 0, 0.1: 0})):
            for wd, failed in failures.items():
                for seed in range(1, 6):
                    bad = seed <= failed
                    runs.append((ln, 1.0, wd, 0.1, seed, "collapsed" if bad else "ok", 5.9 if bad else 5.0, 8.0,
                                 dict(accuracy=0.1)))
        grid, results = hand_made(runs)
        lines, tables = e3.report(None, on_grid(grid, results))
        tests = tables["tests.csv"].set_index(["test", "counted"])
        # Not ok 5 of 10 against 0 of 10: the tables with 0 or 5 failures in the first row, each
        # C(10, 5)/C(20, 5) = 252/15504. Pre-LN wd 0 against 0.1, 4 of 5 against 1 of 5: tables
        # k = 0, 1, 4, 5 of C(5, k)²/252: (1 + 25 + 25 + 1)/252.
        self.assertAlmostEqual(tests.loc[("Pre-LN vs Peri-LN (all wd, Δt)", "not ok"), "p"], 504 / 15504, delta=1e-12)
        self.assertAlmostEqual(tests.loc[("Pre-LN: wd 0 vs 0.1 (all Δt)", "not ok"), "p"], 52 / 252, delta=1e-12)
        self.assertEqual(tests.loc[("Pre-LN vs Peri-LN (all wd, Δt)", "stopped"), "p"], 1.0)
        self.assertIn("| Pre-LN Δt=1 | 0 | 5 | 1 | 4 | 0 | 0 | 0 | 5.720 ± 0.402 (5) |", lines, "\n".join(lines))
        self.assertIn("| Pre-LN vs Peri-LN (all wd, Δt) | not ok | 5/10 | 0/10 | 0.0325 |", lines)


class Summary(unittest.TestCase):
    def test_per_configuration_table_and_missing_runs(self):
        grid, results = hand_made([
            ("pre", 1.0, 0.1, 1e-3, 1, "ok", 5.0, 8.0, dict(mean_abs_0=0.1, mean_abs_L=0.5, grad_norm_scaled_0=2.0,
                                                          grad_norm_scaled_L=4.0, ppl_seq=150.0)),
            ("pre", 1.0, 0.1, 1e-3, 2, "diverged", None, 8.0, dict(stopped_step=40)),
            ("pre", 1.0, 0.1, 1e-3, 3, None, None, None, {})])
        s = argparse.Namespace(**dict(DEFAULTS, warmup=20))
        text = summary.results_markdown(s, on_grid(grid, results))
        # 2 recorded runs: 1 ok, 1 diverged; val − unigram 5.0 − 5.8; growth 0.1 → 0.5 (×5); ratio 2/4.
        self.assertIn("| Pre-LN | 1 | 0.1 | 0.001 | 8 | 2 | 1 | 0 | 1 | 0 | 0 | 5.000 (1) | -0.800 (1) | 150.0 (1) | — | — "
                      "| — | 0.1 → 0.5 (×5) | 0.500 (1) |", text)
        self.assertIn("Not recorded yet (1): pre_dt1_wd0.1_lr0.001_s3", text)
        self.assertIn("unigram_ce 5.8000", text)


class Published(unittest.TestCase):
    """`sweep.py --report PREFIX` on copies of the published tables docs/eN_{results,layers,init_layers}.csv
    writes the published reports docs/eN_experiment.md, docs/eN_results.md and the experiment's CSV
    byte for byte: they are what the tables say."""

    def test_reports_regenerate_from_the_published_tables(self):
        docs = os.path.join(REPO, "docs")
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("e1", "e2", "e3"):
                for table in ("results.csv", "layers.csv", "init_layers.csv"):
                    if os.path.exists(os.path.join(docs, f"{name}_{table}")):
                        shutil.copy(os.path.join(docs, f"{name}_{table}"), os.path.join(tmp, f"{name}_{table}"))
                with contextlib.redirect_stdout(io.StringIO()):
                    status = cli.main(["--report", os.path.join(tmp, name), "--preset", name, "--no-figures"], "",
                                      "sweep.py")
                self.assertEqual(status, 0)
                for written in ("experiment.md", "results.md") + tuple(f for f in REPORTS[name].FILES if f.endswith(".csv")):
                    with open(os.path.join(tmp, f"{name}_{written}"), "rb") as f, \
                            open(os.path.join(docs, f"{name}_{written}"), "rb") as g:
                        self.assertEqual(f.read(), g.read(), f"docs/{name}_{written}")


if __name__ == "__main__":
    unittest.main()

"""The reports of E1, E2 and E3 and the per-configuration table on hand-made runs, every number
worked out by hand. Run by build/test_experiments (make test)."""
import argparse
import contextlib
import math
import io
import json
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
from experiments.settings import defaults  # noqa: E402
from experiments.tables import on_grid  # noqa: E402


def sweep_defaults():
    """A sweep's defaults, with those of the programs from the repository's ./train and ./eval."""
    return defaults(os.path.join(REPO, "train"), os.path.join(REPO, "eval"))


def hand_made(runs):
    """(grid, results) of hand-made runs: (ln, dt, wd, lr, seed, outcome, val_loss, first loss, extra)."""
    grid, rows = [], []
    for ln, dt, wd, lr, seed, outcome, loss, first, extra in runs:
        run = Run(ln, dt, wd, lr, None, None, seed, "/nowhere")
        grid.append(run)
        if outcome:
            rows.append(dict(dict(run=run.name, ln=ln, dt=dt, wd=wd, lr=lr, seed=seed, outcome=outcome, val_loss=loss,
                                  unigram_ce=5.8 if loss is not None else None,
                                  bigram_ce=4.6 if loss is not None else None, first_train_loss=first, spikes=0),
                             **extra))
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


class E1Edge(unittest.TestCase):
    def test_failure_rule_boundaries(self):
        # unigram 6, bigram 4: a run fails above 6 − 0.25·2 = 5.5; exactly 5.5 learned a quarter.
        rows = pd.DataFrame(dict(outcome=["ok", "ok", "collapsed", "diverged", "ok", "ok"],
                                 val_loss=[5.5, 5.5 + 2 ** -20, 5.0, None, 5.9, 5.9],
                                 unigram_ce=[6.0, 6.0, 6.0, None, 6.0, 6.0], bigram_ce=[4.0, 4.0, 4.0, None, None, 4.0]))
        self.assertEqual(list(e1.failed(rows)), [False, True, True, True, False, True])

    def test_next_lr_walks_the_half_decades(self):
        self.assertEqual([e1.next_lr(x, True) for x in (1e-3, 3e-3, 0.1, 0.3, 1.0)], [3e-3, 1e-2, 0.3, 1.0, 3.0])
        self.assertEqual([e1.next_lr(x, False) for x in (1e-3, 3e-4, 0.1)], [3e-4, 1e-4, 0.03])
        self.assertEqual(e1.next_lr(6e-4, True), 0.0019)  # off the series: ×√10, two digits

    def hand_made_edge(self):
        # Pre-LN Δt = 1, lrs 1e-3, 1e-2, 0.1, seeds 1-2: best at 1e-3 (the smallest); 1 of 2 fail at
        # 1e-2, 2 of 2 at 0.1. Peri-LN Δt = 0.1 fails nowhere; its best lr is 1e-2.
        runs = []
        for seed in (1, 2):
            runs += [("pre", 1.0, 0.1, 1e-3, seed, "ok", 4.9, 8.3, {}),
                     ("pre", 1.0, 0.1, 1e-2, seed, "ok" if seed == 1 else "collapsed", 5.0 if seed == 1 else 5.9, 8.3,
                      dict(max_loss=9.5)),
                     ("pre", 1.0, 0.1, 0.1, seed, "diverged", None, 8.3, dict(stopped_step=12)),
                     ("peri", 0.1, 0.1, 1e-3, seed, "ok", 5.0, 8.3, {}),
                     ("peri", 0.1, 0.1, 1e-2, seed, "ok", 4.6, 8.3, {}),
                     ("peri", 0.1, 0.1, 0.1, seed, "ok", 4.8, 8.3, {})]
        return on_grid(*hand_made(runs))

    def test_edges_and_the_extension(self):
        runs = self.hand_made_edge()
        # Pre-LN above its best lr 1e-3: half fail at 1e-2, so the edge is 1e-2 itself (f_lo = 0 at
        # 1e-3: ln-interpolation reaches 1/2 at 1e-2), bracketed by (1e-3, 1e-2).
        edge = e1.edge_of(runs[runs.ln == "pre"])
        self.assertEqual((edge["best"], edge["low"], edge["high"]), (1e-3, 1e-3, 1e-2))
        self.assertAlmostEqual(edge["edge"], 1e-2, delta=1e-15)
        self.assertEqual(e1.pre_ln_edge(runs)[0], 0.01)
        peri = e1.edge_of(runs[runs.ln == "peri"])
        self.assertEqual((peri["best"], peri["edge"], peri["low"]), (1e-2, None, 0.1))
        # Not bracketed: Peri-LN fails in 0 of 2 at the top (0.1: one half decade up, 0.3), Pre-LN's
        # best is the smallest lr (down: 3e-4).
        add, why = e1.extension(runs)
        self.assertEqual(add, [3e-4, 0.3])
        self.assertEqual(len(why), 2, why)
        lines, tables = e1.report(None, runs)
        text = "\n".join(lines)
        self.assertIn("| Pre-LN Δt=1 | 0/2 | 1/2 | 2/2 |", lines, text)
        self.assertIn("| Pre-LN Δt=1 | 0.001 | 0.01 (0.001–0.01) |", lines, text)
        self.assertIn("E3 runs at 0.01, 0.1.", text)  # the edge rounds onto η_hi: the grid's next lr beside it
        self.assertIn("(next: lr 0.0003, 0.3).", text)
        self.assertEqual(list(tables["lr.csv"].failed[tables["lr.csv"].ln == "pre"]), [False, False, True, False, True, True])

    def test_divergence_covers_a_blow_up_in_warmup_that_never_recovers(self):
        # ./train's rule waits for the end of warmup (docs/experiments.md, *Run outcomes*); a run
        # that blows up inside warmup and stays up sits on its plateau afterwards, so nothing rises and ./train finishes it
        # (seed 1: collapsed, its last training loss 10.6 above its first 8.32). The analysis's
        # event counts it; a blow-up that recovers (seed 2) it does not; a stopped run (3) it
        # does; a finished run whose last training loss stayed above its first (4) it does; a run
        # that learned too little (5) failed without diverging; a collapse after a blow-up that
        # came back below ln V (6: max_loss 9.5, 1.18 nats above its first) it does; a collapse
        # without a blow-up (7: its loss never rose 1 nat above its first) is under-learning, in
        # the broad secondary event only.
        runs = on_grid(*hand_made([
            ("pre", 1.0, 0.1, 0.1, 1, "collapsed", 5.95, 8.32, dict(final_train_loss=10.6, max_loss=11.2,
                                                                    max_loss_step=18)),
            ("pre", 1.0, 0.1, 0.1, 2, "ok", 5.2, 8.32, dict(final_train_loss=5.1, max_loss=11.0, max_loss_step=15)),
            ("pre", 1.0, 0.1, 0.1, 3, "diverged", None, 8.32, dict(final_train_loss=9.0, stopped_step=40)),
            ("pre", 1.0, 0.1, 0.1, 4, "ok", 5.3, 8.32, dict(final_train_loss=8.5)),
            ("pre", 1.0, 0.1, 0.1, 5, "ok", 5.6, 8.32, dict(final_train_loss=5.5)),
            ("pre", 1.0, 0.1, 0.1, 6, "collapsed", 5.9, 8.32, dict(final_train_loss=5.9, max_loss=9.5,
                                                                   max_loss_step=12)),
            ("pre", 1.0, 0.1, 0.1, 7, "collapsed", 5.9, 8.32, dict(final_train_loss=5.9, max_loss=8.32,
                                                                   max_loss_step=0))]))
        self.assertEqual(list(e1.diverged(runs)), [True, False, True, True, False, True, False])
        self.assertEqual(list(e1.broke(runs)), [True, False, True, True, False, True, True])
        self.assertEqual(list(e1.failed(runs)), [True, False, True, False, True, True, True])

    def learning(self, fails):
        """Pre- and Peri-LN × Δt 1, 0.1 at lrs 1e-3, 1e-2, 0.1, 0.3 × seeds 1-3, and Post-LN failing
        everywhere; `fails` maps (ln, dt, lr) to how many of its three runs fail (collapse)."""
        runs = []
        for ln in ("pre", "peri", "post"):
            for dt in (1.0, 0.1):
                for lr in (1e-3, 1e-2, 0.1, 0.3):
                    k = 3 if ln == "post" else fails.get((ln, dt, lr), 0)
                    runs += [(ln, dt, 0.1, lr, seed, "collapsed" if seed <= k else "ok", 5.9 if seed <= k else 5.0,
                              8.3, {}) for seed in (1, 2, 3)]
        return on_grid(*hand_made(runs))

    def test_matched_learning_rates(self):
        # Every Pre- and Peri-LN configuration learns (fewer than half of its runs fail) at 1e-3,
        # 1e-2 and 0.1 (Peri-LN Δt = 1 fails 1 of 3 there); at 0.3 Pre-LN Δt = 1 fails 2 of 3. The
        # two largest: 1e-2 and 0.1.
        runs = self.learning({("pre", 1.0, 0.3): 2, ("peri", 1.0, 0.1): 1})
        self.assertEqual(e1.matched_lrs(runs), ([1e-2, 0.1], [1e-3, 1e-2, 0.1]))
        # Pre-LN Δt = 0.1 failing 2 of 3 at 0.1 leaves 1e-3 and 1e-2.
        runs = self.learning({("pre", 0.1, 0.1): 2, ("pre", 1.0, 0.3): 2, ("peri", 1.0, 0.1): 1})
        self.assertEqual(e1.matched_lrs(runs), ([1e-3, 1e-2], [1e-3, 1e-2]))
        # With Peri-LN Δt = 1 failing 2 of 3 at 1e-2 too, one learning rate is left: none matched.
        runs = self.learning({("pre", 0.1, 0.1): 2, ("pre", 1.0, 0.3): 2, ("peri", 1.0, 1e-2): 2})
        self.assertEqual(e1.matched_lrs(runs), ([], [1e-3]))

    def test_divergence_edge(self):
        # Pre-LN (both Δt, 4 runs per lr) above its best lr 1e-3: 1 of 4 diverge at 0.1, 3 of 4 at
        # 0.3: the rate reaches 1/2 half way in ln lr, √(0.1·0.3) = 0.173 → 0.17; E3 runs there and
        # at 0.3. (Peri-LN's runs do not count.)
        runs = []
        for dt in (1.0, 0.1):
            for seed in (1, 2):
                runs += [("pre", dt, 0.1, 1e-3, seed, "ok", 5.0, 8.3, dict(final_train_loss=5.0)),
                         ("pre", dt, 0.1, 0.1, seed, "collapsed" if (dt, seed) == (1.0, 1) else "ok",
                          5.9 if (dt, seed) == (1.0, 1) else 5.4, 8.3, dict(final_train_loss=5.4, max_loss=9.6)),
                         ("pre", dt, 0.1, 0.3, seed, "ok" if (dt, seed) == (0.1, 2) else "diverged",
                          5.5 if (dt, seed) == (0.1, 2) else None, 8.3, dict(final_train_loss=5.5)),
                         ("peri", dt, 0.1, 0.1, seed, "diverged", None, 8.3, {})]
        found, edge = e1.divergence_edge(on_grid(*hand_made(runs)))
        self.assertEqual(found, [0.17, 0.3])
        self.assertAlmostEqual(edge["edge"], math.sqrt(0.1 * 0.3), delta=1e-12)
        self.assertEqual(edge["rates"][0.1], (1, 4))

    def test_e3_lrs_stay_off_the_bracket(self):
        # η_d rounding onto η_hi: the second lr is the grid's next above it (or η_hi alone at the
        # grid's end); onto η_lo: η_d moves to the geometric midpoint, √(0.1·0.3) = 0.173 → 0.17.
        grid = [1e-3, 0.1, 0.3, 1.0]
        self.assertEqual(e1.e3_lrs(dict(low=0.1, high=0.3, edge=0.2999), grid), [0.3, 1.0])
        self.assertEqual(e1.e3_lrs(dict(low=0.3, high=1.0, edge=0.9999), grid), [1.0])
        self.assertEqual(e1.e3_lrs(dict(low=0.1, high=0.3, edge=0.1001), grid), [0.17, 0.3])
        self.assertEqual(e1.e3_lrs(dict(low=0.1, high=0.3, edge=0.2), grid), [0.2, 0.3])

    def test_no_experiment_repeats_a_run_of_the_one_it_takes_its_lrs_from(self):
        theirs = on_grid(*hand_made([("pre", 1.0, 0.1, 0.01, 1, "ok", 5.0, 8.3, {})]))
        cli.check_disjoint([Run("pre", 1.0, 0.1, 0.01, None, None, 2, "/x"),
                            Run("pre", 1.0, 0.0, 0.01, None, None, 1, "/x")], theirs, "runs/e1")  # no error
        with self.assertRaises(cli.InputError) as caught:
            cli.check_disjoint([Run("pre", 1.0, 0.1, 0.01, 8, None, 1, "/x")], theirs, "runs/e1")  # another depth
        self.assertIn("1 runs of this grid are runs there too (e.g. pre, Δt 1, wd 0.1, lr 0.01, seed 1)",
                      str(caught.exception))

    def test_the_protocols_seeds_are_disjoint(self):
        from experiments.grid import parse_list
        from experiments.settings import PRESETS
        for prefix in ("", "gpu-"):
            seeds = [set(parse_list(PRESETS[prefix + e]["seeds"], "int", "--seeds")) for e in ("e1", "e2", "e3")]
            for i in range(3):
                self.assertFalse(seeds[i] & set(range(1, 11)), (prefix, i))  # the second round's seeds
                for j in range(i):
                    self.assertFalse(seeds[i] & seeds[j], (prefix, i, j))

    def test_a_bracketing_grid_adds_nothing(self):
        runs = self.hand_made_edge()
        runs = runs[~((runs.ln == "peri") & (runs.lr == 0.1))]  # now Peri's top lr is 1e-2 …
        runs = runs[~((runs.ln == "pre") & (runs.lr == 1e-3))]   # … and Pre's best is 1e-2
        runs = on_grid(*hand_made([(r.ln, r.dt, r.wd, r.lr, r.seed, r.outcome, r.val_loss if r.val_loss == r.val_loss
                                    else None, 8.3, {}) for r in runs.itertuples()] +
                                  [("peri", 0.1, 0.1, 0.1, s, "diverged", None, 8.3, {}) for s in (1, 2)] +
                                  [("pre", 1.0, 0.1, 1e-3, s, "ok", 5.6, 8.3, {}) for s in (1, 2)]))
        self.assertEqual(e1.extension(runs), ([], []))


def trained_layers(name, depth, mean_abs, entry_var=None, **per_block):
    """A hand-made eval profile of one run: X_0..X_L from the functions of i."""
    rows = []
    for i in range(depth + 1):
        row = dict(run=name, layer=i, mean_abs=mean_abs(i), entry_var=(entry_var or mean_abs)(i), rms=mean_abs(i),
                   grad_norm_scaled=1.0, w2_bound=0.1 * mean_abs(i), relative_amplification=1.0,
                   fcproj_grad_norm=None if i == 0 else float(i), mlp_hidden_rms=None if i == 0 else float(i),
                   sens_mean=None if i == 0 else 1.0)
        row.update({k: (None if i == 0 else f(i)) for k, f in per_block.items()})
        rows.append(row)
    return rows


class LrFrom(unittest.TestCase):
    """--lr-from E1_OUT by the matched and divergence rules (cli.lr_from_e1) on a hand-made E1 sweep
    folder: the learning rates a sweep gets, and the refusal of one that would repeat E1's runs."""

    def setUp(self):
        self.folder = tempfile.mkdtemp()
        runs = []
        for ln in ("pre", "peri"):
            for dt in (1.0, 0.1):
                for seed in (1, 2):
                    runs += [(ln, dt, 0.1, 1e-3, seed, "ok", 5.2, 8.3, dict(final_train_loss=5.2)),
                             (ln, dt, 0.1, 1e-2, seed, "ok", 5.0, 8.3, dict(final_train_loss=5.0)),
                             (ln, dt, 0.1, 0.1, seed, "ok", 5.1, 8.3, dict(final_train_loss=5.1)),
                             (ln, dt, 0.1, 0.3, seed, "diverged" if ln == "pre" else "ok", 5.3, 8.3,
                              dict(final_train_loss=5.3))]
        results = hand_made(runs)[1]
        results.to_csv(os.path.join(self.folder, "results.csv"), index=False)
        pd.DataFrame(columns=["run", "layer"]).to_csv(os.path.join(self.folder, "layers.csv"), index=False)
        with open(os.path.join(self.folder, "sweep.json"), "w") as f:
            json.dump(dict(ln="pre,peri", dt="1,0.1", wd="0.1", lr="0.001,0.01,0.1,0.3", seeds="1,2"), f)

    def tearDown(self):
        shutil.rmtree(self.folder)

    def lrs(self, rule, seeds):
        s = argparse.Namespace(**{**sweep_defaults(), "ln": "pre,peri", "dt": "1,0.1", "seeds": seeds, "lr_from": self.folder,
                                  "lr_from_rule": rule, "out": "/nowhere"})
        with contextlib.redirect_stdout(io.StringIO()):
            return cli.lr_from_e1(s)

    def test_matched_and_divergence_rules(self):
        # Every configuration learns at 1e-3, 1e-2, 0.1 (Pre-LN stops at 0.3): the matched lrs are
        # 1e-2 and 0.1, and every configuration's best lr (1e-2) is one of them. Pre-LN diverges in
        # 0 of 4 at 0.1 and 4 of 4 at 0.3: its edge 0.17, and the lr above it.
        self.assertEqual(self.lrs("matched", "201"), "0.01,0.1")
        self.assertEqual(self.lrs("divergence", "301"), "0.17,0.3")
        with self.assertRaises(cli.InputError) as caught:
            self.lrs("divergence", "2-3")
        self.assertIn("runs of this grid are runs there too", str(caught.exception))


class E2(unittest.TestCase):
    def test_gate_boundary(self):
        rows = pd.DataFrame(dict(outcome=["ok", "ok", "collapsed", "diverged"], val_loss=[5.25, 5.25 + 2 ** -20, 5.0, None],
                                 unigram_ce=[6.0, 6.0, 6.0, None]))
        self.assertEqual(list(e2.gated(rows)), [True, False, True, False])

    def depth_runs(self, law):
        """Pre-LN Δt = 1 at L = 4, 8, 16, 32, seeds 1-2, every run gated, X_i = law(i, L)."""
        made, layers = [], []
        for depth in (4, 8, 16, 32):
            for seed in (1, 2):
                run = Run("pre", 1.0, 0.1, 1e-3, depth, None, seed, "/nowhere")
                made.append(run)
                layers += trained_layers(run.name, depth, lambda i, d=depth: law(i, d))
        results = pd.DataFrame([dict(run=r.name, ln=r.ln, dt=r.dt, wd=r.wd, lr=r.lr, depth=r.depth, seed=r.seed,
                                     outcome="ok", val_loss=4.0, unigram_ce=5.8, bigram_ce=4.6) for r in made],
                               columns=RESULT_COLUMNS)
        layers = pd.DataFrame(layers)
        return on_grid(made, results), Sweep(results, layers, layers)

    def test_depth_law_of_hand_made_profiles(self):
        # X_L = 2·e^{0.05·L}: r = 0.05 exactly, the power of L nothing beyond it.
        runs, tables = self.depth_runs(lambda i, L: 2 * math.exp(0.05 * i))
        fits = e2.depth_fits(runs, tables)
        row = fits[(fits.stage == "trained") & (fits.quantity == "mean_abs")].iloc[0]
        self.assertEqual((row.runs, row.depths), (8, "4 8 16 32"))
        self.assertAlmostEqual(row.r, 0.05, delta=1e-9)
        self.assertAlmostEqual(row.p, 0.0, delta=1e-9)
        self.assertEqual(row.preferred, "exponential")
        # X_L = 3·L^0.5 (X_i = 3·√i): the power alone is 0.5, below 1 (p of p = 1 tiny: no noise).
        runs, tables = self.depth_runs(lambda i, L: 3 * math.sqrt(i))
        row = e2.depth_fits(runs, tables).iloc[0]
        self.assertAlmostEqual(row.power_alone_p, 0.5, delta=1e-9)
        self.assertAlmostEqual(row.r, 0.0, delta=1e-9)
        self.assertEqual(row.preferred, "power")

    def test_within_run_laws_only_at_depth_and_gated(self):
        runs, tables = self.depth_runs(lambda i, L: 1 + 0.5 * i + 0.01 * (-1) ** i)
        fits = e2.within_fits(runs, tables)
        self.assertEqual(len(fits), 8 * 2 * 2)  # runs × stages × quantities
        counted = e2.fitted(fits)
        self.assertEqual(set(counted.depth), {32})
        self.assertEqual(set(counted.law), {"linear"})
        lines, out = e2.report(None, runs, tables)
        self.assertIn("depth_fits.csv", out)
        self.assertTrue(any(l.startswith("| Pre-LN Δt=1 lr=0.001 | 32 | trained | mean_abs |") and "linear 2" in l
                            for l in lines), "\n".join(lines))

    def test_pairs_and_ratio_by_hand(self):
        t = e2.ratio_test([1.0, 2.0, 4.0], [2.0, 4.0, 8.0])
        self.assertEqual((t["smaller"], t["pairs"]), (3, 3))
        self.assertAlmostEqual(t["p"], 0.25, delta=1e-12)  # 2/2^3
        self.assertAlmostEqual(t["ratio"], 2.0, delta=1e-12)
        self.assertAlmostEqual(t["low"], 2.0, delta=1e-12)  # no spread

    def test_diagnostics_and_intervention_slopes(self):
        grid, results = hand_made([("pre", 1.0, 0.1, 1e-3, 1, "ok", 5.0, 8.0, {}),
                                   ("peri", 1.0, 0.1, 1e-3, 1, "ok", 5.0, 8.0, {}),
                                   ("peri", 1.0, 0.1, 1e-3, 2, "ok", 5.5, 8.0, {})])  # seed 2 not gated
        layers = pd.DataFrame(trained_layers(grid[0].name, 3, lambda i: 1.0 + i) +
                              trained_layers(grid[1].name, 3, lambda i: 1.0 + i))
        runs = on_grid(grid, results)
        diag = e2.diagnostics(runs, Sweep(results, layers, None))
        self.assertAlmostEqual(diag.absolute_amplification.iloc[0], 4.0, delta=1e-12)  # W2 ∝ mean_abs: 4/1
        # Pre-LN: block 1's sensitivity 2k, block 2's 1.5: the largest grows ∝ k from k = 1 on, so
        # over k = 0.5, 1, 2, 4 the largest is 1.5, 2, 4, 8; blocks 2..L never move; block 1 the
        # largest at 3 of the 4 k. Peri-LN: nothing moves.
        rows = []
        for k in (0.5, 1.0, 2.0, 4.0):
            rows += [dict(run=grid[0].name, ln="pre", dt=1.0, seed=1, k=k, layer=1, sens_mean=2 * k),
                     dict(run=grid[0].name, ln="pre", dt=1.0, seed=1, k=k, layer=2, sens_mean=1.5),
                     dict(run=grid[1].name, ln="peri", dt=1.0, seed=1, k=k, layer=1, sens_mean=1.2),
                     dict(run=grid[1].name, ln="peri", dt=1.0, seed=1, k=k, layer=2, sens_mean=1.1),
                     dict(run=grid[2].name, ln="peri", dt=1.0, seed=2, k=k, layer=1, sens_mean=9.0)]
        slopes = e2.intervention_slopes(pd.DataFrame(rows), runs).set_index("ln")
        self.assertEqual(len(slopes), 2)  # the ungated run is left out
        x, y = [math.log(k) for k in (0.5, 1, 2, 4)], [math.log(v) for v in (1.5, 2, 4, 8)]
        mx, my = sum(x) / 4, sum(y) / 4
        slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)
        self.assertAlmostEqual(slopes.loc["pre", "slope"], slope, delta=1e-12)
        self.assertAlmostEqual(slopes.loc["pre", "slope_deep"], 0.0, delta=1e-12)
        self.assertAlmostEqual(slopes.loc["pre", "at_block_1"], 0.75, delta=1e-12)
        self.assertAlmostEqual(slopes.loc["peri", "slope"], 0.0, delta=1e-12)


class E3(unittest.TestCase):
    def test_counts_and_fisher_tests(self):
        runs = []
        for ln, failures in (("pre", {0.0: 4, 0.1: 1}), ("peri", {0.0: 0, 0.1: 0})):
            for wd, failed in failures.items():
                for seed in range(1, 6):
                    bad = seed <= failed
                    runs.append((ln, 1.0, wd, 0.1, seed, "collapsed" if bad else "ok", 5.9 if bad else 5.0, 8.0,
                                 dict(accuracy=0.1, train_max_attn_logit=50.0 if bad else 5.0)))
        runs[0] = runs[0][:5] + ("diverged", None) + runs[0][7:]  # one failure stopped instead
        grid, results = hand_made(runs)
        lines, tables = e3.report(None, on_grid(grid, results))
        tests = tables["tests.csv"].set_index(["test", "counted"])
        # Failed 5 of 10 against 0 of 10: the tables with 0 or 5 failures in the first row, each
        # C(10, 5)/C(20, 5) = 252/15504. Pre-LN wd 0 against 0.1, 4 of 5 against 1 of 5: tables
        # k = 0, 1, 4, 5 of C(5, k)²/252: (1 + 25 + 25 + 1)/252.
        first = tests.loc[("Pre-LN vs Peri-LN (all wd, Δt)", "failed")]
        self.assertAlmostEqual(first.p, 504 / 15504, delta=1e-12)
        self.assertAlmostEqual(first.difference, 0.5, delta=1e-12)
        self.assertAlmostEqual(tests.loc[("Pre-LN: wd 0 vs 0.1 (all Δt)", "failed"), "p"], 52 / 252, delta=1e-12)
        self.assertEqual(tests.loc[("Pre-LN vs Peri-LN (all wd, Δt)", "stopped"), "first_failed"], 1)
        # The rank-sum of the final losses: Pre-LN's 10 against Peri-LN's 10 (all 5.0): the 5 failed
        # ones are above every Peri-LN run (the stopped one at +∞), the 5 others tie with all 10:
        # P(pre > peri) = (5·10 + 5·10/2)/100 = 0.75.
        self.assertAlmostEqual(first.rank_share, 0.75, delta=1e-12)
        self.assertIn("| Pre-LN Δt=1 | 0 | 0.1 | 5 | 1 | 3 | 1 | 0 | 4 | 0 | 5.675 ± 0.450 (4) | 5.900 | 50 | — |", lines,
                      "\n".join(lines))
        # Newcombe's interval from Wilson's: 5/10 is 0.5 ± 1.96·sqrt(2.5 + 0.9604)/13.8415 = (0.2366,
        # 0.7634), 0/10 is (0, 0.2775); low = 0.5 − sqrt(0.2634² + 0.2775²) = 0.117, high = 0.5 + 0.2634.
        self.assertAlmostEqual(first.difference_low, 0.1174, delta=1e-4)
        self.assertAlmostEqual(first.difference_high, 0.7634, delta=1e-4)
        self.assertTrue(any(l.startswith("| Pre-LN vs Peri-LN (all wd, Δt) | failed | 5/10 | 0/10 | +0.50 (+0.12, +0.76) "
                                         "| 0.0325 | 0.75 |") for l in lines), "\n".join(lines))
        self.assertEqual(e3.ranked_loss(results.iloc[:2])[0], math.inf)


class Summary(unittest.TestCase):
    def test_per_configuration_table_and_missing_runs(self):
        grid, results = hand_made([
            ("pre", 1.0, 0.1, 1e-3, 1, "ok", 5.0, 8.0, dict(mean_abs_0=0.1, mean_abs_L=0.5, grad_norm_scaled_0=2.0,
                                                          grad_norm_scaled_L=4.0, ppl_seq=150.0)),
            ("pre", 1.0, 0.1, 1e-3, 2, "diverged", None, 8.0, dict(stopped_step=40)),
            ("pre", 1.0, 0.1, 1e-3, 3, None, None, None, {})])
        s = argparse.Namespace(**dict(sweep_defaults(), warmup=20))
        text = summary.results_markdown(s, on_grid(grid, results))
        # 2 recorded runs: 1 ok, 1 diverged; val − unigram 5.0 − 5.8; growth 0.1 → 0.5 (×5); ratio 2/4.
        self.assertIn("| Pre-LN | 1 | 0.1 | 0.001 | 8 | 2 | 1 | 0 | 1 | 0 | 0 | 5.000 (1) | -0.800 (1) | 150.0 (1) | — | — "
                      "| — | 0.1 → 0.5 (×5) | 0.500 (1) |", text)
        self.assertIn("Not recorded yet (1): pre_dt1_wd0.1_lr0.001_s3", text)
        self.assertIn("unigram_ce 5.8000", text)


class Published(unittest.TestCase):
    """`sweep.py --report PREFIX` on copies of the published tables docs/eN_{results,layers,init_layers}.csv
    (with the settings docs/eN_sweep.json and E2's intervention when published) writes the published
    reports docs/eN_experiment.md, docs/eN_results.md and the experiment's CSVs byte for byte: they are
    what the tables say."""

    def test_reports_regenerate_from_the_published_tables(self):
        docs = os.path.join(REPO, "docs")
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("e1", "e2", "e3"):
                for table in ("results.csv", "layers.csv", "init_layers.csv", "intervention.csv", "sweep.json"):
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

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

from scipy import stats as scipy_stats  # noqa: E402

from experiments import cli, e1, e2, e3, primary, stats, summary  # noqa: E402
from experiments.reports import EXPERIMENTS as REPORTS  # noqa: E402
from experiments.collect import RESULT_COLUMNS  # noqa: E402
from experiments.grid import Run  # noqa: E402
from experiments.results import BLOCK_SERIES, LAYER_KEYS, Sweep  # noqa: E402
from experiments.settings import defaults  # noqa: E402
from experiments.tables import on_grid, recorded  # noqa: E402


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
        # Pre-LN fails in 1 of 2 at 1e-2 (not fewer than half): the learning range is 1e-3 alone.
        self.assertIn("Every Pre- and Peri-LN configuration learns (fewer than half its runs fail) at 0.001: the "
                      "learning range", text)
        self.assertNotIn("next: lr", text)  # a grid fixed before the runs does not extend itself
        self.assertIn("(next: lr 0.0003, 0.3).", "\n".join(e1.edge_lines(runs, sorted(set(runs.lr)), True)))
        self.assertEqual(list(tables["lr.csv"].failed[tables["lr.csv"].ln == "pre"]), [False, False, True, False, True, True])

    def test_divergence_covers_a_blow_up_in_warmup_that_never_recovers(self):
        # ./train's rule waits for the end of warmup (docs/experiments.md, *Run outcomes*); a run
        # that blows up inside warmup and stays up sits on its plateau afterwards, so nothing rises and ./train finishes it
        # (seed 1: collapsed, its last training loss 10.6 above its first 8.32). The analysis's
        # event counts it; a blow-up that recovers (seed 2) it does not; a stopped run (3) it
        # does; a finished run whose last training loss stayed above its first (4) it does; a run
        # that learned too little (5) failed without diverging; a collapse after a blow-up of at
        # least 1 nat (6: max_loss 9.5 against 8.32, its last loss back at 5.9) ended a unigram
        # predictor, so it diverged too (docs/protocol.md, *Divergence*); a collapse without a
        # blow-up (7) is in the broad secondary event only.
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
        self.assertEqual(list(e1.ran_away(runs)), [True, False, True, True, False, False, False])
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
        # Pre-LN (both Δt, 4 runs per lr) above its best lr 1e-3: 1 of 4 diverge at 0.1 (collapsed,
        # its last training loss 9.0 above its first 8.3: never recovered; the other three end at
        # 5.4), 3 of 4 at 0.3 (stopped): the rate reaches 1/2 half way in ln lr, √(0.1·0.3) =
        # 0.173 → 0.17; `--lr-from-rule divergence` runs there and at 0.3. (Peri-LN's runs do not
        # count.)
        runs = []
        for dt in (1.0, 0.1):
            for seed in (1, 2):
                runs += [("pre", dt, 0.1, 1e-3, seed, "ok", 5.0, 8.3, dict(final_train_loss=5.0)),
                         ("pre", dt, 0.1, 0.1, seed, "collapsed" if (dt, seed) == (1.0, 1) else "ok",
                          5.9 if (dt, seed) == (1.0, 1) else 5.4, 8.3,
                          dict(final_train_loss=9.0 if (dt, seed) == (1.0, 1) else 5.4, max_loss=9.6)),
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
        # Each experiment's seeds, on the CPU and on a GPU, apart from the other experiments' and from
        # every earlier round's: the first and second rounds' 1–10, the third round's 101–105
        # (E1), 201–203 (E2), 301–312 (E3).
        from experiments.grid import parse_list
        from experiments.settings import EARLIER_SEEDS, PRESETS
        earlier = set(range(1, 11)) | set(range(101, 106)) | set(range(201, 204)) | set(range(301, 313))
        self.assertEqual(EARLIER_SEEDS, earlier)  # what findings.is_current takes for a pilot's tables
        for prefix in ("", "gpu-"):
            seeds = [set(parse_list(PRESETS[prefix + e]["seeds"], "int", "--seeds")) for e in ("e1", "e2", "e3")]
            for i in range(3):
                self.assertTrue(seeds[i], (prefix, i))
                self.assertFalse(seeds[i] & earlier, (prefix, i))
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


def slope(xs, ys):
    """The least-squares slope of ys on xs, written out: Σ(x − x̄)(y − ȳ) / Σ(x − x̄)²."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def layers_of(made, profile):
    """Per-layer tables of hand-made runs: `profile(run)` gives (mean_abs(i), entry_var(i))."""
    rows = []
    for run in made:
        mean_abs, entry_var = profile(run)
        rows += trained_layers(run.name, run.depth, mean_abs, entry_var)
    return pd.DataFrame(rows)


def deep_sweep(rate, outcome=lambda run: "ok"):
    """Pre- and Peri-LN Δt = 1 at lr 0.01, L = 4 and 8, seeds 1-2; every run's mean|X_l| = e^{r·l}
    and entry_var = e^{2r·l}, r = rate(run); (runs, tables)."""
    made = [Run(ln, 1.0, 0.1, 0.01, depth, None, seed, "/nowhere") for ln in ("pre", "peri") for depth in (4, 8)
            for seed in (1, 2)]
    results = pd.DataFrame([dict(run=r.name, ln=r.ln, dt=r.dt, wd=r.wd, lr=r.lr, depth=r.depth, seed=r.seed,
                                 outcome=outcome(r), val_loss=4.9 if r.seed == 1 else 5.3, unigram_ce=5.8,
                                 bigram_ce=4.6) for r in made], columns=RESULT_COLUMNS)
    layers = layers_of(made, lambda r: (lambda i: math.exp(rate(r) * i), lambda i: math.exp(2 * rate(r) * i)))
    return on_grid(made, results), Sweep(results, layers, layers)


class E2(unittest.TestCase):
    def test_gate_boundary(self):
        rows = pd.DataFrame(dict(outcome=["ok", "ok", "collapsed", "diverged"], val_loss=[5.25, 5.25 + 2 ** -20, 5.0, None],
                                 unigram_ce=[6.0, 6.0, 6.0, None]))
        self.assertEqual(list(e2.gated(rows)), [True, False, True, False])

    def test_deep_half_of_hand_made_profiles(self):
        # L = 8: the deep half is l = 4..8. mean|X_l| = 3·l, entry_var = 9·l²: powers exactly 1 and 2,
        # and a rate of ln(3l) on l; 2·e^{0.05·l}: the rate exactly 0.05, and a power of 0.05 times
        # the slope of l on ln l.
        made = [Run("pre", 1.0, 0.1, 0.01, 8, None, 1, "/nowhere"), Run("peri", 1.0, 0.1, 0.01, 8, None, 1, "/nowhere"),
                Run("peri", 1.0, 0.1, 0.01, 8, None, 2, "/nowhere")]
        results = pd.DataFrame([dict(run=r.name, ln=r.ln, dt=r.dt, wd=r.wd, lr=r.lr, depth=r.depth, seed=r.seed,
                                     outcome=o, val_loss=v, unigram_ce=5.8, bigram_ce=4.6)
                                for r, o, v in zip(made, ("ok", "collapsed", "diverged"), (4.9, 5.8, None))],
                               columns=RESULT_COLUMNS)
        layers = layers_of(made, lambda r: ((lambda i: 3.0 * i), (lambda i: 9.0 * i * i)) if r.ln == "pre" else
                           ((lambda i: 2 * math.exp(0.05 * i)), (lambda i: 4 * math.exp(0.1 * i))))
        deep = e2.deep_half(on_grid(made, results), Sweep(results, layers, None)).set_index("ln")
        self.assertEqual(list(deep.reset_index().columns), ["ln"] + [c for c in e2.DEEP_COLUMNS if c != "ln"])
        self.assertEqual(len(deep), 2)  # the run that stopped has no trained profile to measure
        l = [4, 5, 6, 7, 8]
        self.assertAlmostEqual(deep.loc["pre", "power_mean"], 1.0, delta=1e-12)
        self.assertAlmostEqual(deep.loc["pre", "power_var"], 2.0, delta=1e-12)
        self.assertAlmostEqual(deep.loc["pre", "rate"], slope(l, [math.log(3 * i) for i in l]), delta=1e-12)
        self.assertAlmostEqual(deep.loc["peri", "rate"], 0.05, delta=1e-12)
        self.assertAlmostEqual(deep.loc["peri", "power_mean"], 0.05 * slope([math.log(i) for i in l], l), delta=1e-12)
        self.assertEqual((bool(deep.loc["pre", "gated"]), bool(deep.loc["peri", "gated"])), (True, False))
        self.assertEqual((deep.loc["pre", "depth"], deep.loc["peri", "outcome"]), (8, "collapsed"))

    def test_report_by_hand(self):
        # Rates per block: Pre-LN 0.04, 0.06 (seeds 1, 2) at L = 4 and 0.05, 0.07 at L = 8; Peri-LN 0.01,
        # 0.03 at both depths. Seed 2 misses the gate (5.3 > 5.8 − 0.75) but enters the deep half.
        rates = {("pre", 4): 0.04, ("pre", 8): 0.05, ("peri", 4): 0.01, ("peri", 8): 0.01}
        runs, tables = deep_sweep(lambda r: rates[r.ln, r.depth] + 0.02 * (r.seed - 1))
        lines, out = e2.report(None, runs, tables)
        text = "\n".join(lines)
        self.assertEqual(set(out), {"deep.csv", "fits.csv"})
        self.assertEqual(list(out["deep.csv"].columns), e2.DEEP_COLUMNS)
        self.assertEqual(len(out["deep.csv"]), 8)
        # L = 4, deep half 2..4: mean|X_l| = e^{r·l} has power r·slope(l on ln l), entry_var twice it.
        k4 = slope([math.log(i) for i in (2, 3, 4)], [2, 3, 4])
        sd = math.sqrt(2e-4)  # two rates 0.02 apart
        row = (f"| Pre-LN Δt=1 lr=0.01 | 4 | 2/2 | {0.05:.3g} ± {sd:.3g} (2) | {0.05 * k4:.3g} ± {sd * k4:.3g} (2) | "
               f"{0.1 * k4:.3g} ± {2 * sd * k4:.3g} (2) | {0.04:.3g} (1) |")
        self.assertIn(row, lines, text)
        # As L doubles: Pre-LN 0.05 → 0.06, ratio 1.2; 0.06 − ¾·0.05 = 0.0225 with variance
        # 2e-4/2 + (9/16)·2e-4/2 and Welch–Satterthwaite df V²/(a² + b²) (n − 1 = 1 each).
        a, b = 1e-4, 0.5625 * 1e-4
        df = (a + b) ** 2 / (a * a + b * b)
        half = scipy_stats.t.ppf(0.975, df) * math.sqrt(a + b)
        p = 2 * scipy_stats.t.sf(0.0225 / math.sqrt(a + b), df)
        self.assertIn(f"| Pre-LN Δt=1 lr=0.01 | 4 → 8 | 0.05 ± {sd:.3g} (2) | 0.06 ± {sd:.3g} (2) | 1.2 | "
                      f"0.0225 ({0.0225 - half:.3g}, {0.0225 + half:.3g}) | {p:.2g} |", lines, text)
        # Peri-LN's 0.02 at both: ratio 1.
        self.assertTrue(any(l.startswith(f"| Peri-LN Δt=1 lr=0.01 | 4 → 8 | 0.02 ± {sd:.3g} (2) | 0.02 ± {sd:.3g} (2) "
                                         "| 1 | ") for l in lines), text)
        # Pre − Peri at L = 8: 0.06 − 0.02 = 0.04, Welch with equal variances and n = 2: df 2.
        se = math.sqrt(2e-4 / 2 * 2)
        self.assertIn(f"| 1 | 0.01 | 8 | rate of ln mean\\|X_l\\| per block | 0.04 ({0.04 - scipy_stats.t.ppf(0.975, 2) * se:.3g}, "
                      f"{0.04 + scipy_stats.t.ppf(0.975, 2) * se:.3g}) | {2 * scipy_stats.t.sf(0.04 / se, 2):.2g} |", lines, text)
        # No intervention in this sweep, no Δt pairs, no fits across depth.
        for gone in ("Intervention", "Across depth", "Δt = 0.1 against"):
            self.assertNotIn(gone, text)

    def test_doubling_needs_two_finished_runs_at_each_depth(self):
        # Pre-LN's seed 2 stopped at L = 8: one rate there, no interval.
        runs, tables = deep_sweep(lambda r: 0.05, lambda r: "diverged" if (r.ln, r.depth, r.seed) == ("pre", 8, 2) else "ok")
        lines, out = e2.report(None, runs, tables)
        self.assertEqual(len(out["deep.csv"]), 7)
        self.assertTrue(any(l.startswith("| Pre-LN Δt=1 lr=0.01 | 4 → 8 | 0.05 ± 0 (2) | 0.05 (1) | 1 | — | — |")
                            for l in lines), "\n".join(lines))
        self.assertTrue(any(l.startswith("| Pre-LN Δt=1 lr=0.01 | 8 | 1/2 |") for l in lines), "\n".join(lines))

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

    def test_within_run_laws_only_at_depth_and_gated(self):
        runs, tables = self.depth_runs(lambda i, L: 1 + 0.5 * i + 0.01 * (-1) ** i)
        fits = e2.within_fits(runs, tables)
        self.assertEqual(len(fits), 8 * 2 * 2)  # runs × stages × quantities
        counted = e2.fitted(fits)
        self.assertEqual(set(counted.depth), {32})
        self.assertEqual(set(counted.law), {"linear"})
        lines, out = e2.report(None, runs, tables)
        self.assertEqual(len(out["fits.csv"]), 8 * 2 * 2)
        self.assertTrue(any(l.startswith("| Pre-LN Δt=1 lr=0.001 | 32 | trained | mean_abs |") and "linear 2" in l
                            for l in lines), "\n".join(lines))

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
        self.assertAlmostEqual(slopes.loc["pre", "slope"], slope(x, y), delta=1e-12)
        self.assertAlmostEqual(slopes.loc["pre", "slope_deep"], 0.0, delta=1e-12)
        self.assertAlmostEqual(slopes.loc["pre", "at_block_1"], 0.75, delta=1e-12)
        self.assertAlmostEqual(slopes.loc["peri", "slope"], 0.0, delta=1e-12)
        # Where a sweep ran the intervention, the report has its section.
        lines, _ = e2.report(None, runs, Sweep(results, layers, None, pd.DataFrame(rows)))
        self.assertIn("### Intervention: the branch outputs scaled by k", lines)


# E3's hand-made dose-response: per placement, Δt and wd, how many of the 3 seeds at each lr of E3_LRS
# (0.1, 0.2, 0.4, 0.8) end how: stopped (./train's diverged), unrecovered (collapsed with its last
# training loss above its first: diverged), collapsed (recovered: broke and failed), short (ok but
# above E1's failure line: failed only); the rest learn.
E3_LRS = (0.1, 0.2, 0.4, 0.8)
E3_LAYOUT = {
    ("pre", 1.0, 0.0): dict(stopped=(0, 1, 2, 3), unrecovered=(0, 0, 1, 0)),
    ("pre", 1.0, 0.1): dict(stopped=(0, 0, 1, 3), collapsed=(1, 0, 1, 0)),
    ("pre", 0.1, 0.0): dict(stopped=(0, 1, 1, 3), short=(1, 1, 0, 0)),
    ("pre", 0.1, 0.1): dict(stopped=(0, 0, 2, 3)),
    ("peri", 1.0, 0.0): dict(stopped=(0, 0, 2, 3)),
    ("peri", 1.0, 0.1): dict(stopped=(0, 0, 1, 2)),
    ("peri", 0.1, 0.0): dict(stopped=(0, 0, 1, 3)),
    ("peri", 0.1, 0.1): dict(collapsed=(2, 1, 0, 0)),  # under-learning at small lrs, never diverging
}
KINDS = ("stopped", "unrecovered", "collapsed", "short")


def e3_runs(wds=(0.0, 0.1)):
    """E3's hand-made runs (E3_LAYOUT) at the weight decays `wds`, and per (ln, dt, wd) the arrays
    (ln lr, diverged, ran away, broke, failed) of its runs as the layout says, for the statistics by
    hand (no run blows up and then collapses, so diverged and ran away agree here)."""
    runs, events = [], {}
    for (ln, dt, wd), kinds in E3_LAYOUT.items():
        if wd not in wds:
            continue
        arrays = events.setdefault((ln, dt, wd), ([], [], [], [], []))
        for i, lr in enumerate(E3_LRS):
            order = [kind for kind in KINDS for _ in range(kinds.get(kind, (0,) * 4)[i])]
            for seed, kind in zip((1, 2, 3), order + ["learns"] * (3 - len(order))):
                outcome = {"stopped": "diverged", "unrecovered": "collapsed", "collapsed": "collapsed"}.get(kind, "ok")
                loss = {"stopped": None, "unrecovered": 5.9, "collapsed": 5.85, "short": 5.6}.get(kind, 5.0)
                final = {"stopped": 9.5, "unrecovered": 8.6}.get(kind, 5.5)
                runs.append((ln, dt, wd, lr, seed, outcome, loss, 8.3,
                             dict(final_train_loss=final, spikes=1 if kind == "collapsed" else 0,
                                  train_max_attn_logit=100.0 * (seed + i), train_max_mean_abs_L=float(seed))))
                for array, flag in zip(arrays, (math.log(lr), kind in ("stopped", "unrecovered"),
                                                kind in ("stopped", "unrecovered"),
                                                kind in ("stopped", "unrecovered", "collapsed"), kind != "learns")):
                    array.append(float(flag))
    grid, results = hand_made(runs)
    return on_grid(grid, results), events


class E3(unittest.TestCase):
    def setUp(self):
        self.runs, self.events = e3_runs()
        self.lines, self.tables = e3.report(None, self.runs)
        self.text = "\n".join(self.lines)

    def test_counts_per_configuration_and_lr(self):
        # Pre-LN Δt = 1, wd 0 at 0.4: 2 stopped, 1 unrecovered (collapsed, last loss 8.6 > 8.3): 3
        # diverged, 3 ran away, 3 broke, 3 failed; attention logits 100·(seed + 2): median 400;
        # mean|X_L| = seed: 2.
        self.assertIn("| Pre-LN Δt=1 | 0 | 0.4 | 3 | 0 | 1 | 2 | 0 | 3 | 3 | 3 | 3 | 0 | 400 | 2 |", self.lines,
                      self.text)
        # Pre-LN Δt = 1, wd 0.1 at 0.1: 1 collapsed (recovered, no blow-up, 1 spike): neither diverged
        # nor ran away; broke and failed.
        self.assertIn("| Pre-LN Δt=1 | 0.1 | 0.1 | 3 | 2 | 1 | 0 | 0 | 0 | 0 | 1 | 1 | 1 | 200 | 2 |", self.lines,
                      self.text)
        # Pre-LN Δt = 0.1, wd 0 at 0.2: 1 stopped, 1 short (ok at 5.6, above 5.8 − ¼·1.2 = 5.5): failed 2.
        self.assertIn("| Pre-LN Δt=0.1 | 0 | 0.2 | 3 | 2 | 0 | 1 | 0 | 1 | 1 | 1 | 2 | 0 | 300 | 2 |", self.lines,
                      self.text)

    def test_fifty_percent_lr_of_each_configuration_and_event(self):
        # The cell of each configuration and event is stats.logistic_edge of the layout's arrays.
        rows = {l.split(" | ")[0] + " | " + l.split(" | ")[1]: l for l in self.lines if l.startswith("| P")
                and l.count("|") == 7}
        for (ln, dt, wd), (x, *flags) in self.events.items():
            cells = []
            for flag in flags:
                found = stats.logistic_edge(x, flag)
                cells.append("—" if found is None else f"{found[0]:.2g} ({found[1]:.2g}–{found[2]:.2g})" +
                             ("" if 0.1 <= found[0] <= 0.8 else " (outside the grid)"))
            label = f"| {'Pre-LN' if ln == 'pre' else 'Peri-LN'} Δt={dt:g} | {wd:g}"
            self.assertEqual(rows[label], f"{label} | " + " | ".join(cells) + " |", self.text)
        # Peri-LN Δt = 0.1, wd 0.1 never diverges, and collapses less as the lr grows: no dose-response of
        # the broad events.
        self.assertTrue(rows["| Peri-LN Δt=0.1 | 0.1"].endswith("| — | — |"), rows["| Peri-LN Δt=0.1 | 0.1"])
        self.assertEqual(len(rows), len(self.events))

    def test_shift_tests_per_event_and_dt(self):
        found = self.tables["tests.csv"]
        self.assertEqual(list(found.columns), e3.TEST_COLUMNS)
        self.assertEqual(len(found), 4 * 4 * 2)  # tests × events × Δt
        for column, event in enumerate(("diverged", "ran away", "broke", "failed"), start=1):
            for dt in (1.0, 0.1):
                # Every run at this Δt: Peri-LN flagged, zero weight decay flagged, one intercept per wd.
                x, flag, peri, wd = [], [], [], []
                for (ln, d, w), arrays in self.events.items():
                    if d == dt:
                        x += arrays[0]
                        flag += arrays[column]
                        peri += [ln == "peri"] * len(arrays[0])
                        wd += [w] * len(arrays[0])
                zero = [w == 0.0 for w in wd]
                # Each placement's own runs, wd 0 flagged.
                own = {ln: [i for i, p in enumerate(peri) if p == (ln == "peri")] for ln in ("pre", "peri")}
                by_hand = {
                    "placement": (stats.logistic_shift(x, flag, peri, wd), len(x), True),
                    "placement × weight decay": (stats.logistic_shift(x, flag, peri, wd, zero), len(x), True),
                    "Pre-LN's weight decay": (stats.logistic_shift([x[i] for i in own["pre"]],
                                                                   [flag[i] for i in own["pre"]],
                                                                   [zero[i] for i in own["pre"]]), 24, False),
                    "Peri-LN's weight decay": (stats.logistic_shift([x[i] for i in own["peri"]],
                                                                    [flag[i] for i in own["peri"]],
                                                                    [zero[i] for i in own["peri"]]), 24, False)}
                for test, (want, runs, claimed_above) in by_hand.items():
                    row = found[(found.test == test) & (found.event == event) & (found.dt == dt)].iloc[0]
                    self.assertEqual(row.runs, runs, (test, event, dt))
                    if want is None:
                        self.assertTrue(math.isnan(row.ratio) and math.isnan(row.p), (test, event, dt))
                        continue
                    for key in ("ratio", "low", "high", "p", "slope"):
                        self.assertAlmostEqual(row[key], want[key], delta=1e-12, msg=(test, event, dt, key))
                    self.assertEqual(row.direction, "claimed" if (want["ratio"] > 1) == claimed_above else "opposite",
                                     (test, event, dt))
        # The claim's own test (primary.per_dt of divergence_shift) on the same runs gives the joined line.
        joined = primary.per_dt(recorded(self.runs).assign(diverged=e1.diverged(recorded(self.runs))),
                                primary.divergence_shift)
        self.assertIn(f"| placement | diverged | {joined.p:.2g} | {joined.direction} | {joined.effect} |", self.lines,
                      self.text)

    def test_one_weight_decay_cannot_test_it(self):
        runs, _ = e3_runs(wds=(0.1,))
        lines, tables = e3.report(None, runs)
        rows = tables["tests.csv"]
        wd = rows[rows.test != "placement"]
        self.assertEqual(len(wd), 3 * 4 * 2)  # the three tests of weight decay × events × Δt
        self.assertTrue(wd.p.isna().all() and wd.ratio.isna().all())
        self.assertEqual(set(wd.why), {"the runs are not at two weight decays"})
        self.assertTrue(rows[rows.test == "placement"].p.notna().all())
        self.assertIn("| placement × weight decay | diverged | — | not tested | the runs are not at two weight decays |",
                      lines)

    def test_one_learning_rate_has_no_dose_response(self):
        # A tiny sweep at one lr, a third of the runs stopped: no curve in ln lr can be fitted.
        runs = [(ln, 1.0, wd, 0.01, seed, "diverged" if seed == 1 else "ok", None if seed == 1 else 5.0, 8.3,
                 dict(final_train_loss=9.0 if seed == 1 else 5.0)) for ln in ("pre", "peri") for wd in (0.0, 0.1)
                for seed in (1, 2, 3)]
        lines, tables = e3.report(None, on_grid(*hand_made(runs)))
        found = tables["tests.csv"]
        self.assertEqual(len(found), 4 * 4)  # tests × events, one Δt
        self.assertTrue(found.p.isna().all() and found.ratio.isna().all(), found)
        self.assertEqual(set(found.why), {"no dose-response: no fit, or its slope in ln lr is not positive"})
        self.assertIn("| Pre-LN Δt=1 | 0 | — | — | — | — |", lines)


def full_layers(name, depth, mean_abs, entry_var=None):
    """trained_layers with every per-layer series ./eval writes (the figures draw them all): those it
    does not set are 1."""
    rows = trained_layers(name, depth, mean_abs, entry_var)
    for row in rows:
        for key in LAYER_KEYS:
            if row.get(key) is None and not (row["layer"] == 0 and key in BLOCK_SERIES):
                row[key] = 1.0
    return rows


class PublishedSweeps(unittest.TestCase):
    """`sweep.py --report PREFIX --preset e2|e3` on small hand-made published tables: the report,
    its CSVs and its figure, where reports.py and the preset put them."""

    def report(self, name, results, layers):
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        prefix = os.path.join(folder, name)
        results.to_csv(prefix + "_results.csv", index=False)
        layers.to_csv(prefix + "_layers.csv", index=False)
        layers.to_csv(prefix + "_init_layers.csv", index=False)
        with contextlib.redirect_stdout(io.StringIO()) as said:
            status = cli.main(["--report", prefix, "--preset", name], "", "sweep.py")
        self.assertEqual(status, 0, said.getvalue())
        return prefix

    def test_e2(self):
        runs, tables = deep_sweep(lambda r: 0.05 if r.ln == "pre" else 0.02)
        layers = pd.DataFrame([row for run in recorded(runs).itertuples()
                               for row in full_layers(run.run, int(run.depth), lambda i, r=run: math.exp(
                                   (0.05 if r.ln == "pre" else 0.02) * i))])
        prefix = self.report("e2", tables.results.assign(first_train_loss=8.3), layers)
        for name in REPORTS["e2"].FILES:
            self.assertTrue(os.path.getsize(f"{prefix}_{name}") > 0, name)
        deep = pd.read_csv(prefix + "_deep.csv")
        self.assertEqual((len(deep), list(deep.columns)), (8, e2.DEEP_COLUMNS))
        with open(prefix + "_experiment.md", encoding="utf-8") as f:
            text = f.read()
        self.assertIn("### The rate as L doubles", text)
        self.assertIn("| Pre-LN Δt=1 lr=0.01 | 4 → 8 | 0.05 ± 0 (2) | 0.05 ± 0 (2) | 1 | — | — |", text)

    def test_e3(self):
        runs, _ = e3_runs()
        done = recorded(runs)
        layers = pd.DataFrame([row for run in done[done.outcome != "diverged"].itertuples()
                               for row in full_layers(run.run, 2, lambda i: 1.0 + i)])
        prefix = self.report("e3", done, layers)
        for name in REPORTS["e3"].FILES:
            self.assertTrue(os.path.getsize(f"{prefix}_{name}") > 0, name)
        self.assertEqual(len(pd.read_csv(prefix + "_tests.csv")), 4 * 4 * 2)  # tests × events × Δt
        with open(prefix + "_experiment.md", encoding="utf-8") as f:
            self.assertIn("### The shift of the 50% learning rate (claim 6)", f.read())


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
    (with the settings docs/eN_sweep.json and E2's intervention when published) runs, and where the
    tables are the present protocol's (the seeds of its preset) it writes the published reports
    docs/eN_experiment.md, docs/eN_results.md and the experiment's CSVs byte for byte: they are what
    the tables say. Tables of an earlier round were reported by that round's code (docs/rounds.md),
    so there the reports only have to run."""

    def test_reports_regenerate_from_the_published_tables(self):
        from experiments.grid import parse_list
        from experiments.settings import PRESETS
        docs = os.path.join(REPO, "docs")
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("e1", "e2", "e3"):
                for table in ("results.csv", "layers.csv", "init_layers.csv", "intervention.csv", "sweep.json"):
                    if os.path.exists(os.path.join(docs, f"{name}_{table}")):
                        shutil.copy(os.path.join(docs, f"{name}_{table}"), os.path.join(tmp, f"{name}_{table}"))
                with contextlib.redirect_stdout(io.StringIO()):
                    status = cli.main(["--report", os.path.join(tmp, name), "--preset", name, "--no-figures"], "",
                                      "sweep.py")
                self.assertEqual(status, 0, name)
                seeds = set(pd.read_csv(os.path.join(tmp, f"{name}_results.csv")).seed)
                if seeds != set(parse_list(PRESETS[name]["seeds"], "int", "--seeds")):
                    continue
                for written in ("experiment.md", "results.md") + tuple(f for f in REPORTS[name].FILES if f.endswith(".csv")):
                    with open(os.path.join(tmp, f"{name}_{written}"), "rb") as f, \
                            open(os.path.join(docs, f"{name}_{written}"), "rb") as g:
                        self.assertEqual(f.read(), g.read(), f"docs/{name}_{written}")


if __name__ == "__main__":
    unittest.main()

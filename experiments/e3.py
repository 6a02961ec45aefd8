"""E3, failures at the edge of stability with and without weight decay (docs/experiments.md, "The
protocol"): per run its outcome beside what it went through (spikes, the highest training loss
and its step, the largest attention logit and mean |X_L| ./train logged); per configuration
the counts; Fisher's exact tests (two-sided) of Pre- against Peri-LN and of weight decay off
against on, counting failures (e1.failed) and runs that stopped, each with the difference of
the failure rates and its interval, and beside it the rank-sum test of the final loss (a run
that stopped ranks worst); Welch's and the rank-sum test of the final loss against Peri-LN
Δt = 0.1; the growth laws of the finished runs' profiles. Writes tests.csv (one row per count
test)."""
import math

import pandas as pd

from . import stats
from .collect import FINISHED, OUTCOMES
from .e1 import failed
from .grid import PLACEMENT_LABEL, fmt_num
from .tables import CONFIG_KEYS, finished, fmt_stat, groups, outcome_counts, recorded, short_label, table, tally, \
    values

FILES = ("tests.csv",)
TEST_COLUMNS = ["test", "counted", "first_failed", "first_runs", "second_failed", "second_runs", "difference",
                "difference_low", "difference_high", "p", "rank_share", "rank_p"]
# What a count test counts.
COUNTED = {"failed": failed, "stopped": lambda rows: rows.outcome.isin(["diverged", "nonfinite"])}


def ranked_loss(rows):
    """The final validation loss of each run for a rank test: a run that stopped (or whose loss is
    not finite) ranks above every finished one (+inf)."""
    return [loss if outcome in FINISHED and loss == loss else math.inf for outcome, loss in zip(rows.outcome, rows.val_loss)]


def count_test(name, first, second, counted):
    """Fisher's exact test of `counted` in `first` against `second`, the difference of their
    rates with Newcombe's interval, and the rank-sum test of their final losses."""
    a, c = int(COUNTED[counted](first).sum()), int(COUNTED[counted](second).sum())
    d, low, high = stats.rate_difference(a, len(first), c, len(second))
    ranks = stats.mann_whitney(ranked_loss(first), ranked_loss(second))
    return dict(test=name, counted=counted, first_failed=a, first_runs=len(first), second_failed=c,
                second_runs=len(second), difference=d, difference_low=low, difference_high=high,
                p=stats.fisher_exact(a, len(first) - a, c, len(second) - c), rank_share=ranks and ranks[0],
                rank_p=ranks and ranks[1])


def tests(got):
    """The count tests of E3's runs: Pre- against Peri-LN over everything, and wd 0 against the
    other weight decay per placement and pooled."""
    out = []
    wds = sorted(set(got.wd))
    pre, peri = got[got.ln == "pre"], got[got.ln == "peri"]
    if len(pre) and len(peri):
        for counted in COUNTED:
            out.append(count_test("Pre-LN vs Peri-LN (all wd, Δt)", pre, peri, counted))
    if len(wds) == 2:
        for ln in ("pre", "peri"):
            mine = got[got.ln == ln]
            if len(mine):
                for counted in COUNTED:
                    out.append(count_test(f"{PLACEMENT_LABEL[ln]}: wd {fmt_num(wds[0])} vs {fmt_num(wds[1])} (all Δt)",
                                          mine[mine.wd == wds[0]], mine[mine.wd == wds[1]], counted))
        out.append(count_test(f"wd {fmt_num(wds[0])} vs {fmt_num(wds[1])} (all placements, Δt)", got[got.wd == wds[0]],
                              got[got.wd == wds[1]], "failed"))
    return pd.DataFrame(out, columns=TEST_COLUMNS)


def number(x, spec=".3g"):
    return "—" if x is None or x != x else format(x, spec)


def report(s, runs, tables=None):
    """E3's markdown lines and its tables ({"tests.csv": DataFrame}) from `runs`, the grid joined
    to its results (tables.on_grid), and the sweep's per-layer tables (for the laws)."""
    got = recorded(runs)
    lines = ["## E3: failures at the edge, with and without weight decay", "",
             f"Learning rate {', '.join(sorted({fmt_num(lr) for lr in runs.lr}))} (E3's rule on E1: Pre-LN's edge, "
             "and the grid's lr above it). A run fails when it does not end ok or ends less than a quarter of the way "
             "from unigram_ce to bigram_ce (E1's rule). Per configuration and learning rate, over the seeds:", ""]
    rows = []
    for (ln, dt, wd, lr, depth, precision), group in groups(runs, CONFIG_KEYS):
        mine = recorded(group)
        if len(mine):
            counts = outcome_counts(mine)
            rows.append([short_label(ln, dt, precision, depth), fmt_num(wd), fmt_num(lr), len(mine)] +
                        [counts[k] for k in OUTCOMES] +
                        [int(failed(mine).sum()), int(mine.spikes.fillna(0).sum()),
                         fmt_stat(values(finished(mine), "val_loss"), 3),
                         number(pd.Series(ranked_loss(mine)).median(), ".3f"),
                         number(mine.train_max_attn_logit.median()), number(mine.train_max_mean_abs_L.median())])
    lines += table(["configuration", "wd", "lr", "runs", "ok", "collapsed", "diverged", "nonfinite", "failed", "spikes",
                    "val loss (finished)", "median final loss (stopped = ∞)", "median largest attention logit",
                    "median largest mean |X_L|"], rows)

    found = tests(got)
    lines += ["", "Count tests: Fisher's exact test, two-sided (failed = E1's rule; stopped = diverged or nonfinite), "
              "the difference of the rates (first − second) with Newcombe's 95% interval; beside it the rank-sum test "
              "of the final loss (share = P(first's loss > second's), a stopped run ranking worst).", ""]
    lines += table(["comparison", "counted", "first", "second", "difference (95% CI)", "Fisher p", "rank share",
                    "rank-sum p"],
                   [[t.test, t.counted, f"{t.first_failed}/{t.first_runs}", f"{t.second_failed}/{t.second_runs}",
                     f"{t.difference:+.2f} ({t.difference_low:+.2f}, {t.difference_high:+.2f})", f"{t.p:.3g}",
                     number(t.rank_share, ".2f"), number(t.rank_p)] for t in found.itertuples()])
    lines += against_reference(got, sorted(set(runs.wd)), sorted(set(runs.dt), reverse=True))
    lines += per_run(got)
    lines += laws(got, tables)
    return lines, {"tests.csv": found}


def against_reference(got, wds, dts):
    """The final loss of each configuration against Peri-LN Δt = 0.1 at the same weight decay and lr:
    Welch's test of the finished runs and the rank-sum test of all (a stopped run worst)."""
    rows = []
    for lr, wd in [(lr, wd) for lr in sorted(set(got.lr)) for wd in wds]:
        at = got[(got.lr == lr) & (got.wd == wd)]
        ref = at[(at.ln == "peri") & (at.dt == 0.1)]
        for ln in ("pre", "peri"):
            for dt in dts:
                mine = at[(at.ln == ln) & (at.dt == dt)]
                if not len(mine):
                    continue
                own = ln == "peri" and dt == 0.1
                welch = None if own else stats.welch(values(finished(mine), "val_loss"), values(finished(ref), "val_loss"))
                ranks = None if own or not len(ref) else stats.mann_whitney(ranked_loss(mine), ranked_loss(ref))
                done = finished(mine)
                rows.append([short_label(ln, dt), fmt_num(wd), fmt_num(lr), fmt_stat(values(done, "val_loss"), 3),
                             fmt_stat(values(done, "accuracy"), 3), fmt_stat(values(done, "rouge1_stem"), 3),
                             "—" if welch is None else f"{welch[1]:.3g}", "—" if ranks is None else f"{ranks[1]:.3g}"])
    return ["", "Final validation loss against Peri-LN Δt = 0.1 at the same wd and lr: Welch's t-test of the finished runs, "
            "and the rank-sum test of every run (a stopped run ranking worst).", ""] + \
        table(["configuration", "wd", "lr", "val loss (finished)", "accuracy", "ROUGE-1 (stemmed)", "Welch p",
               "rank-sum p"],
              rows)


def per_run(got):
    """One line per run: its outcome beside what it went through."""
    rows = [[short_label(r.ln, r.dt), fmt_num(r.wd), fmt_num(r.lr), r.seed,
             r.outcome + (" (failed)" if f and r.outcome == "ok" else ""),
             number(r.stopped_step, ".0f"), number(r.spikes, ".0f"),
             f"{number(r.max_loss, '.2f')} @{number(r.max_loss_step, '.0f')}", number(r.train_max_attn_logit),
             number(r.train_max_mean_abs_L), number(r.val_loss, ".3f")]
            for r, f in zip(got.itertuples(), failed(got))]
    return ["", "Every run: its outcome (ok (failed) = finished ok but less than a quarter of the way to bigram_ce), "
            "the step it stopped at, its spikes, the highest training loss after step 0 and its step, and the largest "
            "attention logit and mean |X_L| of ./train's stats records: whether the attention logits or the residual "
            "stream ran away.", ""] + \
        table(["configuration", "wd", "lr", "seed", "outcome", "stopped", "spikes", "max loss @step",
               "largest attention logit",
               "largest mean |X_L|", "val loss"], rows)


def laws(got, tables):
    """The growth laws of mean_abs over X_1..X_L of the finished runs (stats.fit_laws), per
    configuration: which law wins how often. Read with care at L = 8 (docs/experiments.md)."""
    if tables is None or tables.layers is None or not len(tables.layers):
        return []
    profiles = {name: rows.sort_values("layer") for name, rows in tables.layers.groupby("run")}
    rows = []
    for (ln, dt, wd), group in groups(got, ["ln", "dt", "wd"]):
        names = []
        for run in group.itertuples():
            y = list(profiles[run.run].mean_abs)[1:] if run.run in profiles else []
            if len(y) >= 5 and min(y) > 0:
                fits, winner = stats.fit_laws(range(1, len(y) + 1), y)
                if winner:
                    names.append(stats.law_name(winner, fits[winner]["params"]))
        if names:
            rows.append([short_label(ln, dt), fmt_num(wd), len(names), tally(names)])
    if not rows:
        return []
    return ["", "Growth laws of mean |X_i| over the blocks of each finished run (E2's fits; at these depths the "
            "simulation of docs/experiments.md tells the laws apart poorly, so this is description, not a test).", ""] + \
        table(["configuration", "wd", "runs", "winning laws"], rows)

"""E3, divergence with and without weight decay (docs/experiments.md, "The protocol"): outcome
counts per configuration; Fisher's exact tests (two-sided) of Pre- against Peri-LN and of weight
decay off against on; Welch's t-tests of the final loss against Peri-LN Δt = 0.1. Writes
tests.csv (one row per Fisher test)."""
import pandas as pd

from . import stats
from .collect import OUTCOMES
from .grid import PLACEMENT_LABEL, fmt_num
from .tables import CONFIG_KEYS, finished, fmt_stat, groups, outcome_counts, recorded, short_label, table, values

FILES = ("tests.csv",)
TEST_COLUMNS = ["test", "counted", "first_failed", "first_runs", "second_failed", "second_runs", "p"]
# What a Fisher test counts as a failure.
FAILED = {"stopped": lambda rows: rows.outcome.isin(["diverged", "nonfinite"]),
          "not ok": lambda rows: rows.outcome != "ok"}


def report(s, runs, tables=None):
    """E3's markdown lines and its tables ({"tests.csv": DataFrame}) from `runs`, the grid joined
    to its results (tables.on_grid)."""
    got = recorded(runs)
    lines = ["## E3: divergence with and without weight decay", "",
             f"Learning rate {', '.join(sorted({fmt_num(lr) for lr in runs.lr}))}; outcome counts over the seeds.", ""]
    rows = []
    for (ln, dt, wd, lr, depth, precision), group in groups(runs, CONFIG_KEYS):
        mine = recorded(group)
        if len(mine):
            counts = outcome_counts(mine)
            rows.append([short_label(ln, dt, precision, depth), fmt_num(wd), len(mine)] + [counts[k] for k in OUTCOMES] +
                        [int(mine.spikes.fillna(0).sum()), fmt_stat(values(finished(mine), "val_loss"), 3)])
    lines += table(["configuration", "wd", "runs", "ok", "collapsed", "diverged", "nonfinite", "spikes",
                    "val loss (finished)"], rows)

    tests = []

    def fisher(name, first, second, counted):
        a, c = int(FAILED[counted](first).sum()), int(FAILED[counted](second).sum())
        p = stats.fisher_exact(a, len(first) - a, c, len(second) - c)
        tests.append(dict(test=name, counted=counted, first_failed=a, first_runs=len(first), second_failed=c,
                          second_runs=len(second), p=p))

    wds = sorted(set(runs.wd))
    if got.ln.nunique() > 1:
        for counted in FAILED:
            fisher("Pre-LN vs Peri-LN (all wd, Δt)", got[got.ln == "pre"], got[got.ln == "peri"], counted)
    if len(wds) == 2:
        for ln in ("pre", "peri"):
            for counted in FAILED:
                fisher(f"{PLACEMENT_LABEL[ln]}: wd {fmt_num(wds[0])} vs {fmt_num(wds[1])} (all Δt)",
                       got[(got.ln == ln) & (got.wd == wds[0])], got[(got.ln == ln) & (got.wd == wds[1])], counted)
        fisher(f"wd {fmt_num(wds[0])} vs {fmt_num(wds[1])} (all placements, Δt)", got[got.wd == wds[0]],
               got[got.wd == wds[1]], "stopped")
    lines += ["", "Fisher's exact test, two-sided (stopped = diverged or nonfinite; not ok = stopped or collapsed):", ""]
    lines += table(["comparison", "counted", "first", "second", "p"],
                   [[t["test"], t["counted"], f"{t['first_failed']}/{t['first_runs']}",
                     f"{t['second_failed']}/{t['second_runs']}", f"{t['p']:.3g}"] for t in tests])

    rows = []
    done = finished(got)
    for wd in wds:
        ref = values(done[(done.ln == "peri") & (done.dt == 0.1) & (done.wd == wd)], "val_loss")
        for ln in ("pre", "peri"):
            for dt in sorted(set(runs.dt), reverse=True):
                mine = done[(done.ln == ln) & (done.dt == dt) & (done.wd == wd)]
                test = stats.welch(values(mine, "val_loss"), ref) if not (ln == "peri" and dt == 0.1) else None
                rows.append([short_label(ln, dt), fmt_num(wd), fmt_stat(values(mine, "val_loss"), 3),
                             fmt_stat(values(mine, "accuracy"), 3), fmt_stat(values(mine, "rouge1_stem"), 3),
                             "—" if test is None else f"{test[0]:.2f}", "—" if test is None else f"{test[1]:.3g}"])
    lines += ["", "Final validation loss of the finished runs, Welch's t-test against Peri-LN Δt = 0.1 at the same wd:",
              ""]
    lines += table(["configuration", "wd", "val loss", "accuracy", "ROUGE-1 (stemmed)", "t", "p"], rows)
    return lines, {"tests.csv": pd.DataFrame(tests, columns=TEST_COLUMNS)}

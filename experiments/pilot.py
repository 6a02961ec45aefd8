"""The pilot behind the fourth round's power (docs/protocol.md, *Power*): the numbers power.py's
simulated worlds take from the third round's published tables, computed by the same functions
that will measure the fourth round (e1.dt_pairs, e1.placement_pairs, e2.deep_half, e1.diverged,
stats.firth_logistic). power.py keeps the printed numbers as constants, so that the power table
does not depend on tables that the fourth round replaces; this module says where each came from.

    git worktree add /tmp/round3 2f3cf69      # the third round's tables, as published
    python3 -m experiments.pilot /tmp/round3/docs
"""
import math
import os
import sys

import numpy as np
import pandas as pd

from . import e1, e2, stats
from .grid import make_grid
from .reports import published
from .tables import finished, on_grid, recorded

# What the third round's tables give the fourth round's worlds: E1's learning range, E2's deep
# half at its two largest depths and matched learning rates, E3 with E1's runs at lr ≥ 0.03.
DEEP_LRS, DEEP_DEPTHS = (0.01, 0.03), (32, 64)
DIVERGENCE_FROM = 0.03


def load(docs, name):
    s, tables = published(os.path.join(docs, name), name)
    return on_grid(make_grid(s), tables.results), tables


def mean_sd(values):
    x = stats.finite_values(values)
    return round(float(x.mean()), 4), round(float(x.std(ddof=1)), 4)


def pilot(docs):
    """{quantity: numbers} of the third round's tables under `docs`."""
    e1_runs, e1_tables = load(docs, "e1")
    e2_runs, e2_tables = load(docs, "e2")
    e3_runs, _ = load(docs, "e3")
    found = {}
    lrs = e1.learning_range(e1_runs)
    found["learning_range"] = lrs
    pairs = e1.dt_pairs(e1_runs)
    found["dt_ratio"] = {(ln, lr): {q: mean_sd(pairs[(pairs.ln == ln) & (pairs.lr == lr)][q])
                                    for q in ("log_mean_abs", "log_entry_var")}
                         for ln in ("pre", "peri") for lr in lrs}
    amp = e1.placement_pairs(e1_runs, e1_tables.layers)
    growth = np.log(amp.mean_abs_growth_pre / amp.mean_abs_growth_peri)
    found["amplification"] = {lr: mean_sd(amp[amp.lr == lr].log_absolute) for lr in lrs}
    found["growth_ratio"] = {lr: mean_sd(growth[amp.lr == lr]) for lr in lrs}
    done = finished(e1_runs[e1_runs.ln.isin(["pre", "peri"]) & e1_runs.lr.isin(lrs)])
    done = done[(done.mean_abs_L > 0) & (done.sens_mean_max > 0)]
    x, y = np.log(done.mean_abs_L.astype(float)), np.log(done.sens_mean_max.astype(float))
    slopes = stats.cell_slopes(list(zip(done.ln, done.dt, done.lr)), x, y, (done.ln == "pre").to_numpy())
    cells = done.assign(x=x, y=y).groupby(["ln", "dt", "lr"])
    residual = stats.ols([np.asarray([c == k for c in zip(done.ln, done.dt, done.lr)], dtype=float)
                          for k in cells.groups] + [x * (done.ln == "pre"), x * (done.ln == "peri")], y)
    found["natural"] = dict(b_pre=round(slopes[4], 3), b_peri=round(slopes[5], 3),
                            sigma=round(math.sqrt(residual[3] / residual[4]), 3),
                            x={k: (round(float(g.x.mean()), 3), round(float(g.x.std(ddof=1)), 3)) for k, g in cells})
    deep = e2.deep_half(e2_runs, e2_tables)
    deep = deep[(deep.dt == 1.0) & deep.lr.isin(DEEP_LRS)]
    found["deep"] = {(ln, lr, depth): {q: mean_sd(deep[(deep.ln == ln) & (deep.lr == lr) & (deep.depth == depth)][q])
                                       for q in ("rate", "power_mean", "power_var")}
                     for ln in ("pre", "peri") for lr in DEEP_LRS for depth in DEEP_DEPTHS}
    flags = recorded(e1_runs[e1_runs.ln.isin(["pre", "peri"]) & (e1_runs.lr >= DIVERGENCE_FROM)])
    third = recorded(e3_runs)
    runs = pd.concat([flags.assign(diverged=e1.diverged(flags)), third.assign(diverged=e1.diverged(third))],
                     ignore_index=True)
    found["divergence"] = {}
    for dt in (1.0, 0.1):
        mine = runs[runs.dt == dt]
        wds = sorted(set(mine.wd))
        peri = (mine.ln == "peri").to_numpy(dtype=float)
        X = np.column_stack([(mine.wd == wd).to_numpy(dtype=float) for wd in wds] +
                            [np.log(mine.lr.astype(float)), peri, peri * (mine.wd == wds[0]).to_numpy(dtype=float)])
        beta = stats.firth_logistic(X, mine.diverged.to_numpy(dtype=float))[0]
        found["divergence"][dt] = dict(alpha={wd: round(float(b), 3) for wd, b in zip(wds, beta)},
                                       beta=round(float(beta[2]), 3), gamma=round(float(beta[3]), 3),
                                       delta=round(float(beta[4]), 3))
    measured = e1.measure(e1_runs)
    found["metrics"] = {(k[0], k[1], lr): {m: mean_sd(finished(v["rows"][v["rows"].lr == lr])[m])
                                           for m in ("val_loss", "ppl_seq", "accuracy", "rouge1_stem")}
                        for k, v in measured.items() if k[0] in ("pre", "peri") for lr in lrs}
    found["per_seed"] = {(k[0], k[1]): {m: mean_sd(v[m]) for m in ("L*", "LR sensitivity")}
                         for k, v in measured.items() if k[0] in ("pre", "peri")}
    return found


def main(argv):
    if len(argv) != 1:
        print("usage: python3 -m experiments.pilot DOCS (the third round's docs/ folder)", file=sys.stderr)
        return 2
    for key, value in pilot(argv[0]).items():
        print(f"{key} = {value!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

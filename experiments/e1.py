"""E1, learning-rate sensitivity (docs/experiments.md, "The protocol"): final validation loss
against learning rate per configuration; per seed L*, its lr and Wortsman et al.'s LR
sensitivity, and over several seeds Welch's t-tests against Peri-LN at its smallest Δt.
Writes lr.csv (one row per run) and the figure loss_vs_lr.png."""

import pandas as pd

from . import stats
from .collect import FINISHED
from .grid import fmt_num
from .results import finite
from .stats import mean_sd
from .tables import finished, fmt_spread, groups, recorded, short_label, table, values

TITLE = "E1: final validation loss against learning rate"
FILES = ("lr.csv", "loss_vs_lr.png")
LR_COLUMNS = ["ln", "dt", "wd", "depth", "precision", "lr", "seed", "outcome", "spikes", "val_loss", "unigram_ce",
              "initial_loss"]


def initial_loss(rows):
    """L_init of a configuration: the mean step-0 training loss of its runs (≈ ln V)."""
    return mean_sd(values(rows, "first_train_loss"))[0]


def cell(rows):
    """One table cell: the final validation loss of one run (or its outcome when it stopped;
    (c) = collapsed), or over several seeds its mean ± sd and how many collapsed or stopped."""
    got = recorded(rows)
    if not len(got):
        return "…"
    if len(got) == 1:
        run = got.iloc[0]
        if run.outcome not in FINISHED:
            return f"{run.outcome} @{run.stopped_step:.0f}"
        return f"{run.val_loss:.3f}" + (" (c)" if run.outcome == "collapsed" else "")
    done = finished(got)
    collapsed, stopped = int((got.outcome == "collapsed").sum()), len(got) - len(done)
    notes = [f"{collapsed} c"] * bool(collapsed) + [f"{stopped} stopped"] * bool(stopped)
    return (fmt_spread(values(done, "val_loss"), ".3f") if len(done) else "—") + (f" [{', '.join(notes)}]" if notes else "")


def measure(runs):
    """Per configuration (ln, dt, wd, depth, precision), in grid order, of `runs` (the grid joined
    to its results, tables.on_grid): {"rows": its runs, "L_init", "lr.csv" rows, and the per-seed
    "L*", "best lr", "LR sensitivity" (complete seeds only), and each finished run's ppl_seq,
    accuracy and ROUGE-1 at the configuration's best lr}. Configurations without a recorded run
    are left out."""
    lrs, seeds = sorted(set(runs.lr)), sorted(set(runs.seed))
    measured = {}
    for key, group in groups(runs, ["ln", "dt", "wd", "depth", "precision"]):
        ln, dt, wd, depth, precision = key
        got = recorded(group)
        l_init = initial_loss(got)
        if l_init is None:
            continue
        m = dict(rows=group, L_init=l_init, lr_rows=[], **{"L*": [], "best lr": [], "LR sensitivity": []})
        for seed in seeds:
            mine = got[got.seed == seed].sort_values("lr", kind="stable")
            losses = {lr: finite(loss) for lr, loss in zip(mine.lr, mine.val_loss)}
            m["lr_rows"] += [dict(ln=ln, dt=dt, wd=wd, depth=depth, precision=precision, lr=run.lr, seed=seed,
                                  outcome=run.outcome, spikes=run.spikes, val_loss=run.val_loss,
                                  unigram_ce=run.unigram_ce, initial_loss=l_init) for run in mine.itertuples()]
            best, best_lr, sensitivity = stats.lr_sensitivity(losses, l_init)
            if best is not None:
                m["L*"].append(best)
                m["best lr"].append(best_lr)
            if sensitivity is not None and len(losses) == len(lrs):
                m["LR sensitivity"].append(sensitivity)
        m.update(at_best_lr(got))
        measured[key] = m
    return measured


# The quantities of measure() that Welch's tests compare between configurations.
TESTED = ("L*", "LR sensitivity", "ppl_seq at the best lr", "accuracy at the best lr",
          "ROUGE-1 (stemmed) at the best lr")


def report(s, runs, tables=None):
    """E1's markdown lines and its tables ({"lr.csv": DataFrame}) from `runs`, the grid joined to
    its results (tables.on_grid)."""
    lrs, seeds = sorted(set(runs.lr)), sorted(set(runs.seed))
    several = len(seeds) > 1
    lines = ["## E1: learning-rate sensitivity", "",
             "Final validation loss per learning rate (" +
             (f"mean ± sd (runs) over seeds {', '.join(map(str, seeds))}; [k c] = k runs collapsed: not below "
              "unigram_ce; [k stopped] = k runs diverged or went non-finite" if several else
              "one run per cell; a run that stopped shows its outcome; (c) = collapsed: not below unigram_ce") +
             "). A stopped run counts as L_init, the mean step-0 training loss. LR sensitivity = mean over the "
             "grid of min(L(η), L_init) − L* (Wortsman et al. 2023)" +
             (", per seed, then mean ± sd over the seeds; L* likewise, with the learning rates it fell at." if several
              else "."), ""]
    measured = measure(runs)
    cells, summary = [], []
    for (ln, dt, wd, depth, precision), m in measured.items():
        bests, sens = m["L*"], m["LR sensitivity"]
        label = short_label(ln, dt, precision, depth)
        summary.append((mean_sd(bests)[0], label))
        where = ", ".join(fmt_num(lr) for lr in sorted(set(m["best lr"])))
        best_cell = (f"{fmt_spread(bests, '.3f') if several else f'{bests[0]:.3f}'} ({where})" if bests else "—")
        sens_cell = ((fmt_spread(sens, ".3f") if several else f"{sens[0]:.3f}") if len(sens) == len(seeds) else
                     "— (not every lr recorded" + (f" for {len(seeds) - len(sens)} of {len(seeds)} seeds)" if several
                                                   else ")"))
        group = m["rows"]
        cells.append([label] + [cell(group[group.lr == lr]) for lr in lrs] + [best_cell, sens_cell])
    lines += table(["configuration"] + [f"lr {fmt_num(lr)}" for lr in lrs] + ["L* (lr)", "LR sensitivity"], cells)
    lr_table = pd.DataFrame([row for m in measured.values() for row in m["lr_rows"]], columns=LR_COLUMNS)
    uni = mean_sd(values(lr_table, "unigram_ce"))[0]
    done = [x for x in summary if x[0] is not None]
    if done and uni is not None:
        best, label = min(done)
        lines += ["", f"Best configuration: {label}, L* = {best:.3f}" + (" (mean over the seeds)" if several else "") +
                  f"; unigram_ce − L* = {uni - best:.3f} nats (unigram_ce {uni:.3f})."]
    if several:
        lines += welch_tests(measured)
    edge = edge_of_stability(lr_table)
    if edge[0] is not None:
        lines += ["", f"Edge of stability (the learning rate of E3): {fmt_num(edge[0])}, {edge[1]}."]
    return lines, {"lr.csv": lr_table}


def edge_of_stability(lr_table):
    """E3's learning rate from E1's runs (stats.edge_of_stability of Pre- and Peri-LN)."""
    results = {}
    for run in lr_table.itertuples():
        results.setdefault((run.ln, run.lr), []).append((run.outcome, finite(run.val_loss)))
    return stats.edge_of_stability(results, ("pre", "peri"))


def at_best_lr(got):
    """At a configuration's best learning rate (the lowest mean final loss of its finished runs
    over the seeds), each finished run's ppl_seq, accuracy and stemmed ROUGE-1."""
    done = finished(got)
    done = done[done.val_loss.notna()]
    if not len(done):
        return {}
    means = done.groupby("lr", sort=True).val_loss.apply(lambda x: mean_sd(x)[0])
    best = done[done.lr == means.idxmin()]
    return {"ppl_seq at the best lr": values(best, "ppl_seq"), "accuracy at the best lr": values(best, "accuracy"),
            "ROUGE-1 (stemmed) at the best lr": values(best, "rouge1_stem")}


def welch_tests(measured):
    """Welch's t-test of each configuration's per-seed L* and LR sensitivity, and of its runs'
    ppl_seq, accuracy and ROUGE-1 at its best learning rate, against those of Peri-LN at its
    smallest Δt (same wd, depth and precision); markdown lines, none without that reference."""
    rows = []
    for (ln, dt, wd, depth, precision), mine in measured.items():
        mine = {quantity: mine[quantity] for quantity in TESTED if quantity in mine}
        peri_dts = [k[1] for k in measured if k[0] == "peri" and k[2:] == (wd, depth, precision)]
        if not peri_dts or (ln, dt) == ("peri", min(peri_dts)):
            continue
        ref = measured[("peri", min(peri_dts), wd, depth, precision)]
        for quantity, xs in mine.items():
            ys = ref.get(quantity, [])
            test = stats.welch(xs, ys)
            spec = ".1f" if quantity.startswith("ppl") else ".3f"
            rows.append([short_label(ln, dt, precision, depth), quantity, fmt_spread(xs, spec),
                         f"{short_label('peri', min(peri_dts), precision, depth)} {fmt_spread(ys, spec)}",
                         "—" if test is None else f"{test[1]:.2g}"])
    if not rows:
        return []
    return ["", "Against Peri-LN at its smallest Δt (Welch's t-test, two-sided, over the seeds; the metrics at "
            "each configuration's own best learning rate, the lowest mean final loss).", ""] + \
        table(["configuration", "quantity", "value", "reference", "p"], rows)


def figure(plt, runs, tables, path):
    """loss_vs_lr.png: final validation loss against peak learning rate, mean ± sd over the seeds
    per configuration; a run that stopped is a cross at its L_init; the baselines as lines."""
    from .figures import COLORS, DT_STYLES, save
    fig, ax = plt.subplots(figsize=(8, 5))
    for (ln, dt, wd, depth, precision), group in groups(runs, ["ln", "dt", "wd", "depth", "precision"]):
        got = recorded(group)
        done = finished(got)
        done = done[done.val_loss.notna()]
        style = dict(color=COLORS[ln], linestyle=DT_STYLES.get(dt, "-."))
        if len(done):
            spread = done.groupby("lr").val_loss.agg(lambda x: mean_sd(x)[:2])
            ax.errorbar(spread.index, [m for m, _ in spread], yerr=[sd or 0 for _, sd in spread], marker="o",
                        markersize=4, capsize=3, label=short_label(ln, dt, precision, depth), **style)
        stopped = got[~got.outcome.isin(FINISHED)]
        if len(stopped):
            ax.plot(stopped.lr, [initial_loss(got)] * len(stopped), linestyle="none", marker="x", markersize=9,
                    color=COLORS[ln])
    for column, color in (("unigram_ce", "gray"), ("bigram_ce", "black")):
        level = mean_sd(values(finished(runs), column))[0]
        if level is not None:
            ax.axhline(level, color=color, linestyle=":", label=f"{column} (baseline)")
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final validation loss (nats per token)")
    ax.set_title(TITLE + "\n(mean ± sd over the seeds; × = a run that stopped, drawn at its initial loss)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    save(fig, path)

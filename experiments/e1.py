"""E1, learning-rate sensitivity and the edge of stability (docs/protocol.md; docs/round2.md, E1):
final validation loss and failure rate against learning rate per configuration; the grid's
extension (upward until every Pre- and Peri-LN configuration fails in most seeds at its largest
learning rate, downward until none has its best learning rate at the smallest); each
configuration's edge (where its failure rate reaches 1/2, bracketed by the grid) and Pre-LN's,
E3's learning rate; per seed L*, its lr and Wortsman et al.'s LR sensitivity, and over several
seeds Welch's t-tests against Peri-LN at its smallest Δt. Writes lr.csv (one row per run) and
the figure loss_vs_lr.png."""
import math

import numpy as np
import pandas as pd

from . import stats
from .collect import FINISHED
from .grid import fmt_num
from .results import finite
from .stats import mean_sd
from .tables import finished, fmt_spread, groups, recorded, short_label, table, values

TITLE = "E1: final validation loss against learning rate"
FILES = ("lr.csv", "loss_vs_lr.png")
LR_COLUMNS = ["ln", "dt", "wd", "depth", "precision", "lr", "seed", "outcome", "failed", "spikes", "max_loss",
              "max_loss_step", "val_loss", "unigram_ce", "bigram_ce", "initial_loss"]
CONFIG = ["ln", "dt", "wd", "depth", "precision"]

# A run fails when it does not end ok (it stopped, or collapsed) or when its final validation loss
# is above unigram_ce − FAIL_SHARE·(unigram_ce − bigram_ce): it did not learn a quarter of what a
# bigram table knows beyond the unigram one (docs/round2.md, *Failure*).
FAIL_SHARE = 0.25
# The grid extends while a configuration of these placements is not bracketed, by half decades,
# within [LR_FLOOR, LR_CEILING].
BRACKETED = ("pre", "peri")
LR_FLOOR, LR_CEILING = 1e-5, 3.0


def failed(rows):
    """Per run (a boolean Series): did it fail (FAIL_SHARE)? A run without both baselines is
    judged by its outcome alone; where bigram_ce is not below unigram_ce (data without bigram
    structure) the margin is 0."""
    margin = (FAIL_SHARE * (rows.unigram_ce - rows.bigram_ce)).clip(lower=0)
    short = (rows.val_loss > rows.unigram_ce - margin) & margin.notna()
    return (rows.outcome != "ok") | short


# A collapse counts as divergence when the run's loss rose at least BLOW_UP nats above its step-0
# loss at some step: it blew up and came back only to the unigram level.
BLOW_UP = 1.0


def ran_away(rows):
    """Per run (a boolean Series): ./train stopped it (diverged or nonfinite), or it ended worse than
    the untrained model (its last training loss, the mean of its last ten logged steps, above its
    step-0 loss ≈ ln V). Claim 6's narrow secondary event."""
    return rows.outcome.isin(["diverged", "nonfinite"]) | (rows.final_train_loss > rows.first_train_loss)


def diverged(rows):
    """Per run (a boolean Series): did it diverge (claim 6's event, docs/protocol.md, *Divergence*)?
    It blew up and never came back to a model that learns: it ran away (ran_away), or it collapsed
    (a final validation loss at or above unigram_ce) after a blow-up, its largest logged loss at
    least BLOW_UP above its step-0 loss. Each part ends in a model that learned nothing beyond token
    frequencies, so no part fires in a run that learns; a blow-up that recovers to a learning model
    is a spike, and a collapse without a blow-up is counted by `broke` only."""
    blew_up = rows.max_loss >= rows.first_train_loss + BLOW_UP
    return ran_away(rows) | ((rows.outcome == "collapsed") & blew_up)


def broke(rows):
    """Per run: claim 6's broad secondary event, diverged or collapsed with or without a blow-up
    (ended at or above unigram_ce: the model died to a unigram predictor)."""
    return diverged(rows) | (rows.outcome == "collapsed")


def learns_at(rows):
    """{lr: does the configuration of `rows` learn there (fewer than half its recorded runs fail)}."""
    got = recorded(rows)
    flags = failed(got)
    return {lr: bool(flags[got.lr == lr].sum() * 2 < (got.lr == lr).sum()) for lr in sorted(set(got.lr))}


def learning_range(runs):
    """The learning rates at which every Pre- and Peri-LN configuration of `runs` learns (learns_at),
    in increasing order: where the fourth round's E1 tests compare them (docs/protocol.md)."""
    configurations = [learns_at(group) for _, group in groups(recorded(runs[runs.ln.isin(BRACKETED)]), CONFIG)]
    if not configurations:
        return []
    return sorted(lr for lr in configurations[0] if all(c.get(lr, False) for c in configurations))


def matched_lrs(runs):
    """The third round's matched learning rates (`--lr-from-rule matched`): the two largest of the
    learning range, in increasing order, with the whole range; ([], range) with fewer than two."""
    common = learning_range(runs)
    return (common[-2:] if len(common) >= 2 else []), common


def amplification(runs, layers):
    """Per finished run with ./eval's layers: the absolute amplification of input noise (the W2
    bound at X_L over the one at X_0) and the relative one (./eval's, divided by the stream's
    growth): `runs` with the columns absolute_amplification and relative_amplification_L."""
    done = finished(runs)
    if layers is None or not len(layers) or not len(done):
        return done.assign(absolute_amplification=math.nan)
    first = layers[layers.layer == 0].set_index("run").w2_bound
    return done.assign(absolute_amplification=done.w2_bound_L / done.run.map(first))


def placement_pairs(runs, layers):
    """Claim 5's pairs: finished Pre- and Peri-LN runs of the same Δt, lr and seed side by side, with
    log_absolute = ln(absolute amplification Pre / Peri) and log_relative likewise (amplification)."""
    got = amplification(runs, layers)
    pairs = got[got.ln == "pre"].merge(got[got.ln == "peri"], on=["dt", "lr", "seed"], suffixes=("_pre", "_peri"))
    return pairs.assign(
        log_absolute=np.log(pairs.absolute_amplification_pre / pairs.absolute_amplification_peri),
        log_relative=np.log(pairs.relative_amplification_L_pre / pairs.relative_amplification_L_peri)
    ).dropna(subset=["log_absolute"])


def dt_pairs(runs):
    """Claim 3's pairs: finished runs of the same placement, lr and seed at the two Δt side by side
    (suffixes _small and _large), with log_mean_abs = ln(mean|X_L| at the larger Δt / at the
    smaller) and log_entry_var likewise."""
    done = finished(runs[runs.ln.isin(BRACKETED)])
    dts = sorted(set(done.dt))
    if len(dts) != 2:
        return done.iloc[0:0].assign(log_mean_abs=[], log_entry_var=[])
    pairs = done[done.dt == dts[0]].merge(done[done.dt == dts[1]], on=["ln", "lr", "seed"],
                                          suffixes=("_small", "_large"))
    return pairs.assign(log_mean_abs=np.log(pairs.mean_abs_L_large / pairs.mean_abs_L_small),
                        log_entry_var=np.log(pairs.entry_var_L_large / pairs.entry_var_L_small))


def divergence_edge(runs):
    """E3's learning rates in the third round (docs/rounds.md, *The third round, pre-registered*):
    over all Pre-LN runs (both Δt), above Pre-LN's best lr, where half of them diverge
    (stats.failure_edge of `diverged`), rounded to two significant digits, and the grid's learning
    rate above it (η_hi, where at least half diverged). ([η_d, η_hi], edge dict), or ([], edge)
    when it is not bracketed."""
    pre = recorded(runs[runs.ln == "pre"])
    best = best_of(pre)
    if best is None:
        return [], None
    flags = diverged(pre)
    edge = dict(stats.failure_edge({lr: list(flags[pre.lr == lr]) for lr in sorted(set(pre.lr))}, best), best=best)
    if edge["edge"] is None:
        return [], edge
    return e3_lrs(edge, sorted(set(pre.lr))), edge


def e3_lrs(edge, grid):
    """[η_d, η_hi] of a bracketed divergence edge, η_d rounded to two significant digits and kept
    off the bracket: rounded onto η_hi, the second lr is the grid's next above η_hi (η_hi itself
    at the grid's end); rounded onto η_lo, η_d moves to the geometric midpoint of η_lo and η_hi."""
    low, high = edge["low"], edge["high"]
    rounded = float(f"{edge['edge']:.2g}")
    if rounded == high:
        above = [lr for lr in grid if lr > high]
        return [high, above[0]] if above else [high]
    if rounded == low:
        rounded = float(f"{math.sqrt(low * high):.2g}")
    return [rounded, high]


NATURAL_COLUMNS = ["quantity", "ln", "dt", "runs", "lrs", "slope", "low", "high", "p"]


def natural_variation(runs, layers):
    """Claim 4 without an intervention (docs/rounds.md, *The third round, pre-registered*): across E1's
    learning rates, per Pre- and Peri-LN configuration over its finished runs, the slope of
    ln(largest block sensitivity) and of ln(largest ‖∂L/∂W_fcproj‖ over the blocks) against
    ln mean|X_L|, with its 95% interval and t-test against 0: whether, where the learning rate made
    the activations large, the sensitivity and the gradients grew with them."""
    done = finished(runs[runs.ln.isin(BRACKETED)])
    if layers is not None and len(layers) and len(done):
        done = done.merge(layers.groupby("run").fcproj_grad_norm.max().rename("max_fcproj_grad_norm"),
                          left_on="run", right_index=True, how="left")
    else:
        done = done.assign(max_fcproj_grad_norm=math.nan)
    rows = []
    for quantity, column in (("max_sensitivity", "sens_mean_max"), ("fcproj_grad_norm", "max_fcproj_grad_norm")):
        for (ln, dt), group in groups(done, ["ln", "dt"]):
            keep = group[(group.mean_abs_L > 0) & (group[column] > 0)]
            fit = stats.ols([[1.0] * len(keep), list(keep.mean_abs_L.apply(math.log))],
                            list(keep[column].apply(math.log))) if len(keep) else None
            if fit is not None:
                slope, low, high = stats.coefficient_ci(fit, 1)
                rows.append(dict(quantity=quantity, ln=ln, dt=dt, runs=len(keep), lrs=len(set(keep.lr)), slope=slope,
                                 low=low, high=high, p=float(fit[2][1])))
    return pd.DataFrame(rows, columns=NATURAL_COLUMNS)


def final_losses(rows, l_init):
    """{lr: final losses of its recorded runs}, a run that stopped counted at L_init."""
    got = recorded(rows)
    loss = got.val_loss.where(got.outcome.isin(FINISHED), l_init).fillna(l_init)
    return {lr: list(loss[got.lr == lr]) for lr in sorted(set(got.lr))}


def best_of(rows):
    """The best learning rate of a set of runs: the lowest mean final loss, a stopped run counted
    at L_init (stats.best_lr); None without recorded runs."""
    got = recorded(rows)
    l_init = initial_loss(got)
    if not len(got) or l_init is None:
        return None
    return stats.best_lr(final_losses(got, l_init))


def edge_of(rows):
    """The failure edge of a set of runs (stats.failure_edge above their best learning rate,
    best_of); None without recorded runs."""
    got = recorded(rows)
    best = best_of(got)
    if best is None:
        return None
    flags = failed(got)
    edge = stats.failure_edge({lr: list(flags[got.lr == lr]) for lr in sorted(set(got.lr))}, best)
    return dict(edge, best=best)


def pre_ln_edge(runs):
    """E3's learning rate: the edge of all Pre-LN runs together (both Δt), where Pre-LN fails in
    half its runs, rounded to two significant digits; with the edge dict. (None, edge) when it is
    not bracketed."""
    edge = edge_of(runs[runs.ln == "pre"])
    if edge is None or edge["edge"] is None:
        return None, edge
    return float(f"{edge['edge']:.2g}"), edge


def next_lr(lr, up):
    """The next learning rate of the half-decade series 1, 3, 10, 30, ... (×3 or ×10/3), up or down."""
    exponent = math.floor(math.log10(lr) + 1e-9)
    mantissa = lr / 10 ** exponent
    if abs(mantissa - 1) < 1e-6:
        return float(f"{(3 * lr if up else lr / (10 / 3)):.1g}")
    if abs(mantissa - 3) < 1e-6:
        return float(f"{(lr * 10 / 3 if up else lr / 3):.1g}")
    return float(f"{lr * math.sqrt(10) ** (1 if up else -1):.2g}")


def extension(runs):
    """The learning rates to add to an E1 grid so that it brackets the edge, and why: one half
    decade above when a Pre- or Peri-LN configuration fails in at most half its recorded runs at
    the largest learning rate (and that is below LR_CEILING), one below when a configuration's
    best learning rate is the smallest (above LR_FLOOR). ([], reasons) once it brackets."""
    lrs = sorted(set(recorded(runs).lr))
    if not lrs:
        return [], []
    top, bottom = lrs[-1], lrs[0]
    add, why = [], []
    for key, group in groups(recorded(runs[runs.ln.isin(BRACKETED)]), CONFIG):
        label = short_label(key[0], key[1], key[4], key[3])
        at_top = group[group.lr == top]
        if failed(at_top).sum() * 2 <= len(at_top):
            why.append(f"{label} fails in {int(failed(at_top).sum())} of {len(at_top)} runs at lr {fmt_num(top)}")
            if top < LR_CEILING and next_lr(top, True) not in add:
                add.append(next_lr(top, True))
        edge = edge_of(group)
        if edge and edge["best"] == bottom:
            why.append(f"{label}'s best lr is the smallest, {fmt_num(bottom)}")
            if bottom > LR_FLOOR and next_lr(bottom, False) not in add:
                add.append(next_lr(bottom, False))
    return sorted(add), why


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
    lrs, seeds = counted_lrs(runs), sorted(set(runs.seed))
    measured = {}
    for key, group in groups(runs, CONFIG):
        ln, dt, wd, depth, precision = key
        got = recorded(group)
        l_init = initial_loss(got)
        if l_init is None:
            continue
        m = dict(rows=group, L_init=l_init, lr_rows=[], **{"L*": [], "best lr": [], "LR sensitivity": []})
        for seed in seeds:
            mine = got[got.seed == seed].sort_values("lr", kind="stable")
            losses = {lr: finite(loss) for lr, loss in zip(mine.lr, mine.val_loss) if lr in lrs}
            m["lr_rows"] += [dict(ln=ln, dt=dt, wd=wd, depth=depth, precision=precision, lr=run.lr, seed=seed,
                                  outcome=run.outcome, failed=bool(fail), spikes=run.spikes, max_loss=run.max_loss,
                                  max_loss_step=run.max_loss_step, val_loss=run.val_loss, unigram_ce=run.unigram_ce,
                                  bigram_ce=run.bigram_ce, initial_loss=l_init)
                             for run, fail in zip(mine.itertuples(), failed(mine))]
            best, best_lr, sensitivity = stats.lr_sensitivity(losses, l_init)
            if best is not None:
                m["L*"].append(best)
                m["best lr"].append(best_lr)
            if sensitivity is not None and len(losses) == len(lrs):
                m["LR sensitivity"].append(sensitivity)
        m.update(at_best_lr(got))
        measured[key] = m
    return measured


def counted_lrs(runs):
    """The learning rates LR sensitivity averages over: the grid's, less those at which every run of
    `runs` is recorded and none finished (a learning rate at which every configuration stops
    measures the grid, not a configuration; docs/rounds.md, *The third round, pre-registered*)."""
    got = recorded(runs)
    return [lr for lr in sorted(set(runs.lr)) if (runs.lr == lr).sum() > (got.lr == lr).sum() or
            len(finished(got[got.lr == lr]))]


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
             "learning rates at which some run finished of min(L(η), L_init) − L* (Wortsman et al. 2023)" +
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
    lines += edge_lines(runs, lrs, getattr(s, "lr_extend", 0))
    if several:
        lines += welch_tests(measured)
    return lines, {"lr.csv": lr_table}


def edge_lines(runs, lrs, extending):
    """The failure rates per learning rate, each configuration's edge, Pre-LN's, the learning range
    and, for a grid that extends itself (`extending`: --lr-extend 1), whether it brackets them."""
    rows, edges = [], []
    for key, group in groups(recorded(runs), CONFIG):
        flags = failed(group)
        rows.append([short_label(key[0], key[1], key[4], key[3])] +
                    [f"{int(flags[group.lr == lr].sum())}/{int((group.lr == lr).sum())}" for lr in lrs])
        edge = edge_of(group)
        edges.append([short_label(key[0], key[1], key[4], key[3]), fmt_num(edge["best"]), edge_text(edge)])
    if not rows:
        return []
    lines = ["", f"Failures per learning rate (failed / runs): a run fails when it does not end ok or ends less than "
             f"{FAIL_SHARE:g}·(unigram_ce − bigram_ce) below unigram_ce.", ""]
    lines += table(["configuration"] + [f"lr {fmt_num(lr)}" for lr in lrs], rows)
    lines += ["", "Edge of stability per configuration: above its best learning rate (lowest mean final loss, a "
              "stopped run at L_init), the learning rate at which half its runs fail, interpolated in ln lr between "
              "the bracketing pair of the grid.", ""]
    lines += table(["configuration", "best lr", "edge (bracketing pair)"], edges)
    lr, edge = pre_ln_edge(runs)
    if edge is not None:
        lines += ["", "Pre-LN, both Δt together, fails in half its runs at " + edge_text(edge) + "."]
    common = learning_range(runs)
    lines += ["", "Every Pre- and Peri-LN configuration learns (fewer than half its runs fail) at " +
              (", ".join(map(fmt_num, common)) or "no learning rate") +
              ": the learning range, where the claims compare them (docs/protocol.md)."]
    if not extending:
        return lines
    add, why = extension(runs)
    lines += ["", "The grid brackets every Pre- and Peri-LN edge." if not why else
              "The grid does not bracket yet: " + "; ".join(why) +
              (f" (next: lr {', '.join(fmt_num(lr) for lr in add)})." if add else " (at the grid's limits).")]
    return lines


def edge_text(edge):
    """"0.017 (0.01–0.03)", or "above 0.3 (not bracketed)"."""
    if edge["edge"] is None:
        return f"above {fmt_num(edge['low'])} (not bracketed: fewer than half fail up to there)"
    return f"{edge['edge']:.2g} ({fmt_num(edge['low'])}–{fmt_num(edge['high'])})"


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
    per configuration (a run that stopped is a cross at its L_init; the baselines as lines), and
    beside it the failure rate against learning rate with each configuration's edge."""
    from .figures import COLORS, DT_STYLES, save
    fig, (ax, rate_ax) = plt.subplots(1, 2, figsize=(13, 5))
    for (ln, dt, wd, depth, precision), group in groups(runs, CONFIG):
        got = recorded(group)
        done = finished(got)
        done = done[done.val_loss.notna()]
        style = dict(color=COLORS[ln], linestyle=DT_STYLES.get(dt, "-."))
        label = short_label(ln, dt, precision, depth)
        if len(done):
            spread = done.groupby("lr").val_loss.agg(lambda x: mean_sd(x)[:2])
            ax.errorbar(spread.index, [m for m, _ in spread], yerr=[sd or 0 for _, sd in spread], marker="o",
                        markersize=4, capsize=3, label=label, **style)
        stopped = got[~got.outcome.isin(FINISHED)]
        if len(stopped):
            ax.plot(stopped.lr, [initial_loss(got)] * len(stopped), linestyle="none", marker="x", markersize=9,
                    color=COLORS[ln])
        if len(got):
            rate = failed(got).groupby(got.lr).mean()
            rate_ax.plot(rate.index, rate.values, marker="o", markersize=4, label=label, **style)
            edge = edge_of(got)
            if edge and edge["edge"] is not None:
                rate_ax.plot([edge["edge"]], [0.5], marker="|", markersize=14, color=COLORS[ln])
    for column, color in (("unigram_ce", "gray"), ("bigram_ce", "black")):
        level = mean_sd(values(finished(runs), column))[0]
        if level is not None:
            ax.axhline(level, color=color, linestyle=":", label=f"{column} (baseline)")
    for a in (ax, rate_ax):
        a.set_xscale("log")
        a.set_xlabel("peak learning rate")
        a.grid(True, which="both", alpha=0.3)
    ax.set_ylabel("final validation loss (nats per token)")
    ax.set_title(TITLE + "\n(mean ± sd over the seeds; × = a run that stopped, drawn at its initial loss)", fontsize=10)
    rate_ax.axhline(0.5, color="gray", linestyle=":")
    rate_ax.set_ylim(-0.05, 1.05)
    rate_ax.set_ylabel("share of runs that failed")
    rate_ax.set_title("Failure rate (| = the edge: half fail, interpolated in ln lr)", fontsize=10)
    rate_ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    save(fig, path)

"""E2, growth of the hidden states with depth, on trained models (docs/experiments.md, "The
protocol"). A run enters a fit only when it trained: its final validation loss is at least GATE
nats below unigram_ce (the others are listed, never fitted). Growth is measured two ways:

- across depth: X_L (mean_abs and entry_var of the last block's output) of the models of depth L
  against L, in logarithms: exponential in L (ln X = α + r·L) against a power of L (ln X = α +
  p·ln L), and both terms at once, whose r says whether there is exponential growth beyond a
  power law (stats.depth_law); at init (step 0) and after training;
- within a run: the profile X_1..X_L of the runs with L ≥ WITHIN_DEPTH against four laws
  (stats.fit_laws: linear, quadratic, power, offset exponential), where the simulation of
  test_stats tells them apart at the noise of real profiles.

After training, per run: Spearman's ρ over the blocks between ‖∂L/∂W_fcproj‖ and the MLP's
hidden RMS, the largest block sensitivity, the amplification of input noise at X_L (absolute:
W2 bound at X_L over W2 bound at X_0; relative: divided by the stream's growth) and the
scale-free gradient ratio; Δt = 0.1 against 1 by sign tests; Pre- against Peri-LN by Welch's
tests; and, with the intervention's table (intervene.py), the response of each checkpoint's
largest block sensitivity to its branch outputs scaled by k. Writes fits.csv (one row per run,
stage and quantity), depth_fits.csv (one row per configuration, stage and quantity) and the
figure growth.png."""
import math

import numpy as np
import pandas as pd

from . import stats
from .collect import FINISHED, RUN_KEYS
from .grid import PLACEMENT_LABEL, fmt_num
from .results import finite
from .tables import fmt_spread, groups, recorded, short_label, table, tally, values

TITLE = "E2: hidden states against layer and depth"
FILES = ("fits.csv", "depth_fits.csv", "growth.png")
STAGES = ("init", "trained")
QUANTITIES = ("mean_abs", "entry_var")
# A run trained when its final validation loss is at least GATE nats below unigram_ce.
GATE = 0.75
# Within-run laws are fitted at L ≥ WITHIN_DEPTH: there the simulation recovers each law in most
# draws at the noise of real profiles (at L = 16 about half of them, at L = 8 hardly any).
WITHIN_DEPTH = 32
FIT_COLUMNS = (RUN_KEYS + ["stage", "quantity", "gated", "first", "last", "winner", "law", "rate_kind", "rate",
                           "delta_aicc", "residual"] + [f"aicc_{law}" for law in stats.LAWS] +
               ["linear_a", "linear_b", "quadratic_a", "quadratic_b", "quadratic_c", "power_a", "power_b", "power_p",
                "exponential_a", "exponential_b", "exponential_r"])
DEPTH_COLUMNS = ["ln", "dt", "lr", "stage", "quantity", "runs", "depths", "r", "r_low", "r_high", "r_p", "p", "p_low",
                 "p_high", "p_linear_p", "p_quadratic_p", "exp_alone_r", "power_alone_p", "aicc_exponential",
                 "aicc_power", "preferred"]
DIAGNOSTIC_COLUMNS = ("run", "ln", "dt", "lr", "precision", "depth", "seed", "gated", "rho", "rho_p", "max_sensitivity",
                      "amplification", "absolute_amplification", "gradient_ratio")


def profiles(sweep_layers):
    """{run name: its rows of a per-layer table, by layer} (empty without the table)."""
    if sweep_layers is None:
        return {}
    return {name: rows.sort_values("layer") for name, rows in sweep_layers.groupby("run", sort=False)}


def gated(rows):
    """Per run (a boolean Series): finished, with a final validation loss at least GATE nats below
    unigram_ce."""
    return rows.outcome.isin(FINISHED) & (rows.val_loss <= rows.unigram_ce - GATE)


def depth_of(run, rows):
    return int(run.depth) if run.depth == run.depth and run.depth else len(rows) - 1


# ---------------------------------------------------------------------------------------------
# Across depth

def last_values(runs, stage_profiles, quantity, only_gated):
    """(depths, X_L) of the recorded runs (only the gated ones when `only_gated`) that have a
    profile."""
    L, X = [], []
    keep = gated(runs) if only_gated else runs.outcome.notna()
    for run in runs[keep].itertuples():
        rows = stage_profiles.get(run.run)
        if rows is not None and len(rows) > 1:
            L.append(depth_of(run, rows))
            X.append(float(rows[quantity].iloc[-1]))
    return L, X


def depth_fit(runs, stage_profiles, stage, quantity):
    """One row of depth_fits.csv for the runs of one configuration: stats.depth_law of X_L against
    L (after training, gated runs only), with r's and p's intervals, r's p against 0 and p's
    against 1 and 2 (linear and quadratic growth of X with L); None with fewer than three depths."""
    L, X = last_values(runs, stage_profiles, quantity, only_gated=stage == "trained")
    law = stats.depth_law(L, X)
    if law is None or law["both"] is None:
        return None
    both = law["both"]
    r, r_low, r_high = stats.coefficient_ci(both, 1)
    p, p_low, p_high = stats.coefficient_ci(both, 2)
    power = law["power"]
    aicc = law["aicc"]
    return dict(stage=stage, quantity=quantity, runs=len(L), depths=" ".join(str(d) for d in sorted(set(L))), r=r,
                r_low=r_low, r_high=r_high, r_p=float(both[2][1]), p=p, p_low=p_low, p_high=p_high,
                p_linear_p=stats.coefficient_test(power, 1, 1.0), p_quadratic_p=stats.coefficient_test(power, 1, 2.0),
                exp_alone_r=float(law["exponential"][0][1]), power_alone_p=float(power[0][1]),
                aicc_exponential=aicc["exponential"], aicc_power=aicc["power"],
                preferred=None if None in aicc.values() else
                "exponential" if aicc["exponential"] < aicc["power"] else "power")


def depth_fits(runs, tables):
    """depth_fits.csv: per configuration (ln, Δt, lr), stage and quantity, depth_fit."""
    stage_profiles = {"init": profiles(tables.init_layers), "trained": profiles(tables.layers)}
    rows = []
    for (ln, dt, lr), group in groups(recorded(runs), ["ln", "dt", "lr"]):
        for stage in STAGES:
            for quantity in QUANTITIES:
                fit = depth_fit(group, stage_profiles[stage], stage, quantity)
                if fit:
                    rows.append(dict(ln=ln, dt=dt, lr=lr, **fit))
    return pd.DataFrame(rows, columns=DEPTH_COLUMNS)


# ---------------------------------------------------------------------------------------------
# Within runs

def fit_row(run, stage, key, y, is_gated):
    """One row of fits.csv: the laws fitted to y at the layers 1..L (X_0 left out, so that a
    first-block jump is not read as growth per layer)."""
    xs, ys = list(range(1, len(y))), y[1:]
    fits, winner = stats.fit_laws(xs, ys)
    aicc = {law: fits[law]["aicc"] for law in fits}
    kind, rate = stats.law_rate(winner, fits[winner]["params"]) if winner else (None, None)
    others = sorted(v for law, v in aicc.items() if v is not None and law != winner)
    return dict({k: getattr(run, k) for k in RUN_KEYS}, stage=stage, quantity=key, gated=bool(is_gated), first=ys[0],
                last=ys[-1], winner=winner, law=stats.law_name(winner, fits[winner]["params"]) if winner else None,
                rate_kind=kind, rate=rate, delta_aicc=others[0] - aicc[winner] if winner and others else None,
                residual=stats.relative_residual(fits, winner, len(ys)),
                **{f"aicc_{law}": aicc.get(law) for law in stats.LAWS},
                **{f"{law}_{p}": v for law in fits for p, v in fits[law]["params"].items()})


def within_fits(runs, tables):
    """fits.csv: every recorded run's profiles at init and (finished runs) after training."""
    stage_profiles = {"init": profiles(tables.init_layers), "trained": profiles(tables.layers)}
    got = recorded(runs)
    rows = []
    for run, is_gated in zip(got.itertuples(), gated(got)):
        for stage in STAGES:
            for key in QUANTITIES:
                layers = stage_profiles[stage].get(run.run)
                y = list(layers[key]) if layers is not None else []
                if len(y) >= 3 and not pd.isna(y).any():
                    rows.append(fit_row(run, stage, key, y, is_gated))
    return pd.DataFrame(rows, columns=FIT_COLUMNS)


def fitted(fits):
    """The fits that count (docs/experiments.md): at init every run, after training the gated
    runs; both at L ≥ WITHIN_DEPTH."""
    return fits[(fits.depth >= WITHIN_DEPTH) & ((fits.stage == "init") | fits.gated.astype(bool))]


# ---------------------------------------------------------------------------------------------
# After training

def diagnostic(run, layers, is_gated):
    """After training, one run: Spearman's ρ over the blocks between ‖∂L/∂W_fcproj‖ and the
    MLP's hidden RMS, the largest block sensitivity, the amplification of input noise at X_L
    (absolute: W2 bound at X_L / at X_0; relative, ./eval's) and the ratio of the scale-free
    gradients at X_0 and X_L."""
    grad, hidden = layers.fcproj_grad_norm[1:], layers.mlp_hidden_rms[1:]
    rho = stats.spearman(grad, hidden) if not (grad.isna().any() or hidden.isna().any()) else None
    g0, gL = finite(layers.grad_norm_scaled.iloc[0]), finite(layers.grad_norm_scaled.iloc[-1])
    w0, wL = finite(layers.w2_bound.iloc[0]), finite(layers.w2_bound.iloc[-1])
    return dict(run=run.run, ln=run.ln, dt=run.dt, lr=run.lr, precision=run.precision, depth=depth_of(run, layers),
                seed=run.seed, gated=bool(is_gated), rho=rho and rho[0], rho_p=rho and rho[1],
                max_sensitivity=finite(layers.sens_mean.max()),
                amplification=finite(layers.relative_amplification.iloc[-1]),
                absolute_amplification=wL / w0 if w0 and wL is not None else None,
                gradient_ratio=g0 / gL if g0 is not None and gL else None)


def diagnostics(runs, tables):
    """diagnostic() of every finished run with ./eval's layers."""
    layers = profiles(tables.layers)
    got = recorded(runs)
    return pd.DataFrame([diagnostic(run, layers[run.run], g) for run, g in zip(got.itertuples(), gated(got))
                         if run.run in layers], columns=list(DIAGNOSTIC_COLUMNS))


def dt_pairs(runs, tables, only_gated=True, keys=("ln", "lr", "depth", "seed")):
    """X_L after training of the same placement, learning rate, depth and seed (`keys`) at the two
    Δt: one row per pair with mean_abs and entry_var at each (columns QUANTITY_small,
    QUANTITY_large)."""
    dts = sorted(set(runs.dt))
    layers = profiles(tables.layers)
    got = recorded(runs)
    rows = []
    for run, is_gated in zip(got.itertuples(), gated(got)):
        if run.run in layers and (is_gated or not only_gated):
            rows.append(dict(ln=run.ln, dt=run.dt, lr=run.lr, depth=depth_of(run, layers[run.run]), seed=run.seed,
                             **{q: float(layers[run.run][q].iloc[-1]) for q in QUANTITIES}))
    frame = pd.DataFrame(rows, columns=["ln", "dt", "lr", "depth", "seed"] + list(QUANTITIES))
    if len(dts) != 2:
        return frame.iloc[0:0]
    return frame[frame.dt == dts[0]].merge(frame[frame.dt == dts[1]], on=list(keys), suffixes=("_small", "_large"))


def ratio_test(small, large):
    """Paired comparison of positive values: how many pairs are smaller in `small`, the sign
    test's p, and the geometric mean of large/small with its t interval (on the logarithms)."""
    small, large = np.asarray(small, dtype=float), np.asarray(large, dtype=float)
    k, n = int((small < large).sum()), len(small)
    logs = np.log(large / small)
    ci = stats.mean_ci(logs)
    return dict(smaller=k, pairs=n, p=stats.sign_test(k, n),
                ratio=math.exp(logs.mean()) if n else None,
                low=math.exp(ci[1]) if ci else None, high=math.exp(ci[2]) if ci else None)


# ---------------------------------------------------------------------------------------------
# Inside deep runs (claims 1 and 2, docs/protocol.md)

DEEP_COLUMNS = ["run", "ln", "dt", "lr", "depth", "seed", "outcome", "gated", "rate", "power_mean", "power_var",
                "rate_early", "rate_late"]


def deep_half(runs, tables):
    """Per finished run with ./eval's layers, over the deep half l ∈ [L/2, L] of its stream after
    training: `rate`, the least-squares slope of ln mean|X_l| against l (an exponential's rate per
    block), and `power_mean`, `power_var`, the slopes of ln mean|X_l| and ln entry_var_l against ln l
    (the local powers of l that a linear and a quadratic law keep at or below 1 and 2); `rate_early`
    and `rate_late`, the rate over the quarters l ∈ [L/2, 3L/4] and [3L/4, L] (equal for an
    exponential)."""
    layers = profiles(tables.layers)
    got = recorded(runs)
    rows = []
    for run, is_gated in zip(got.itertuples(), gated(got)):
        mine = layers.get(run.run)
        if mine is None or run.outcome not in FINISHED:
            continue
        depth = depth_of(run, mine)
        deep = mine[(mine.layer >= depth / 2) & (mine.layer <= depth)]
        l = deep.layer.to_numpy(dtype=float)
        if len(l) < 3 or (deep.mean_abs <= 0).any() or (deep.entry_var <= 0).any():
            continue
        mean, var = np.log(deep.mean_abs.to_numpy(dtype=float)), np.log(deep.entry_var.to_numpy(dtype=float))
        rows.append(dict(run=run.run, ln=run.ln, dt=run.dt, lr=run.lr, depth=depth, seed=run.seed,
                         outcome=run.outcome, gated=bool(is_gated), rate=float(np.polyfit(l, mean, 1)[0]),
                         power_mean=float(np.polyfit(np.log(l), mean, 1)[0]),
                         power_var=float(np.polyfit(np.log(l), var, 1)[0]),
                         rate_early=float(np.polyfit(l[l <= 0.75 * depth], mean[l <= 0.75 * depth], 1)[0]),
                         rate_late=float(np.polyfit(l[l >= 0.75 * depth], mean[l >= 0.75 * depth], 1)[0])))
    return pd.DataFrame(rows, columns=DEEP_COLUMNS)


# ---------------------------------------------------------------------------------------------
# The intervention (intervene.py)

SLOPE_COLUMNS = ["run", "ln", "dt", "lr", "depth", "seed", "slope", "slope_deep", "at_block_1"]


def intervention_slopes(intervention, runs):
    """Per intervened checkpoint of a gated run: the slope of ln(largest block sensitivity) against
    ln k over the k evaluated (1 means: the sensitivity grows in proportion to the branch
    outputs, 0: it does not move), the same over blocks 2..L (slope_deep), and the share of the
    k at which block 1 is the most sensitive."""
    if intervention is None or not len(intervention):
        return pd.DataFrame(columns=SLOPE_COLUMNS)
    got = recorded(runs)
    keep, lrs = set(got[gated(got)].run), dict(zip(got.run, got.lr))
    rows = []
    for name, mine in intervention[intervention.run.isin(keep)].groupby("run", sort=False):
        per_k = mine.groupby("k")
        top = per_k.sens_mean.max()
        deep = mine[mine.layer >= 2].groupby("k").sens_mean.max()
        first = mine.iloc[0]
        if len(top) < 2 or (top <= 0).any():
            continue
        slope = stats.ols([np.ones(len(top)), np.log(top.index)], np.log(top.values))
        slope_deep = (stats.ols([np.ones(len(deep)), np.log(deep.index)], np.log(deep.values))
                      if len(deep) == len(top) and (deep > 0).all() else None)
        at_first = per_k.apply(lambda rows: rows.sort_values("sens_mean").layer.iloc[-1] == 1).mean()
        rows.append(dict(run=name, ln=first["ln"], dt=first["dt"], lr=lrs[name], depth=int(mine.layer.max()), seed=first["seed"],
                         slope=float(slope[0][1]) if slope else None,
                         slope_deep=float(slope_deep[0][1]) if slope_deep else None, at_block_1=float(at_first)))
    return pd.DataFrame(rows, columns=SLOPE_COLUMNS)


# ---------------------------------------------------------------------------------------------
# The report

def lr_label(ln, dt, lr):
    """"Pre-LN Δt=1 lr=0.001": E2's configurations are placement, Δt and learning rate."""
    return f"{short_label(ln, dt)} lr={fmt_num(lr)}"


def number(v, spec=".3g"):
    return "—" if v is None or v != v else format(v, spec)


def interval(v, low, high, spec=".3g"):
    return f"{number(v, spec)} ({number(low, spec)}, {number(high, spec)})"


def report(s, runs, tables):
    """E2's markdown lines and tables ({"fits.csv", "depth_fits.csv"}) from `runs` (the grid joined
    to its results, tables.on_grid) and the sweep's per-layer tables after training and at step 0
    (and the intervention's, when it ran)."""
    got = recorded(runs)
    lines = ["## E2: growth of the hidden states with depth", ""]
    lines += training_lines(got)
    across = depth_fits(runs, tables)
    lines += ["", "### Across depth", "",
              "X_L of the models of depth L against L, one point per run (after training the gated runs only), fitted "
              "in logarithms with both terms, ln X_L = α + r·L + p·ln L: r > 0 is growth exponential in L beyond a "
              "power of L. Beside it the power law alone (ln X_L = α + p·ln L: p is the power of L; its tests against "
              "p = 1 and p = 2, linear and quadratic growth) and which of the two-coefficient laws (exponential in L, "
              "power of L) has the lower AICc. Intervals are 95%.", ""]
    lines += table(["configuration", "stage", "quantity", "runs", "depths", "r (both terms)", "p of r = 0",
                    "p alone", "p of p = 1", "p of p = 2", "preferred"],
                   [[lr_label(f.ln, f.dt, f.lr), f.stage, f.quantity, f.runs, f.depths, interval(f.r, f.r_low, f.r_high),
                     number(f.r_p, ".2g"), f"{number(f.power_alone_p)}", number(f.p_linear_p, ".2g"),
                     number(f.p_quadratic_p, ".2g"), f.preferred or "— (too few runs)"] for f in across.itertuples()])
    fits = within_fits(runs, tables)
    lines += within_lines(fits)
    lines += pair_lines(runs, tables)
    diag = diagnostics(runs, tables)
    lines += diagnostic_lines(diag)
    lines += intervention_lines(intervention_slopes(tables.intervention, runs))
    return lines, {"fits.csv": fits, "depth_fits.csv": across}


def training_lines(got):
    """Per configuration and depth: its learning rate, how many runs passed the gate, the final
    loss; then the runs that did not."""
    rows = []
    for (ln, dt, depth, lr), group in groups(got, ["ln", "dt", "depth", "lr"]):
        passed = gated(group)
        rows.append([short_label(ln, dt), depth, fmt_num(lr), f"{int(passed.sum())}/{len(group)}",
                     fmt_spread(values(group[group.outcome.isin(FINISHED)], "val_loss"), ".3f"),
                     fmt_spread(list(group.val_loss - group.unigram_ce), ".3f")])
    lines = [f"Training: a run enters the fits after training when its final validation loss is at least {GATE:g} "
             "nats below unigram_ce (gated); the others are listed and never fitted.", ""]
    lines += table(["configuration", "L", "lr", "gated", "val loss", "val − unigram"], rows)
    missed = got[~gated(got)]
    if len(missed):
        lines += ["", f"Not gated ({len(missed)}): " + ", ".join(
            f"{r.run} ({r.outcome}" + (f", {r.val_loss - r.unigram_ce:+.3f}" if r.val_loss == r.val_loss else "") + ")"
            for r in missed.itertuples())]
    return lines


def within_lines(fits):
    """Per configuration, depth, stage and quantity: how often each law wins (a quadratic named by
    its curvature's sign, a power by p against 1, an exponential growing or saturating), clear wins
    (ΔAICc ≥ 2) apart, at L ≥ WITHIN_DEPTH."""
    counted = fitted(fits)
    rows = []
    for (ln, dt, lr, depth, stage, key), group in groups(counted, ["ln", "dt", "lr", "depth", "stage", "quantity"]):
        won = group[group.winner.notna()]
        clear = won[won.delta_aicc >= 2]
        rows.append([lr_label(ln, dt, lr), depth, stage, key, fmt_spread(values(group, "last")),
                     tally(won.law) or "—", tally(clear.law) or "—", number(group.residual.median(), ".2g")])
    lines = ["", "### Within runs", "",
             f"The profile X_1..X_L of each run with L ≥ {WITHIN_DEPTH} (at init every run, after training the gated "
             "ones) against four laws by AICc on relative residuals (linear; quadratic; power a + b·i^p; offset "
             "exponential a + b·e^(r·i)), named by shape; clear = ΔAICc ≥ 2; residual = the winner's RMS relative "
             "residual (median). Every fit, at every depth: fits.csv.", ""]
    return lines + table(["configuration", "L", "stage", "quantity", "X_L", "winners", "clear wins", "residual"], rows)


def pair_lines(runs, tables):
    """Δt = small against large: X_L of the gated pairs, sign test and geometric mean ratio."""
    pairs = dt_pairs(runs, tables)
    dts = sorted(set(runs.dt))
    if len(dts) != 2 or not len(pairs):
        return []
    rows = []
    for key in QUANTITIES:
        for placement in sorted(set(pairs.ln)) + ["all"]:
            mine = pairs[(pairs.ln == placement) | (placement == "all")]
            t = ratio_test(mine[f"{key}_small"], mine[f"{key}_large"])
            rows.append([key, PLACEMENT_LABEL.get(placement, placement), f"{t['smaller']} of {t['pairs']}",
                         number(t["p"], ".2g"), interval(t["ratio"], t["low"], t["high"])])
    return ["", f"### Δt = {fmt_num(dts[0])} against Δt = {fmt_num(dts[1])}", "",
            f"X_L after training of the same placement, learning rate, depth and seed, both runs gated: pairs in which Δt = "
            f"{fmt_num(dts[0])} gives the smaller value, the two-sided sign test, and the geometric mean of "
            "X_L(large Δt) / X_L(small Δt) with its 95% interval.", ""] + \
        table(["quantity", "placement", f"smaller with Δt = {fmt_num(dts[0])}", "sign test p", "ratio (95% CI)"], rows)


def diagnostic_lines(diag):
    """After training, over the seeds of the gated runs: ρ, the largest block sensitivity and the
    noise amplification; Pre- against Peri-LN at the same Δt and depth (Welch)."""
    if not len(diag):
        return []
    mine = diag[diag.gated]
    lines = ["", "### After training", "",
             "Gated runs, over the seeds: Spearman's ρ over the blocks between ‖∂L/∂W_fcproj‖ and the RMS of that "
             "MLP's hidden activation (significant + / − at p < 0.05), the largest block sensitivity (mean ‖J v‖), "
             "the amplification of noise on X_0 at X_L: absolute (W2 bound at X_L / at X_0) and relative (divided by "
             "the stream's growth, RMS(X_L)/RMS(X_0)). Per run: fits.csv and results.csv.", ""]
    by_config = dict(groups(mine, ["ln", "dt", "lr", "depth"]))
    rows = []
    for (ln, dt, lr, depth), group in by_config.items():
        significant = group[group.rho_p < 0.05]
        rows.append([lr_label(ln, dt, lr), depth, fmt_spread(values(group, "rho"), ".2f"),
                     f"{int((significant.rho > 0).sum())} / {int((significant.rho < 0).sum())}",
                     fmt_spread(values(group, "max_sensitivity")), fmt_spread(values(group, "absolute_amplification")),
                     fmt_spread(values(group, "amplification"))])
    lines += table(["configuration", "L", "ρ(grad W_fcproj, hidden RMS)", "significant + / −", "max block sensitivity",
                    "absolute amplification X_L", "relative amplification X_L"], rows)
    rows = []
    for (ln, dt, lr, depth), pre in by_config.items():
        peri = by_config.get(("peri", dt, lr, depth))
        if ln != "pre" or peri is None:
            continue
        for key in ("max_sensitivity", "absolute_amplification", "amplification"):
            test = stats.welch(values(pre, key), values(peri, key))
            rows.append([fmt_num(dt), fmt_num(lr), depth, key.replace("_", " "), fmt_spread(values(pre, key)),
                         fmt_spread(values(peri, key)), "—" if test is None else f"{test[1]:.2g}"])
    if rows:
        lines += ["", "Pre-LN against Peri-LN at the same Δt, learning rate and depth (Welch's t-test, two-sided).", ""]
        lines += table(["Δt", "lr", "L", "quantity", "Pre-LN", "Peri-LN", "p"], rows)
    return lines


def intervention_lines(slopes):
    if not len(slopes):
        return []
    rows = []
    for (ln, dt, lr, depth), group in groups(slopes, ["ln", "dt", "lr", "depth"]):
        rows.append([lr_label(ln, dt, lr), depth, fmt_spread(values(group, "slope"), ".2f"),
                     fmt_spread(values(group, "slope_deep"), ".2f"), fmt_spread(values(group, "at_block_1"), ".2f")])
    return ["", "### Intervention: the branch outputs scaled by k", "",
            "Each gated checkpoint with the output projections of its attention and MLP (weights and biases) scaled "
            "by k, the block sensitivity measured again (intervention.csv): the slope of ln(largest block "
            "sensitivity) against ln k (1 = in proportion to the branch outputs, 0 = unmoved), the same over blocks "
            "2..L, and the share of the k at which block 1 is the most sensitive.", ""] + \
        table(["configuration", "L", "slope", "slope, blocks 2..L", "block 1 largest"], rows)


def figure(plt, runs, tables, path):
    """growth.png: mean_abs and entry_var against layer at init and after training (every run, the
    deeper models darker; after training the gated runs), and X_L against the depth L."""
    from .figures import COLORS, DT_STYLES, plain_log_axis, save
    stage_profiles = {"init": profiles(tables.init_layers), "trained": profiles(tables.layers)}
    got = recorded(runs)
    depths = sorted({int(d) for d in got.depth if d == d and d})
    fig, axes = plt.subplots(2, 3, figsize=(16, 8))
    labelled = set()
    for col, key in enumerate(QUANTITIES):
        for row, stage in enumerate(STAGES):
            ax, depth_ax = axes[row][col], axes[row][2]
            keep = got if stage == "init" else got[gated(got)]
            for run in keep.itertuples():
                rows = stage_profiles[stage].get(run.run)
                if rows is None or (rows[key] <= 0).any():
                    continue
                label = short_label(run.ln, run.dt)
                alpha = 0.35 + 0.65 * (depths.index(run.depth) + 1) / len(depths) if run.depth in depths else 1
                ax.plot(rows.layer, rows[key], color=COLORS[run.ln], linestyle=DT_STYLES.get(run.dt, "-."), alpha=alpha,
                        linewidth=1.1, label=None if label in labelled else label)
                labelled.add(label)
            plain_log_axis(ax)
            ax.set_xlabel("layer i (0 = embedding output, i = output of block i)")
            ax.set_ylabel(f"{key} of X_i (log scale)")
            ax.set_title(f"{key} {'at initialisation (step 0)' if stage == 'init' else 'after training (gated runs)'}",
                         fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            if key == "mean_abs":
                for (ln, dt), group in groups(got, ["ln", "dt"]):
                    L, X = last_values(group, stage_profiles[stage], key, only_gated=stage == "trained")
                    if L:
                        depth_ax.plot(L, X, linestyle="none", marker="o", markersize=4, color=COLORS[ln],
                                      fillstyle="full" if dt == 1 else "none", label=short_label(ln, dt))
                depth_ax.set_xscale("log")
                depth_ax.set_xticks(depths, [str(d) for d in depths])  # the depths run, in plain numbers
                depth_ax.set_xticks([], minor=True)
                plain_log_axis(depth_ax)
                depth_ax.set_xlabel("depth L")
                depth_ax.set_ylabel("mean_abs of X_L (log scale)")
                depth_ax.set_title(f"X_L against depth, {'at init' if stage == 'init' else 'after training'}",
                                   fontsize=10)
                depth_ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    axes[0][2].legend(fontsize=8)
    fig.suptitle(f"{TITLE}; L ∈ {{{', '.join(map(str, depths))}}} (fainter = shallower)", fontsize=11)
    fig.tight_layout()
    save(fig, path)

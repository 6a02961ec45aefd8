"""E2, growth inside deep runs (docs/protocol.md, *The design*): Pre- and Peri-LN at Δt = 1, two
learning rates, L = 64 and 128, no intervention. The primary measure is inside each run: over the
deep half l ∈ [L/2, L] of its stream after training, the rate of ln mean|X_l| per block and the
local powers of l (deep_half; claims 1 and 2). The report gives every finished run's rate and
powers (deep.csv), their mean ± sd per configuration, each placement's rate as L doubles (an
exponential keeps its rate per block, a power of l halves it) and Pre- against Peri-LN per
learning rate and depth.

The secondaries: the profile X_1..X_L of each run against four laws (stats.fit_laws: linear,
quadratic, power, offset exponential; fits.csv), counted at L ≥ WITHIN_DEPTH, where the
simulation of test_stats tells them apart at the noise of real profiles; after training, per run,
Spearman's ρ over the blocks between ‖∂L/∂W_fcproj‖ and the MLP's hidden RMS, the largest block
sensitivity, the amplification of input noise at X_L (absolute: W2 bound at X_L over W2 bound at
X_0; relative: divided by the stream's growth) and the scale-free gradient ratio, Pre- against
Peri-LN by Welch's tests; and, where a sweep ran the intervention (sweep.py --intervene 1,
intervene.py; the presets do not), the response of each checkpoint's largest block sensitivity to
its branch outputs scaled by k. The fits after training and the diagnostics keep to the runs that
trained (`gated`: a final validation loss at least GATE nats below unigram_ce); the deep half
takes every finished run and marks the gated ones.

The third round's across-depth fits (X_L against L at five depths, depth_fits.csv) and its Δt
pairs are gone with its design: two depths cannot tell e^{r·L} from a power of L, and E2 runs one
Δt. Writes deep.csv (one row per finished run), fits.csv (one row per run, stage and quantity)
and the figure growth.png."""
import numpy as np
import pandas as pd

from . import stats
from .collect import FINISHED, RUN_KEYS
from .grid import fmt_num
from .primary import KEPT_RATE
from .results import finite
from .tables import fmt_spread, groups, recorded, short_label, table, tally, values

TITLE = "E2: growth of the hidden states inside deep runs"
FILES = ("deep.csv", "fits.csv", "growth.png")
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
DIAGNOSTIC_COLUMNS = ("run", "ln", "dt", "lr", "precision", "depth", "seed", "gated", "rho", "rho_p", "max_sensitivity",
                      "amplification", "absolute_amplification", "gradient_ratio")
# deep.csv's measures, and their words in the report.
DEEP_MEASURES = {"rate": "rate of ln mean\\|X_l\\| per block", "power_mean": "power of l, mean\\|X_l\\|",
                 "power_var": "power of l, entry_var"}


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
    """The fits that count (docs/round2.md, E2): at init every run, after training the gated
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
    """E2's markdown lines and tables ({"deep.csv", "fits.csv"}) from `runs` (the grid joined to
    its results, tables.on_grid) and the sweep's per-layer tables after training and at step 0
    (and the intervention's, when it ran)."""
    got = recorded(runs)
    lines = ["## E2: growth of the hidden states inside deep runs", ""]
    lines += training_lines(got)
    deep = deep_half(runs, tables)
    lines += deep_lines(deep, got)
    lines += doubling_lines(deep)
    lines += placement_lines(deep)
    fits = within_fits(runs, tables)
    lines += within_lines(fits)
    lines += diagnostic_lines(diagnostics(runs, tables))
    lines += intervention_lines(intervention_slopes(tables.intervention, runs))
    return lines, {"deep.csv": deep, "fits.csv": fits}


def training_lines(got):
    """Per configuration and depth: its learning rate, how many runs passed the gate, the final
    loss; then the runs that did not."""
    rows = []
    for (ln, dt, depth, lr), group in groups(got, ["ln", "dt", "depth", "lr"]):
        passed = gated(group)
        rows.append([short_label(ln, dt), depth, fmt_num(lr), f"{int(passed.sum())}/{len(group)}",
                     fmt_spread(values(group[group.outcome.isin(FINISHED)], "val_loss"), ".3f"),
                     fmt_spread(list(group.val_loss - group.unigram_ce), ".3f")])
    lines = [f"Training: a run is gated when its final validation loss is at least {GATE:g} nats below unigram_ce; "
             "the deep half takes every finished run, the law fits after training and the diagnostics the gated ones. "
             "Loss over the finished runs.", ""]
    lines += table(["configuration", "L", "lr", "gated", "val loss", "val − unigram"], rows)
    missed = got[~gated(got)]
    if len(missed):
        lines += ["", f"Not gated ({len(missed)}): " + ", ".join(
            f"{r.run} ({r.outcome}" + (f", {r.val_loss - r.unigram_ce:+.3f}" if r.val_loss == r.val_loss else "") + ")"
            for r in missed.itertuples())]
    return lines


def deep_lines(deep, got):
    """Per configuration (placement, Δt, lr, L): the deep half's rate and powers, mean ± sd (n) over
    its finished runs (all of them, and the gated ones)."""
    rows = []
    for (ln, dt, lr, depth), group in groups(deep, ["ln", "dt", "lr", "depth"]):
        ran = got[(got.ln == ln) & (got.dt == dt) & (got.lr == lr) & (got.depth == depth)]
        rows.append([lr_label(ln, dt, lr), depth, f"{len(group)}/{len(ran)}"] +
                    [fmt_spread(values(group, m), ".3g") for m in DEEP_MEASURES] +
                    [fmt_spread(values(group[group.gated], "rate"), ".3g")])
    lines = ["", "### Inside deep runs", "",
             "Per finished run, over the deep half l ∈ [L/2, L] of its stream after training: the rate r of ln "
             "mean\\|X_l\\| per block (least squares on l: an exponential e^{r·l} has rate r at every depth) and the "
             "local powers of l (least squares of ln mean\\|X_l\\| and ln entry_var_l on ln l: linear growth has "
             "power 1 for mean\\|X_l\\| and 2 for entry_var). Mean ± sd (n) over every finished run of the "
             "configuration, and the rate over its gated runs alone. Every run: deep.csv.", ""]
    if not rows:
        return lines + ["No finished run with a profile of at least three blocks in its deep half."]
    return lines + table(["configuration", "L", "finished / runs"] + list(DEEP_MEASURES.values()) +
                         ["rate, gated runs"], rows)


def doubling_lines(deep):
    """Per placement, Δt and lr, at each pair of depths L and 2L: the mean rate at both, their ratio,
    and the mean rate at 2L − KEPT_RATE·(mean rate at L) with its Welch–Satterthwaite interval and
    p (stats.combined_means; primary.deep_growth's second part, per lr)."""
    rows = []
    for (ln, dt, lr), group in groups(deep, ["ln", "dt", "lr"]):
        depths = sorted(set(group.depth))
        for short, long in [(d, 2 * d) for d in depths if 2 * d in depths]:
            at_short, at_long = group[group.depth == short].rate, group[group.depth == long].rate
            kept = stats.combined_means([(1.0, at_long), (-KEPT_RATE, at_short)])
            ratio = at_long.mean() / at_short.mean() if len(at_short) and at_short.mean() else None
            rows.append([lr_label(ln, dt, lr), f"{short} → {long}", fmt_spread(list(at_short), ".3g"),
                         fmt_spread(list(at_long), ".3g"), number(ratio),
                         "—" if kept is None else interval(*kept[:3]), "—" if kept is None else number(kept[3], ".2g")])
    if not rows:
        return []
    return ["", "### The rate as L doubles", "",
            f"Per placement and learning rate, the deep-half rate at L and at 2L: an exponential in l keeps its rate "
            f"(ratio 1), a power of l (linear growth too) halves it (ratio ½). The test is of the mean rate at 2L − "
            f"{KEPT_RATE:g}·the mean rate at L, half way between (positive: closer to an exponential), with its 95% "
            "interval (Welch–Satterthwaite) and two-sided p; claim 1 takes Pre-LN's, the learning rates averaged "
            "(docs/protocol.md).", ""] + \
        table(["configuration", "L", "rate at L", "rate at 2L", "ratio", f"2L − {KEPT_RATE:g}·L (95% CI)", "p"], rows)


def placement_lines(deep):
    """Pre- against Peri-LN at the same Δt, lr and depth: the difference of the mean deep-half rates
    and powers with Welch's interval and p."""
    rows = []
    by_config = dict(groups(deep, ["ln", "dt", "lr", "depth"]))
    for (ln, dt, lr, depth), pre in by_config.items():
        peri = by_config.get(("peri", dt, lr, depth))
        if ln != "pre" or peri is None:
            continue
        for measure, words in DEEP_MEASURES.items():
            found, test = stats.welch_ci(pre[measure], peri[measure]), stats.welch(pre[measure], peri[measure])
            rows.append([fmt_num(dt), fmt_num(lr), depth, words, "—" if found is None else interval(*found),
                         "—" if test is None else number(test[1], ".2g")])
    if not rows:
        return []
    return ["", "Pre-LN − Peri-LN at the same Δt, learning rate and depth: the difference of the means over the "
            "finished runs with Welch's 95% interval and two-sided p (claim 1 fits the rate's difference within "
            "the (lr, L) cells at once, docs/protocol.md).", ""] + \
        table(["Δt", "lr", "L", "measure", "Pre − Peri (95% CI)", "p"], rows)


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
    lines = ["", "### Within runs: laws of the whole profile", "",
             f"The profile X_1..X_L of each run with L ≥ {WITHIN_DEPTH} (at init every run, after training the gated "
             "ones) against four laws by AICc on relative residuals (linear; quadratic; power a + b·i^p; offset "
             "exponential a + b·e^(r·i)), named by shape; clear = ΔAICc ≥ 2; residual = the winner's RMS relative "
             "residual (median). Every fit, at every depth: fits.csv.", ""]
    return lines + table(["configuration", "L", "stage", "quantity", "X_L", "winners", "clear wins", "residual"], rows)


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
    """growth.png: mean|X_l| of every finished run after training against l, on a log scale (the
    slope is the rate of ln mean|X_l|), one panel per depth (rows) and learning rate (columns):
    the placements coloured (Δt by the line's dash), the deep half l ∈ [L/2, L] shaded, a run that
    missed the gate fainter; each legend entry with its configuration's mean deep-half rate."""
    import matplotlib
    from .figures import COLORS, DT_STYLES, plain_log_axis, save
    layers = profiles(tables.layers)
    done = recorded(runs)
    done = done[done.outcome.isin(FINISHED)]
    deep = deep_half(runs, tables)
    panels = {}
    for run, is_gated in zip(done.itertuples(), gated(done)):
        rows = layers.get(run.run)
        if rows is not None and (rows.mean_abs > 0).all():
            panels.setdefault((depth_of(run, rows), run.lr), []).append((run, rows, is_gated))
    depths, lrs = sorted({d for d, _ in panels}) or [None], sorted({lr for _, lr in panels}) or [None]
    fig, axes = plt.subplots(len(depths), len(lrs), figsize=(5.6 * len(lrs), 3.9 * len(depths)), squeeze=False,
                             sharey=True)
    for (depth, lr), mine in panels.items():
        ax = axes[depths.index(depth)][lrs.index(lr)]
        ax.axvspan(depth / 2, depth, color="0.9", zorder=0)
        for run, rows, is_gated in mine:
            ax.plot(rows.layer, rows.mean_abs, color=COLORS[run.ln], linestyle=DT_STYLES.get(run.dt, "-."),
                    linewidth=0.9, alpha=0.8 if is_gated else 0.3)
        handles = [matplotlib.patches.Patch(color="0.9", label="deep half, l ∈ [L/2, L]")]
        for (ln, dt), group in groups(deep[(deep.depth == depth) & (deep.lr == lr)], ["ln", "dt"]):
            mean, sd, n = stats.mean_sd(group.rate)
            handles.append(matplotlib.lines.Line2D(
                [], [], color=COLORS[ln], linestyle=DT_STYLES.get(dt, "-."),
                label=f"{short_label(ln, dt)}: rate {mean:.3g}" + (f" ± {sd:.2g}" if sd is not None else "") +
                      f" per block ({n} runs)"))
        ax.legend(handles=handles, fontsize=7.5, loc="upper left")
        ax.set_title(f"L = {depth}, lr {fmt_num(lr)}", fontsize=10)
        ax.set_xlim(0, depth)
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("layer l (0 = embedding output, l = output of block l)")
    for row in axes:
        row[0].set_ylabel("mean|X_l| (log scale)")
    if panels:
        plain_log_axis(axes[0][0])  # the panels share y: one call sets every panel
    else:
        axes[0][0].text(0.5, 0.5, "no finished run with ./eval's layers", ha="center", transform=axes[0][0].transAxes)
    fig.suptitle(f"{TITLE}: every finished run after training (fainter: missed the gate, {GATE:g} nats below "
                 "unigram_ce)", fontsize=11)
    fig.tight_layout()
    save(fig, path)

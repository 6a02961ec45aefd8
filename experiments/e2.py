"""E2, growth of the hidden states with depth (docs/experiments.md, "The protocol"): linear,
quadratic and exponential laws fitted to mean_abs and entry_var of X_1..X_L of every run, at
init (init_layers) and after training (layers), compared by AICc; after training Spearman's ρ
between ‖∂L/∂W_fcproj‖ and the MLP's hidden RMS over the blocks, the largest block
sensitivity, the relative noise amplification and the scale-free gradient ratio; over the
seeds the laws' wins, the sign test of Δt and Welch's tests of Pre- against Peri-LN. Writes
fits.csv (one row per run, stage and quantity) and the figure growth.png."""
import pandas as pd

from . import stats
from .collect import RUN_KEYS
from .grid import PLACEMENT_LABEL, fmt_num
from .results import finite
from .tables import fmt_spread, groups, recorded, short_label, table, tally, values

TITLE = "E2: hidden states against layer"
FILES = ("fits.csv", "growth.png")
STAGES = ("init", "trained")
QUANTITIES = ("mean_abs", "entry_var")
FIT_COLUMNS = (RUN_KEYS + ["stage", "quantity", "first", "last", "winner", "rate_kind", "rate", "delta_aicc"] +
               [f"aicc_{law}" for law in stats.LAWS] +
               ["linear_a", "linear_b", "quadratic_a", "quadratic_b", "quadratic_c", "exponential_a", "exponential_r"])


def profiles(sweep_layers):
    """{run name: its rows of a per-layer table, by layer} (empty without the table)."""
    if sweep_layers is None:
        return {}
    return {name: rows.sort_values("layer") for name, rows in sweep_layers.groupby("run", sort=False)}


def report(s, runs, tables):
    """E2's markdown lines and tables ({"fits.csv": DataFrame}) from `runs` (the grid joined to
    its results, tables.on_grid) and the sweep's per-layer tables after training and at step 0."""
    stage_profiles = {"init": profiles(tables.init_layers), "trained": profiles(tables.layers)}
    got = recorded(runs)
    fits, fit_lines = [], []
    for run in got.itertuples():
        for stage in STAGES:
            for key in QUANTITIES:
                rows = stage_profiles[stage].get(run.run)
                y = list(rows[key]) if rows is not None else []
                if len(y) < 3 or pd.isna(y).any():
                    continue
                row = fit_row(run, stage, key, y)
                fits.append(row)
                fit_lines.append(fit_cells(run, row, len(y) - 1))
    lines = ["## E2: growth of the hidden states with depth", "",
             "Fits over the layers i = 1..L of one run each (least squares; AICc, lower is better; a law with too "
             "few points for AICc is not compared). Rate: slope per layer (linear), curvature (quadratic) or factor "
             "per layer e^r (exponential). ΔAICc = the runner-up's AICc minus the winner's; below 2 (marked ≈) "
             "no law is clearly better than the next.", ""]
    lines += table(["configuration", "L", "stage", "quantity", "X_1 → X_L", "winner", "rate", "ΔAICc",
                    "AICc lin / quad / exp"], fit_lines)
    diagnostics = [diagnostic(run, stage_profiles["trained"][run.run]) for run in got.itertuples()
                   if run.run in stage_profiles["trained"]]
    num = lambda v, f: "—" if v is None else format(v, f)
    lines += ["", "After training, per run: Spearman's ρ (and p) between ‖∂L/∂W_fcproj‖ and the RMS of that MLP's "
              "hidden activation over the blocks (does the gradient grow with the activation?), the largest block "
              "sensitivity (mean ‖J v‖ over directions), the relative amplification of input noise at X_L "
              "((W2 bound / RMS(X_L)) / (σ / RMS(X_0))) and the scale-free gradient ratio "
              "‖∂L/∂X_0‖·RMS(X_0) / ‖∂L/∂X_L‖·RMS(X_L).", ""]
    lines += table(["configuration", "L", "ρ(grad W_fcproj, hidden RMS)", "p", "max block sensitivity",
                    "relative amplification X_L", "scale-free gradient X_0 / X_L"],
                   [[f"{short_label(d['ln'], d['dt'], d['precision'])} (seed {d['seed']})", d["depth"],
                     num(d["rho"], ".2f"), num(d["rho_p"], ".2g"), num(d["max_sensitivity"], ".3g"),
                     num(d["amplification"], ".3g"), num(d["gradient_ratio"], ".3g")] for d in diagnostics])
    fits = pd.DataFrame(fits, columns=FIT_COLUMNS)
    lines += over_seeds(fits, pd.DataFrame(diagnostics, columns=list(DIAGNOSTIC_COLUMNS)))
    return lines, {"fits.csv": fits}


def fit_row(run, stage, key, y):
    """One row of fits.csv: the laws fitted to y at the layers 1..L (X_0 left out, so that a
    first-block jump is not read as growth per layer)."""
    xs, ys = list(range(1, len(y))), y[1:]
    fits, winner = stats.fit_laws(xs, ys)
    aicc = {law: fits[law]["aicc"] for law in fits}
    kind, rate = stats.law_rate(winner, fits[winner]["params"]) if winner else (None, None)
    others = sorted(v for law, v in aicc.items() if v is not None and law != winner)
    return dict({k: getattr(run, k) for k in RUN_KEYS}, stage=stage, quantity=key, first=ys[0], last=ys[-1],
                winner=winner, rate_kind=kind, rate=rate,
                delta_aicc=others[0] - aicc[winner] if winner and others else None,
                **{f"aicc_{law}": aicc.get(law) for law in stats.LAWS},
                **{f"{law}_{p}": v for law in fits for p, v in fits[law]["params"].items()})


def fit_cells(run, row, depth):
    fmt = lambda v: "—" if v is None else f"{v:.1f}"
    winner, delta = row["winner"], row["delta_aicc"]
    return [f"{short_label(run.ln, run.dt, run.precision)} (seed {run.seed})", run.depth or depth, row["stage"],
            row["quantity"], f"{row['first']:.3g} → {row['last']:.3g}",
            (winner or "—") + (" ≈" if delta is not None and delta < 2 else ""),
            "—" if row["rate"] is None else f"{row['rate_kind']} {row['rate']:.3g}", fmt(delta),
            " / ".join(fmt(row[f"aicc_{law}"]) for law in stats.LAWS)]


DIAGNOSTIC_COLUMNS = ("ln", "dt", "precision", "depth", "seed", "rho", "rho_p", "max_sensitivity", "amplification",
                      "gradient_ratio")


def diagnostic(run, layers):
    """After training, one run: Spearman's ρ over the blocks between ‖∂L/∂W_fcproj‖ and the
    MLP's hidden RMS, the largest block sensitivity, the relative amplification at X_L and the
    ratio of the scale-free gradients at X_0 and X_L."""
    grad, hidden = layers.fcproj_grad_norm[1:], layers.mlp_hidden_rms[1:]
    rho = stats.spearman(grad, hidden) if not (grad.isna().any() or hidden.isna().any()) else None
    g0, gL = finite(layers.grad_norm_scaled.iloc[0]), finite(layers.grad_norm_scaled.iloc[-1])
    return dict(ln=run.ln, dt=run.dt, precision=run.precision, depth=run.depth or len(layers) - 1, seed=run.seed,
                rho=rho and rho[0], rho_p=rho and rho[1], max_sensitivity=finite(layers.sens_mean.max()),
                amplification=finite(layers.relative_amplification.iloc[-1]),
                gradient_ratio=g0 / gL if g0 is not None and gL else None)


def law_name(row):
    """The winning law of one fit row, a quadratic named by the sign of its curvature."""
    if row.winner != "quadratic":
        return row.winner if isinstance(row.winner, str) else "—"
    return "concave quadratic" if row.quadratic_c < 0 else "convex quadratic"


def over_seeds(fits, diagnostics):
    """E2's tables over the seeds: per configuration, depth, stage and quantity the spread of X_L
    and how often each law wins; the smaller Δt against the larger, paired by placement, depth
    and seed (sign test); the after-training diagnostics' spread, and Pre- against Peri-LN at the
    same Δt and depth (Welch's t-test)."""
    lines = ["", "### Over the seeds", "",
             "X_L as mean ± sd (runs); winners: how many runs each law won (a quadratic named by the sign of its "
             "curvature), and how many of those wins are clear (ΔAICc ≥ 2).", ""]
    rows = []
    for (ln, dt, depth, stage, key), group in groups(fits, ["ln", "dt", "depth", "stage", "quantity"]):
        won = [g for g in group.itertuples() if isinstance(g.winner, str)]
        clear = [g for g in won if g.delta_aicc >= 2]
        rows.append([short_label(ln, dt), depth, stage, key, fmt_spread(values(group, "last")),
                     tally(law_name(g) for g in won) or "— (too few layers)", tally(law_name(g) for g in clear) or "—"])
    lines += table(["configuration", "L", "stage", "quantity", "X_L", "winners", "clear wins"], rows)
    dts = sorted(set(fits.dt))
    if len(dts) == 2:
        small, large = (fmt_num(dt) for dt in dts)
        keys = ["ln", "depth", "seed", "stage", "quantity"]
        pairs = fits[fits.dt == dts[0]].merge(fits[fits.dt == dts[1]], on=keys, suffixes=("", "_large"))
        rows = []
        for stage in STAGES:
            for key in QUANTITIES:
                for placement in sorted(set(fits.ln)) + ["all"]:
                    mine = pairs[(pairs.stage == stage) & (pairs.quantity == key) &
                                 ((pairs.ln == placement) | (placement == "all"))]
                    if len(mine):
                        smaller = int((mine["last"] < mine["last_large"]).sum())
                        rows.append([stage, key, PLACEMENT_LABEL.get(placement, placement),
                                     f"{smaller} of {len(mine)}", f"{stats.sign_test(smaller, len(mine)):.2g}"])
        lines += ["", f"Δt = {small} against Δt = {large}: X_L of the same placement, depth and seed; pairs in which "
                  f"Δt = {small} gives the smaller value, and the two-sided sign test.", ""]
        lines += table(["stage", "quantity", "placement", f"smaller with Δt = {small}", "sign test p"], rows)
    lines += ["", "After training, over the seeds: Spearman's ρ as mean ± sd, and how many runs have a significant "
              "(p < 0.05) positive or negative ρ; the largest block sensitivity and the relative amplification at "
              "X_L as mean ± sd.", ""]
    by_config = dict(groups(diagnostics, ["ln", "dt", "depth"]))
    rows = []
    for (ln, dt, depth), group in by_config.items():
        significant = group[group.rho_p < 0.05]
        rows.append([short_label(ln, dt), depth, fmt_spread(values(group, "rho"), ".2f"),
                     f"{int((significant.rho > 0).sum())} / {int((significant.rho < 0).sum())}",
                     fmt_spread(values(group, "max_sensitivity")), fmt_spread(values(group, "amplification"))])
    lines += table(["configuration", "L", "ρ(grad W_fcproj, hidden RMS)", "significant + / −", "max block sensitivity",
                    "relative amplification X_L"], rows)
    rows = []
    for (ln, dt, depth), pre in by_config.items():
        peri = by_config.get(("peri", dt, depth))
        if ln != "pre" or peri is None:
            continue
        for key in ("max_sensitivity", "amplification"):
            xs, ys = values(pre, key), values(peri, key)
            test = stats.welch(xs, ys)
            rows.append([fmt_num(dt), depth, key.replace("_", " "), fmt_spread(xs), fmt_spread(ys),
                         "—" if test is None else f"{test[1]:.2g}"])
    lines += ["", "Pre-LN against Peri-LN at the same Δt and depth (Welch's t-test, two-sided).", ""]
    lines += table(["Δt", "L", "quantity", "Pre-LN", "Peri-LN", "p"], rows)
    return lines


def figure(plt, runs, tables, path):
    """growth.png: mean_abs and entry_var against layer at init and after training, every run,
    the deeper models darker."""
    from .figures import COLORS, DT_STYLES, plain_log_axis, save
    stage_profiles = {"init": profiles(tables.init_layers), "trained": profiles(tables.layers)}
    depths = sorted({int(d) for d in runs.depth if d})
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    labelled = set()
    for col, key in enumerate(QUANTITIES):
        for row, stage in enumerate(STAGES):
            ax = axes[row][col]
            for run in recorded(runs).itertuples():
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
            ax.set_title(f"{key} {'at initialisation (step 0)' if stage == 'init' else 'after training'}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{TITLE}, every run; L ∈ {{{', '.join(map(str, depths))}}} (fainter = shallower)", fontsize=11)
    fig.tight_layout()
    save(fig, path)

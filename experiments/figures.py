"""The figures of a sweep (matplotlib, imported only here): hidden states, gradient norms and
sensitivity against layer (from layers.csv), the training loss of every run against step (from
the run folders' log.jsonl), and the experiment's own figure (e1.figure, e2.figure).

In the per-layer figures colours tell the placement (Pre-LN red, Peri-LN green, Post-LN blue),
darker shades larger learning rates, and line styles tell Δt (solid 1, dashed 0.1); the loss
figure has a panel per placement and Δt instead, its colours telling the settings that vary
inside a panel."""
import math

from .files import write_whole
from .grid import PLACEMENT_LABEL, PLACEMENTS, fmt_num
from .results import BLOCK_SERIES, ResultsError, load
from .tables import CONFIG_KEYS, config_label, finished, groups, none_if_nan, settings_label

COLORS = {"pre": "tab:red", "peri": "tab:green", "post": "tab:blue"}
SHADES = {"pre": "Reds", "peri": "Greens", "post": "Blues"}
DT_STYLES = {1.0: "-", 0.1: "--"}
LAYER_FIGURES = {
    "hidden_states.png": ("Hidden states of the residual stream", [
        ("mean_abs", "mean |X_i|"), ("entry_var", "entry_var: variance inside a token"),
        ("data_var", "data_var: variance across tokens")]),
    "grad_norm.png": ("Gradient norms against layer", [
        ("grad_norm", "‖∂loss/∂X_i‖ (nats per unit of X_i)"), ("param_grad_norm", "‖∂loss/∂θ‖ of block i")]),
    "sensitivity.png": ("Local sensitivity and output uncertainty", [
        ("sens_mean", "block sensitivity: mean ‖J v‖ (gain)"), ("sens_max", "block sensitivity: max ‖J v‖ (gain)"),
        ("w2_bound", "noise on X_0: W2 bound at X_i")]),
}
FIGURES = tuple(LAYER_FIGURES) + ("loss.png",)


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend, or None when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plain_log_axis(ax, axis="y"):
    """A log-scale axis labelled with plain numbers (4.6, 0.024, 2000 rather than 4.6×10⁰), the
    minor ticks too when the data span less than about a decade and a half. Call it after
    plotting (it reads the axis limits)."""
    from matplotlib.ticker import FuncFormatter
    getattr(ax, f"set_{axis}scale")("log")
    which = getattr(ax, f"{axis}axis")
    text = lambda v: f"{v:.0f}" if v >= 1000 else f"{v:.3g}"
    lo, hi = getattr(ax, f"get_{axis}lim")()
    # Minor ticks: all labelled within a decade, those at 2, 3 and 5 × 10^k up to 30×, none beyond.
    minor = lambda v: text(v) if hi < 10 * lo or (hi < 30 * lo and round(v / 10 ** math.floor(math.log10(v))) in (2, 3, 5)) else ""
    which.set_major_formatter(FuncFormatter(lambda v, _: text(v)))
    which.set_minor_formatter(FuncFormatter(lambda v, _: minor(v)))


def value_axis(ax, values):
    """The y axis of a panel of `values`: on a log scale (plain_log_axis) when every finite value
    is positive, else on a symlog scale, so that values ≤ 0 (a Pre-LN block's negative largest
    attention logit) are drawn too, linear within ± the smallest non-zero |value|. Returns the
    scale's words for the axis label."""
    values = [v for v in values if math.isfinite(v)]
    if all(v > 0 for v in values):
        plain_log_axis(ax)
        return "log scale"
    nonzero = [abs(v) for v in values if v != 0]
    ax.set_yscale("symlog", linthresh=min(nonzero) if nonzero else 1.0)
    return "symlog scale: values ≤ 0 drawn"


def layer_axis_label(key):
    """The x label of a per-layer panel of `key`: blocks for a block series (i = 1..L), else the
    states X_0..X_L."""
    return "block i" if key in BLOCK_SERIES else "layer i (0 = embedding output, i = output of block i)"


def save(fig, path):
    """Writes the figure whole or not at all."""
    import matplotlib.pyplot as plt
    try:
        write_whole(path, lambda tmp: fig.savefig(tmp, dpi=110, bbox_inches="tight"))
    finally:
        plt.close(fig)


def config_styles(runs):
    """{configuration: line style}: the placement's colour, darker for a larger learning rate
    (and later weight decay, depth), the Δt's dash."""
    import matplotlib
    configs = [key for key, _ in groups(runs, CONFIG_KEYS)]
    styles = {}
    for ln in PLACEMENTS:
        mine = [c for c in configs if c[0] == ln]
        shades = sorted({c[2:] for c in mine}, key=lambda c: (c[1], c[2] or 0, c[0], c[3] or ""))
        cmap = matplotlib.colormaps[SHADES[ln]]
        for c in mine:
            shade = 0.85 if len(shades) == 1 else 0.45 + 0.5 * shades.index(c[2:]) / (len(shades) - 1)
            styles[c] = dict(color=cmap(shade), linestyle=DT_STYLES.get(c[1], "-."))
    return styles


def legend(fig, axes, n):
    """One legend beside the panels (columns as the number of entries needs)."""
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, ncol=1 + n // 24,
                   frameon=False)


def layer_figure(plt, runs, layers, title, panels, path):
    """Per-layer series, the mean over each configuration's finished runs, one panel per series
    (a log scale, or symlog when a value is ≤ 0: value_axis)."""
    styles = config_styles(runs)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.9), squeeze=False)
    axes = axes[0]
    done = finished(runs)
    for config, group in groups(done, CONFIG_KEYS):
        mine = layers[layers.run.isin(group.run)]
        if not len(mine):
            continue
        for ax, (key, _) in zip(axes, panels):
            mean = mine.groupby("layer")[key].mean().dropna()
            ax.plot(mean.index, mean.values, label=config_label(config), linewidth=1.2, **styles[config])
    for ax, (key, label) in zip(axes, panels):
        scale = value_axis(ax, [v for line in ax.get_lines() for v in line.get_ydata()])
        ax.set_xlabel(layer_axis_label(key))
        ax.set_ylabel(f"{key} ({scale})")
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    legend(fig, axes, len(styles))
    fig.suptitle(title + " (mean over each configuration's finished runs)", fontsize=11)
    fig.tight_layout()
    save(fig, path)


def loss_figure(plt, runs, run_dir, path):
    """Training loss (moving average of 10 steps) of every run against step: one panel per
    placement (columns) and Δt (rows), on a log scale so that one diverged run does not flatten
    the rest. A setting that is the same throughout a panel (E2's learning rate) goes into the
    panel's title; the settings that vary inside a panel (E1's learning rate, E2's depth, E3's
    weight decay) pick the colour, the same in every panel, so one short legend serves them all;
    × marks a run that stopped (diverged or nonfinite)."""
    import matplotlib
    placements = [ln for ln in PLACEMENTS if ln in set(runs.ln)]
    dts = sorted(set(runs.dt), reverse=True)
    settings = {run.run: run_settings(run) for run in runs.itertuples()}
    panels = {}
    for run in runs.itertuples():
        panels.setdefault((run.ln, run.dt), []).append(settings[run.run])
    varying = [k for k in SETTINGS if any(len({s[k] for s in panel}) > 1 for panel in panels.values())]
    key = lambda run: tuple(settings[run.run][k] for k in varying)
    keys = sorted({key(run) for run in runs.itertuples()}, key=lambda t: tuple((v is None, v) for v in t))
    cmap = matplotlib.colormaps["viridis"]
    colour = {k: cmap(0.9 * i / max(1, len(keys) - 1)) for i, k in enumerate(keys)}
    fig, axes = plt.subplots(len(dts), len(placements), figsize=(4.6 * len(placements), 3.4 * len(dts)),
                             squeeze=False, sharex=True, sharey=True)
    for run in runs[runs.outcome.notna()].itertuples():
        try:
            steps = load(run_dir(run.run)).steps.dropna(subset=["loss"])
        except ResultsError:
            continue
        if not len(steps):
            continue
        ax = axes[dts.index(run.dt)][placements.index(run.ln)]
        smooth = steps.loss.rolling(10, min_periods=1).mean()
        ax.plot(steps.step, smooth, linewidth=0.9, alpha=0.8, color=colour[key(run)])
        if run.outcome in ("diverged", "nonfinite"):
            ax.plot([steps.step.iloc[-1]], [smooth.iloc[-1]], marker="x", markersize=8, color=colour[key(run)])
    for i, dt in enumerate(dts):
        for j, ln in enumerate(placements):
            ax = axes[i][j]
            fixed = [settings_label({k: v}) for k, v in (panels.get((ln, dt)) or [{}])[0].items() if k not in varying]
            ax.set_title(", ".join([PLACEMENT_LABEL[ln], f"Δt={fmt_num(dt)}"] + [f for f in fixed if f]), fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            if i == len(dts) - 1:
                ax.set_xlabel("optimiser step")
        axes[i][0].set_ylabel("training loss (nats, log scale)")
    plain_log_axis(axes[0][0])  # the axes share y: one call sets every panel
    handles = [matplotlib.lines.Line2D([], [], color=colour[k], linewidth=2) for k in keys]
    fig.legend(handles, [settings_label(dict(zip(varying, k))) for k in keys], loc="center left",
               bbox_to_anchor=(1.0, 0.5), fontsize=8, ncol=1 + len(keys) // 24, frameon=False)
    fig.suptitle("Training loss of every run, moving average of 10 steps (× = stopped: diverged or nonfinite)",
                 fontsize=11)
    fig.tight_layout()
    save(fig, path)


SETTINGS = ("wd", "lr", "depth", "precision")


def run_settings(run):
    """A run's settings beyond its placement and Δt, {name: value}, None where a sweep does not
    set one."""
    return {k: none_if_nan(getattr(run, k)) for k in SETTINGS}

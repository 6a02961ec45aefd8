#!/usr/bin/env python3
"""plot.py: compares ./train runs in one figure, loss against step and, for runs trained with
-stats_every, the residual stream against layer.

    python3 plot.py out_pre out_peri                  # writes compare.png
    python3 plot.py runs/a runs/b --out ab.png --step 500

Each argument is a ./train -out folder. Panels: the training loss (moving average of 10 steps,
log scale, so that a diverged run does not flatten the others) and the validation loss (dots)
against step, × where a run diverged; the gradient norm before clipping against step; for runs
with stats records, from each run's last one (or its last at or before --step): mean |X_i|,
data_var, ‖∂loss/∂X_i‖ and entry_var of X_i against layer i (0 = embedding output) and the
largest attention logit of each block i = 1..L; and over all its stats records, the largest
attention logit of any block and the largest output logit against step. Panels are on a log
scale; one with a value ≤ 0 (a largest attention logit can be negative) is on a symlog scale
instead, which draws it, and its axis label says so. A run is labelled with its folder name and
the placement and Δt of its config.json.

Bad input (a folder without a log, a log that is not ./train's, an --out that is a folder, not
an image name, in a folder that takes no file, one of the runs' files or a file of a ./train run
folder, a negative --step) is one line and exit status 2, before anything is written; a write
that fails (disk full) is one line and exit status 4. The image is written whole or not at all. Needs numpy, scipy, pandas and matplotlib (Debian: apt-get install python3-numpy
python3-scipy python3-pandas python3-matplotlib); run from another python3 it restarts under
/usr/bin/python3.
"""
import argparse
import json
import os
import sys

from experiments.python import require

require(("numpy", "scipy", "pandas", "matplotlib"), "plot.py")

from experiments.figures import layer_axis_label, plain_log_axis, pyplot, save, value_axis  # noqa: E402  (after the interpreter check)
from experiments.files import check_folder, check_inputs, check_outputs, os_error_text  # noqa: E402
from experiments.grid import PLACEMENT_LABEL, InputError  # noqa: E402
from experiments.results import ResultsError, load  # noqa: E402

IMAGE_TYPES = (".png", ".pdf", ".svg")
# (stats column, panel title): layer series at X_0..X_L, block series (attn_logit_max) at blocks 1..L.
LAYER_PANELS = [("mean_abs", "mean |X_i|"), ("data_var", "data_var: variance across tokens"),
                ("grad_norm", "‖∂loss/∂X_i‖"), ("entry_var", "entry_var: variance inside a token"),
                ("attn_logit_max", "largest attention logit of block i")]


class PlotError(Exception):
    """Bad input: reported as one line, exit status 2."""


def read_run(folder):
    """(label, Run) of a ./train -out folder; refuses one without step records."""
    path = os.path.join(folder, "log.jsonl")
    if not os.path.isfile(path):
        raise PlotError(f"{folder}: no log.jsonl (is it a ./train -out folder?)")
    try:
        run = load(folder)
    except ResultsError as e:
        raise PlotError(str(e))
    if not len(run.steps):
        raise PlotError(f"{path}: no step records (has the run started?)")
    return run_label(folder), run


def run_label(folder):
    """The folder's name, with the placement and Δt from its config.json (written by ./train)."""
    name = os.path.basename(os.path.normpath(folder))
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        return f"{name} ({PLACEMENT_LABEL[config['placement']]}, Δt {config['dt']:g})"
    except (OSError, ValueError, KeyError, TypeError):
        return name


def check_out(out, folders):
    """--out must be an image file name in an existing folder that takes files, and neither a
    file the runs' folders hold nor a file of a ./train run folder (by identity: links count);
    a link is followed, a FIFO written through, a dangling link refused (files.output_target).
    The runs' log.jsonl and config.json must be regular files."""
    if os.path.isdir(out):
        raise PlotError(f"--out {out}: is a folder; give a file name such as {os.path.join(out, 'compare.png')}")
    if os.path.splitext(out)[1].lower() not in IMAGE_TYPES:
        raise PlotError(f"--out {out}: not an image name (it must end in {', '.join(IMAGE_TYPES)})")
    folder = os.path.dirname(out) or "."
    if not os.path.isdir(folder):
        raise PlotError(f"--out {out}: the folder {folder} does not exist")
    inputs = [os.path.join(f, name) for f in folders for name in ("log.jsonl", "config.json")]
    try:
        check_inputs(inputs)  # a FIFO or folder there is refused, not waited for or read
        check_outputs([("--out", out)], inputs)
        check_folder(folder, "--out")
    except InputError as e:
        raise PlotError(str(e))


def plotted(ax):
    """The y values of the lines drawn in panel `ax`."""
    return [v for line in ax.get_lines() for v in line.get_ydata()]


def at_step(stats, step):
    """The rows of a run's last stats record (at or before `step` when given)."""
    if step is not None:
        stats = stats[stats.step <= step]
    return stats[stats.step == stats.step.max()] if len(stats) else stats


def figure(plt, runs, step):
    """The figure of `runs` ((label, Run) pairs), per-layer panels at `step` (None: the last)."""
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = lambda i: colors[i % len(colors)]
    with_stats = [(i, label, at_step(run.stats, step)) for i, (label, run) in enumerate(runs)]
    with_stats = [(i, label, rows) for i, label, rows in with_stats if len(rows)]
    panels = LAYER_PANELS if with_stats else []
    columns = 3 if with_stats else 2
    rows = 1 + (len(panels) + 1 + columns - 1) // columns if with_stats else 1
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.3 * rows), squeeze=False)
    axes = [ax for row in axes for ax in row]

    ax = axes[0]
    for i, (label, run) in enumerate(runs):
        steps = run.steps.dropna(subset=["loss"])
        steps = steps[steps.loss > 0]
        smooth = steps.loss.rolling(10, min_periods=1).mean()
        ax.plot(steps.step, smooth, color=color(i), linewidth=1, label=label)
        evals = run.evals.dropna(subset=["val_loss"])
        ax.plot(evals.step, evals.val_loss, color=color(i), marker="o", markersize=3, linestyle="none")
        if len(run.events) and (run.events.event == "diverged").any() and len(steps):
            ax.plot([steps.step.iloc[-1]], [smooth.iloc[-1]], color=color(i), marker="x", markersize=9)
    plain_log_axis(ax)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token, log scale)")
    ax.set_title("training loss (moving average of 10), val loss (dots), × = diverged", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)

    ax = axes[1]
    for i, (label, run) in enumerate(runs):
        norms = run.steps.dropna(subset=["grad_norm"]) if "grad_norm" in run.steps else run.steps.iloc[:0]
        ax.plot(norms.step, norms.grad_norm, color=color(i), linewidth=1, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel(f"‖∂loss/∂θ‖ ({value_axis(ax, plotted(ax))})")
    ax.set_title("gradient norm before clipping", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)

    for ax, (key, title) in zip(axes[2:], panels):
        for i, label, record in with_stats:
            points = record.dropna(subset=[key])
            ax.plot(points.layer, points[key], marker="o", markersize=3, color=color(i),
                    label=f"{label} @ step {record.step.iloc[0]}")
        scale = value_axis(ax, plotted(ax))
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel(layer_axis_label(key))
        ax.set_ylabel(f"{key} ({scale})")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    if panels:
        axes[2].legend(fontsize=7)
        ax = axes[2 + len(panels)]
        for i, label, _ in with_stats:
            stats = runs[i][1].stats
            stats = stats if step is None else stats[stats.step <= step]
            per_step = stats.groupby("step").agg(attention=("attn_logit_max", "max"), output=("logit_max", "first"))
            attention, output = per_step.attention.dropna(), per_step.output.dropna()
            ax.plot(attention.index, attention, color=color(i), marker="o", markersize=3, label=f"{label}: attention")
            ax.plot(output.index, output, color=color(i), marker="s", markersize=3, linestyle="--",
                    label=f"{label}: output")
        ax.set_xlabel("step")
        ax.set_ylabel(f"largest logit ({value_axis(ax, plotted(ax))})")
        ax.set_title("largest logit: attention (any block, —) and output (--)", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[3 + len(panels) if panels else 2:]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def main(argv):
    p = argparse.ArgumentParser(prog="plot.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", help="./train -out folders")
    p.add_argument("--out", default="compare.png", help="the image to write: .png, .pdf or .svg (compare.png)")
    p.add_argument("--step", type=int, help="use each run's last stats record at or before this step (≥ 0)")
    a = p.parse_args(argv)
    if a.step is not None and a.step < 0:
        raise PlotError(f"--step {a.step}: must be ≥ 0")
    check_out(a.out, a.folders)
    runs = [read_run(folder) for folder in a.folders]
    if a.step is not None and not any(len(run.stats) for _, run in runs):
        raise PlotError(f"--step {a.step}: none of the runs has stats records (train with -stats_every N)")
    save(figure(pyplot(), runs, a.step), a.out)
    print(f"plot: {a.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except PlotError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # a write that failed: read-only or full disk, ...
        print(f"plot.py: {os_error_text(e)}", file=sys.stderr)
        sys.exit(4)
    except KeyboardInterrupt:
        print("plot.py: interrupted; nothing written", file=sys.stderr)
        sys.exit(130)

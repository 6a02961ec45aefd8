#!/usr/bin/env python3
"""plot.py — compares ./train runs in one figure: loss against step and, for runs trained with
-stats_every, the residual stream against layer.

    python3 plot.py out_pre out_peri                  # writes compare.png
    python3 plot.py runs/a runs/b --out ab.png --step 500

Each argument is a ./train -out folder. Panels:
    training loss (moving average of 10 steps) and validation loss against step;
    mean |X_i|, data_var of X_i and ‖∂loss/∂X_i‖ against layer i (0 = embedding, log scale)
    from each run's last `stats` record (or its last at or before --step), when it has one.
A run is labelled with its folder name and the placement and Δt of its config.json.

Needs matplotlib (Debian: apt-get install python3-matplotlib). When this interpreter lacks it
and /usr/bin/python3 has it, that one draws the figure.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

PLACEMENTS = {"pre": "Pre-LN", "post": "Post-LN", "peri": "Peri-LN"}


class PlotError(Exception):
    """Bad input: reported as one line, exit status 2."""


def read_log(folder):
    """The records of FOLDER/log.jsonl (a line cut short by an interruption is skipped)."""
    path = os.path.join(folder, "log.jsonl")
    if not os.path.isfile(path):
        raise PlotError(f"{folder}: no log.jsonl (is it a ./train -out folder?)")
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return records


def run_label(folder):
    """The folder's name, with the placement and Δt from its config.json (written by ./train)."""
    name = os.path.basename(os.path.normpath(folder))
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        return f"{name} ({PLACEMENTS[config['placement']]}, Δt {config['dt']:g})"
    except (OSError, ValueError, KeyError, TypeError):
        return name


def stats_record(records, step):
    """The last `stats` record (at or before `step` when given), or None."""
    found = None
    for r in records:
        if r.get("event") == "stats" and (step is None or r["step"] <= step):
            found = r
    return found


def draw(runs, out, step):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = lambda i: colors[i % len(colors)]
    with_stats = [(i, label, stats_record(records, step)) for i, (label, records) in enumerate(runs)]
    with_stats = [(i, label, r) for i, label, r in with_stats if r is not None]
    layer_panels = [("mean_abs", "mean |X_i|"), ("data_var", "data_var: variance across tokens"),
                    ("grad_norm", "‖∂loss/∂X_i‖")] if with_stats else []
    fig, axes = plt.subplots(1, 1 + len(layer_panels), figsize=(5.2 * (1 + len(layer_panels)), 4.3), squeeze=False)
    axes = axes[0]

    ax = axes[0]
    for i, (label, records) in enumerate(runs):
        steps = [(r["step"], r["loss"]) for r in records if "loss" in r and "event" not in r and r["loss"] is not None]
        if steps:
            xs, ys = zip(*steps)
            smooth = [statistics.fmean(ys[max(0, k - 9): k + 1]) for k in range(len(ys))]
            ax.plot(xs, smooth, color=color(i), linewidth=1, label=label)
        vals = [(r["step"], r["val_loss"]) for r in records if r.get("val_loss") is not None]
        if vals:
            ax.plot(*zip(*vals), color=color(i), marker="o", markersize=3, linestyle="none")
        diverged = [r["step"] for r in records if r.get("event") == "diverged"]
        if diverged and steps:
            ax.plot([xs[-1]], [smooth[-1]], color=color(i), marker="x", markersize=9)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("training loss (moving average of 10), val loss (dots), × = diverged", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)

    for ax, (key, title) in zip(axes[1:], layer_panels):
        for i, label, record in with_stats:
            points = [(k, v) for k, v in enumerate(record.get(key) or []) if v is not None and v > 0]
            if points:
                ax.plot(*zip(*points), marker="o", markersize=3, color=color(i), label=f"{label} @ step {record['step']}")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("layer i (0 = embedding)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    if layer_panels:
        axes[1].legend(fontsize=7)
    fig.tight_layout()
    tmp = out + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, out)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", help="./train -out folders")
    p.add_argument("--out", default="compare.png", help="the PNG to write (compare.png)")
    p.add_argument("--step", type=int, help="use each run's last stats record at or before this step")
    a = p.parse_args(argv)
    folder = os.path.dirname(a.out) or "."
    if not os.path.isdir(folder):
        raise PlotError(f"--out {a.out}: the folder {folder} does not exist")
    runs = [(run_label(folder), read_log(folder)) for folder in a.folders]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        other = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(other) and os.path.exists(other) and \
                subprocess.run([other, "-c", "import matplotlib"], capture_output=True).returncode == 0:
            return subprocess.run([other, os.path.abspath(__file__)] + argv).returncode
        raise PlotError(f"matplotlib is not installed for {sys.executable} (Debian: apt-get install python3-matplotlib)")
    draw(runs, a.out, a.step)
    print(f"plot: {a.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except PlotError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        sys.exit(2)

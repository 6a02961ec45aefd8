#!/usr/bin/env python3
"""plot.py — compares ./train runs in one figure: loss against step and, for runs trained with
-stats_every, the residual stream against layer.

    python3 plot.py out_pre out_peri                  # writes compare.png
    python3 plot.py runs/a runs/b --out ab.png --step 500

Each argument is a ./train -out folder. Panels:
    training loss (moving average of 10 steps) and validation loss against step; the gradient
    norm (before clipping) against step;
    for runs with `stats` records, from each run's last one (or its last at or before --step):
    mean |X_i|, data_var, ‖∂loss/∂X_i‖ and entry_var of X_i against layer i (0 = embedding)
    and the largest attention logit of each block; and over all its stats records, the largest
    attention logit of any block and the largest output logit against step (log scales).
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


def stat_series(records, step):
    """(step, largest attention logit over the blocks, largest output logit) of every `stats`
    record (up to `step` when given)."""
    return [(r["step"], max((x for x in r.get("attn_logit_max") or [] if x is not None), default=None),
             r.get("logit_max")) for r in records
            if r.get("event") == "stats" and (step is None or r["step"] <= step)]


def draw(runs, out, step):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = lambda i: colors[i % len(colors)]
    with_stats = [(i, label, stats_record(records, step)) for i, (label, records) in enumerate(runs)]
    with_stats = [(i, label, r) for i, label, r in with_stats if r is not None]
    # (key, title, first point): layer series start at X_0, block series at block 1.
    layer_panels = [("mean_abs", "mean |X_i|", 0), ("data_var", "data_var: variance across tokens", 0),
                    ("grad_norm", "‖∂loss/∂X_i‖", 0), ("entry_var", "entry_var: variance inside a token", 0),
                    ("attn_logit_max", "largest attention logit of block i", 1)] if with_stats else []
    columns = 3 if with_stats else 2
    rows = 1 + (len(layer_panels) + 1 + columns - 1) // columns if with_stats else 1
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.3 * rows), squeeze=False)
    axes = [ax for row in axes for ax in row]

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

    ax = axes[1]
    for i, (label, records) in enumerate(runs):
        norms = [(r["step"], r["grad_norm"]) for r in records
                 if "loss" in r and "event" not in r and r.get("grad_norm") is not None and r["grad_norm"] > 0]
        if norms:
            ax.plot(*zip(*norms), color=color(i), linewidth=1, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_title("gradient norm before clipping", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)

    for ax, (key, title, first) in zip(axes[2:], layer_panels):
        for i, label, record in with_stats:
            points = [(k + first, v) for k, v in enumerate(record.get(key) or []) if v is not None and v > 0]
            if points:
                ax.plot(*zip(*points), marker="o", markersize=3, color=color(i), label=f"{label} @ step {record['step']}")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("block i" if first else "layer i (0 = embedding)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    if layer_panels:
        axes[2].legend(fontsize=7)
        ax = axes[2 + len(layer_panels)]
        for i, (label, records) in enumerate(runs):
            series = stat_series(records, step)
            attention = [(s, a) for s, a, _ in series if a is not None and a > 0]
            output = [(s, o) for s, _, o in series if o is not None and o > 0]
            if attention:
                ax.plot(*zip(*attention), color=color(i), marker="o", markersize=3, label=f"{label}: attention")
            if output:
                ax.plot(*zip(*output), color=color(i), marker="s", markersize=3, linestyle="--", label=f"{label}: output")
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_title("largest logit: attention (any block, —) and output (--)", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[3 + len(layer_panels) if layer_panels else 2:]:
        ax.set_visible(False)
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

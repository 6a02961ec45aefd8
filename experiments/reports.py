"""The reports of a sweep, from its tables alone: results.md, the experiment's report
(experiment.md and its CSV) and the figures; written into a sweep's OUT, or beside published
tables (PREFIX_NAME, e.g. docs/e1_experiment.md), and copied to --publish PREFIX."""
import argparse
import os
import shutil

from . import e1, e2, e3, figures, summary
from .collect import write_csv
from .grid import fmt_num
from .results import load
from .settings import DEFAULTS, PRESETS, default_warmup
from .tables import on_grid

# One report module per experiment: report(s, runs, tables) → (markdown lines, {CSV name: DataFrame}),
# FILES (what it writes besides experiment.md) and, when it draws one, figure(plt, runs, tables, path).
EXPERIMENTS = {"e1": e1, "e2": e2, "e3": e3}
TABLES = ("results.csv", "layers.csv", "init_layers.csv")


def published(prefix, preset):
    """(settings, tables) of the tables published at PREFIX (PREFIX_results.csv, ...) by the preset
    `preset`: its settings, with the learning rate an E3 took from E1 (--lr-from) read from the
    tables."""
    s = argparse.Namespace(**{**DEFAULTS, **PRESETS[preset]})
    tables = load(prefix)
    if s.lr is None:
        s.lr = ",".join(fmt_num(lr) for lr in sorted(set(tables.results.lr)))
    if s.warmup is None:
        s.warmup = default_warmup(s.steps)
    return s, tables


def write_text(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_reports(s, grid, tables, place, run_dir=None, draw=True):
    """Writes results.md, the experiment's files and (with `draw`) the figures to place(NAME),
    from the sweep's tables (results.Sweep) on the grid `grid` (a list of Runs). The loss figure
    needs the run folders (run_dir(NAME)). Returns the markdown written and a line about the
    figures."""
    runs = on_grid(grid, tables.results)
    text = summary.results_markdown(s, runs)
    write_text(place("results.md"), text)
    module = EXPERIMENTS.get(s.experiment)
    if module:
        lines, csvs = module.report(s, runs, tables)
        experiment = "\n".join(lines) + "\n"
        write_text(place("experiment.md"), experiment)
        for name, frame in csvs.items():
            write_csv(place(name), frame)
        text += experiment
    if not draw:
        return text, None
    plt = figures.pyplot()
    if plt is None:
        return text, "figures: none (matplotlib is not installed; Debian: apt-get install python3-matplotlib)"
    drawn = []
    for name, (title, panels) in figures.LAYER_FIGURES.items():
        figures.layer_figure(plt, runs, tables.layers, title, panels, place(name))
        drawn.append(place(name))
    if run_dir:
        figures.loss_figure(plt, runs, run_dir, place("loss.png"))
        drawn.append(place("loss.png"))
    if module and hasattr(module, "figure"):
        name = next(f for f in module.FILES if f.endswith(".png"))
        module.figure(plt, runs, tables, place(name))
        drawn.append(place(name))
    return text, "figures: " + ", ".join(drawn) + ("" if run_dir else " (loss.png needs the run folders)")


def publish(s, out, prefix):
    """Copies the tables, reports and figures of OUT to PREFIX_NAME (e.g. docs/e1_results.md)."""
    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    module = EXPERIMENTS.get(s.experiment)
    names = ("results.md",) + TABLES + figures.FIGURES + (("experiment.md",) + module.FILES if module else ())
    copied = []
    for name in names:
        if os.path.exists(os.path.join(out, name)):
            shutil.copyfile(os.path.join(out, name), f"{prefix}_{name}")
            copied.append(f"{prefix}_{name}")
    return "published: " + ", ".join(copied)

"""The reports of a sweep, from its tables alone: results.md, the experiment's report
(experiment.md and its CSV) and the figures; written into a sweep's OUT, or beside published
tables (PREFIX_NAME, e.g. docs/e1_experiment.md), and copied to --publish PREFIX."""
import argparse
import json
import os

from . import e1, e2, e3, figures, summary
from .collect import write_csv
from .files import copy_whole, write_text
from .grid import fmt_num
from .results import load, read_json
from .settings import BY_NAME, EXECUTION_SETTINGS, PRESETS, default_warmup, defaults, own_defaults
from .tables import on_grid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One report module per experiment: report(s, runs, tables) → (markdown lines, {CSV name: DataFrame}),
# FILES (what it writes besides experiment.md) and, when it draws one, figure(plt, runs, tables, path).
EXPERIMENTS = {"e1": e1, "e2": e2, "e3": e3}
TABLES = ("results.csv", "layers.csv", "init_layers.csv")
# Published beside the tables when the sweep has it: E2's intervention.
EXTRAS = ("intervention.csv",)


def published(prefix, preset):
    """(settings, tables) of the tables published at PREFIX (PREFIX_results.csv, ...): the
    settings of the sweep that made them (PREFIX_sweep.json), else of the preset `preset`; the
    grid is the one of the table (every value of each axis that its runs have, so the learning
    rates an E1 added and the one an E3 took from E1 are there)."""
    tables = load(prefix)
    values = {**own_defaults(), **PRESETS[preset], **(read_json(prefix + "_sweep.json") or {})}
    if set(BY_NAME) - set(values):  # no sweep.json: the programs' defaults, from the repository's binaries
        values = {**defaults(os.path.join(REPO, "train"), os.path.join(REPO, "eval")), **values}
    s = argparse.Namespace(**values)
    results = tables.results
    s.lr = lr_axis(results)
    for axis, column in (("ln", "ln"), ("dt", "dt"), ("wd", "wd"), ("depth", "depth"), ("precision", "precision"),
                         ("seeds", "seed")):
        present = list(dict.fromkeys(results[column].dropna()))
        if axis in ("ln", "precision"):
            setattr(s, axis, ",".join(present) if present else None)
        elif axis in ("depth", "seeds"):
            setattr(s, axis, ",".join(str(int(v)) for v in present) if present else None)
        else:
            setattr(s, axis, ",".join(fmt_num(v) for v in present))
    post = results[results.ln == "post"]  # its own lrs and seeds, where E1 gave it a smaller grid
    s.post_lr = lr_axis(post) if len(post) else None
    s.post_seeds = ",".join(str(int(v)) for v in dict.fromkeys(post.seed.dropna())) if len(post) else None
    if s.warmup is None:
        s.warmup = default_warmup(s.steps)
    return s, tables


def lr_axis(results):
    """The --lr list of a table's runs: the learning rates as a plain list when every (ln, Δt)
    has the same ones, else as ln/Δt=lr entries."""
    per_config = {key: tuple(dict.fromkeys(rows.lr)) for key, rows in results.groupby(["ln", "dt"], sort=False)}
    if len(set(per_config.values())) <= 1:
        return ",".join(fmt_num(lr) for lr in dict.fromkeys(results.lr))
    return ",".join(f"{ln}/{fmt_num(dt)}={fmt_num(lr)}" for (ln, dt), lrs in per_config.items() for lr in lrs)


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


def write_settings(s, out, path):
    """PREFIX_sweep.json: the settings OUT's runs were made with (OUT/sweep.json without the
    execution settings), paths inside the repository relative to it. Returns the path."""
    saved = read_json(os.path.join(out, "sweep.json")) or {}
    kept = {}
    for name, value in saved.items():
        if name in EXECUTION_SETTINGS:
            continue
        if isinstance(value, str) and os.path.isabs(value) and value.startswith(s.repo + os.sep):
            value = os.path.relpath(value, s.repo)
        kept[name] = value
    write_text(path, json.dumps(kept, indent=1, sort_keys=True) + "\n")
    return path


def publish(s, out, prefix):
    """Copies the tables, reports and figures of OUT to PREFIX_NAME (e.g. docs/e1_results.md)."""
    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    module = EXPERIMENTS.get(s.experiment)
    names = ("results.md",) + TABLES + EXTRAS + figures.FIGURES + (("experiment.md",) + module.FILES if module else ())
    copied = [write_settings(s, out, f"{prefix}_sweep.json")]
    for name in names:
        if os.path.exists(os.path.join(out, name)):
            copy_whole(os.path.join(out, name), f"{prefix}_{name}")
            copied.append(f"{prefix}_{name}")
    return "published: " + ", ".join(copied)

"""sweep.py's command line: the flags (one per setting of settings.SETTINGS, plus the actions),
the settings they make, and what each action does. Every check runs before anything is written."""
import argparse
import concurrent.futures
import glob
import os
import shlex
import signal
import sys
import time

from . import checks, claims, collect, e1, figures, files, intervene, reports, runner
from .grid import InputError, fmt_num, make_grid, parse_list, value_text
from .results import ResultsError, load, read_json
from .tables import on_grid, recorded
from .runner import use_private_binaries, write_slurm_script
from .settings import BY_NAME, EXECUTION, EVALUATION, GRID, GRID_SETTINGS, PRESETS, PROGRAM_DEFAULT, SETTINGS, \
    TRAINING, TRAINING_SETTINGS, defaults, own_defaults

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH_SETTINGS = ("out", "train_data", "val_data", "tokenizer", "publish", "lr_from")
GROUP_TITLES = {GRID: "grid (comma lists; seeds and depths also as ranges, e.g. 1-5)", TRAINING: "training (./train)",
                EVALUATION: "evaluation (./eval)", EXECUTION: "execution"}


def parser(doc):
    p = argparse.ArgumentParser(prog="sweep.py", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Presets (docs/experiments.md, *Presets*): " + ", ".join(PRESETS) +
                                ". Flags given with a preset override it.")
    a = p.add_argument_group("actions")
    a.add_argument("--preset", choices=list(PRESETS), help="start from a preset's settings")
    a.add_argument("--report", metavar="OUT|PREFIX",
                   help="only write the tables, reports and figures: of the sweep in OUT (from its run folders), or "
                        "of published tables PREFIX_results.csv, ... (settings from the preset that publishes there)")
    a.add_argument("--claims", action="store_true",
                   help="write docs/claims.md and README's claims table from the published tables docs/e*_*.csv")
    a.add_argument("--docs", metavar="DIR",
                   help="with --claims: the published tables DIR/e1_*, DIR/e2_*, DIR/e3_* instead, and only "
                        "DIR/claims.md written (README's table is docs/'s)")
    a.add_argument("--no-figures", action="store_true", help="tables and reports only")
    a.add_argument("--dry-run", action="store_true", help="print the commands, run and write nothing")
    groups = {name: p.add_argument_group(title) for name, title in GROUP_TITLES.items()}
    for s in SETTINGS:
        kind = s.kind if s.kind in (int, float) else str
        groups[s.group].add_argument("--" + s.name.replace("_", "-"), dest=s.name, type=kind, metavar=s.name.upper(),
                                     choices=choices(s.name),
                                     help=s.help + default_help(s))
    x = groups[EXECUTION]
    x.add_argument("--gpus", type=int, default=0, metavar="N", help="runs at once, one per GPU (CUDA_VISIBLE_DEVICES)")
    x.add_argument("--slurm", metavar="FILE", help="write a Slurm job-array script, one task per run; run nothing")
    x.add_argument("--run", metavar="NAME", help="train and evaluate this run of the grid only (a Slurm task)")
    x.add_argument("--train-bin", dest="train_bin", default=os.path.join(REPO, "train"), help="./train to run")
    x.add_argument("--eval-bin", dest="eval_bin", default=os.path.join(REPO, "eval"), help="./eval to run")
    return p


def choices(name):
    """The values of a setting that is the sweep's own (a flag's choices are checked against the
    program's table, checks.check_numbers)."""
    return {"experiment": tuple(reports.EXPERIMENTS), "lr_from_rule": ("edge", "best", "matched", "divergence")}.get(name)


def default_help(s):
    if s.default is PROGRAM_DEFAULT:
        return f" (default: {'./train' if s.train else './eval'}'s {s.train or s.eval})"
    return "" if s.default is None else f" (default {s.default})"


def settings_of(a, given):
    """The settings: the defaults (settings.defaults, from the binaries' tables where they are the
    programs'), then the saved settings of --report OUT or the preset, then the
    flags given. Relative paths are from the current folder when given here, from the
    repository when they come from a preset or the defaults."""
    values = defaults(a.train_bin, a.eval_bin)
    if a.report and os.path.isdir(a.report):
        saved = read_json(os.path.join(a.report, "sweep.json"))
        if saved is None:
            raise InputError(f"--report {a.report}: no sweep.json there (not a sweep's output)")
        values.update(saved)
    elif a.preset:
        values.update(PRESETS[a.preset])
    for name in given:
        if name in values and not (a.report and name in TRAINING_SETTINGS):
            values[name] = getattr(a, name)
    if "lr_from" in given and "lr" not in given:
        values["lr"] = None  # --lr-from given takes the learning rates in place of a preset's
    if "train_data" in given and "tokenizer" not in given:
        values["tokenizer"] = None  # a preset's tokenizer is its data's: other data, the one beside it
    for name in PATH_SETTINGS:
        v = values[name]
        if v and not os.path.isabs(v):
            values[name] = os.path.abspath(v) if name in given else os.path.join(REPO, v)
    s = argparse.Namespace(**values)
    s.repo = REPO
    s.train_bin, s.eval_bin = os.path.abspath(a.train_bin), os.path.abspath(a.eval_bin)
    s.gpus, s.slurm, s.run = a.gpus, a.slurm, a.run
    if s.init and not os.path.isabs(s.init) and not checks.is_model_size(s.init) and os.path.exists(s.init):
        s.init = os.path.abspath(s.init)  # a checkpoint file
    return s


def check(s, a, given):
    """Every check of the settings of a sweep that runs (nothing is written yet)."""
    files.check_inputs(sweep_inputs(s))  # before any is read: a FIFO or folder is refused, not waited for
    checks.check_numbers(s)
    checks.check_out(s.out)
    checks.check_gpus(s.gpus)
    s.warmup = checks.resolve_warmup(s)
    if s.lr is None:
        s.lr = lr_from_e1(s)
    checks.check_grid(s)
    if not s.run:
        checks.check_binaries(s)
    s.tokenizer = checks.data_tokenizer(s)
    check_files(s)
    checks.check_model_and_data(s)
    if s.slurm and not os.path.isdir(os.path.dirname(os.path.abspath(s.slurm))):
        raise InputError(f"--slurm {s.slurm}: the folder {os.path.dirname(os.path.abspath(s.slurm))} does not exist")
    # A preset publishes its own experiment only: a grid changed by flags keeps its results in OUT.
    preset = {**defaults(s.train_bin, s.eval_bin), **PRESETS.get(a.preset, {})}
    changed = [k for k in given if BY_NAME[k].group != EXECUTION and getattr(a, k) != preset[k]]
    if a.preset and "publish" not in given and s.publish and changed:
        print(f"sweep: not publishing to {s.publish}_*: {', '.join('--' + k.replace('_', '-') for k in changed)} "
              f"{'differs' if len(changed) == 1 else 'differ'} from the preset", flush=True)
        s.publish = None


def check_files(s):
    """No output of the sweep may replace one of its inputs or a file of a ./train run folder
    (files.check_outputs), and every folder it writes takes files (files.check_folder)."""
    if files.is_run_folder(s.out):
        raise InputError(f"--out {s.out}: is a ./train run folder (it holds config.json or log.jsonl); give the "
                         "sweep a folder of its own")
    inputs = sweep_inputs(s)
    runs_dir = os.path.join(s.out, "runs")
    written = {files.identity(os.path.join(folder, name)) for folder, _, names in os.walk(runs_dir) for name in names}
    for path in inputs:
        if files.identity(path) in written - {None}:
            raise InputError(f"{path}: an input inside {runs_dir}, where the sweep writes and removes files")
    files.check_outputs(sweep_outputs(s), inputs)
    if s.slurm:
        check_slurm_file(s.slurm)
    files.check_folder(s.out, "--out")
    if s.publish:
        files.check_folder(os.path.dirname(s.publish) or ".", "--publish")


def sweep_inputs(s):
    """The files a sweep reads: shards, tokenizer, an --init checkpoint, the programs (a Slurm
    task runs the copies in OUT/bin, which are its own), --lr-from's tables."""
    inputs = glob.glob(s.train_data) + glob.glob(s.val_data) + [s.tokenizer or "", s.init]
    if not s.run:
        inputs += [s.train_bin, s.eval_bin]
    if s.lr_from:
        inputs += [os.path.join(s.lr_from, name) for name in ("sweep.json", "results.csv")]
    return inputs


def sweep_outputs(s):
    """(flag, path) of each file a sweep may write outside its run folders: OUT's tables,
    reports and figures, the copies of the programs (unless they are the programs given), the
    published copies, the Slurm script."""
    names = (("sweep.json", "results.md", "experiment.md") + reports.TABLES + reports.EXTRAS + figures.FIGURES +
             tuple(f for module in reports.EXPERIMENTS.values() for f in module.FILES))
    outputs = [("--out", os.path.join(s.out, name)) for name in names]
    if not s.run:
        programs = (files.identity(s.train_bin), files.identity(s.eval_bin))
        outputs += [("--out", os.path.join(s.out, "bin", name)) for name in ("train", "eval")
                    if files.identity(os.path.join(s.out, "bin", name)) not in programs]
    if s.publish:
        outputs += [("--publish", f"{s.publish}_{name}") for name in names]
    if s.slurm:
        outputs.append(("--slurm", s.slurm))
    return outputs


def check_slurm_file(path):
    """--slurm may replace only a script that sweep.py wrote (write_slurm_script); a stream
    (/dev/stdout, a FIFO) replaces nothing and is written through (files.output_target)."""
    kind, target = files.output_target(path, "--slurm")
    if kind == "stream" or not os.path.exists(target):
        return
    with files.open_input(target, "a script sweep.py wrote") as f:
        head = f.read(len(runner.SLURM_HEAD)).decode("utf-8", errors="replace")
    if head != runner.SLURM_HEAD:
        raise InputError(f"--slurm {path}: exists and is not a script sweep.py wrote; choose another name")


def lr_from_e1(s):
    """The learning rates of a sweep without --lr, from the E1 sweep in s.lr_from (its
    results.csv), by --lr-from-rule (docs/experiments.md, *sweep.py*): edge, Pre-LN's edge of
    stability (e1.pre_ln_edge: where half its runs fail), one lr for every run; best, each
    configuration's best lr there (e1.best_of), as ln/Δt=lr entries; matched, the two matched
    learning rates (e1.matched_lrs) for every run, and each configuration's best lr where it is
    neither; divergence, Pre-LN's divergence edge and the grid's lr above it (e1.divergence_edge)
    for every run. Refuses a grid that would repeat one of E1's runs (check_disjoint)."""
    if not s.lr_from:
        raise InputError("--lr: required (or --lr-from an E1 sweep's output)")
    runs = e1_runs(s.lr_from)
    if s.lr_from_rule == "best":
        lrs = ",".join(best_entries(s, runs, skip=()))
        print(f"sweep: each configuration at its best lr in {s.lr_from}: {lrs}", flush=True)
    elif s.lr_from_rule == "matched":
        matched, common = e1.matched_lrs(runs)
        if not matched:
            raise InputError(f"--lr-from {s.lr_from}: fewer than two learning rates at which every Pre- and Peri-LN "
                             f"configuration learns there ({', '.join(map(fmt_num, common)) or 'none'})")
        lrs = ",".join([fmt_num(lr) for lr in matched] + best_entries(s, runs, skip=matched))
        print(f"sweep: the matched lrs {' and '.join(map(fmt_num, matched))} from {s.lr_from} (every configuration "
              f"learns at {', '.join(map(fmt_num, common))}), and own best lrs: {lrs}", flush=True)
    elif s.lr_from_rule == "divergence":
        found, edge = e1.divergence_edge(runs)
        if not found:
            raise InputError(f"--lr-from {s.lr_from}: Pre-LN's divergence edge is not bracketed there" +
                             (f" ({e1.edge_text(edge)})" if edge else " (no Pre-LN run recorded)"))
        lrs = ",".join(map(fmt_num, found))
        print(f"sweep: lr {lrs} from {s.lr_from}: Pre-LN's divergence edge {e1.edge_text(edge)}", flush=True)
    else:
        lr, edge = e1.pre_ln_edge(runs)
        if lr is None:
            raise InputError(f"--lr-from {s.lr_from}: Pre-LN's edge is not bracketed there" +
                             (f" ({e1.edge_text(edge)})" if edge else " (no Pre-LN run recorded)"))
        print(f"sweep: lr {fmt_num(lr)} from {s.lr_from}: Pre-LN's edge {e1.edge_text(edge)}", flush=True)
        lrs = fmt_num(lr)
    check_disjoint(make_grid(argparse.Namespace(**{**vars(s), "lr": lrs})), runs, s.lr_from)
    return lrs


def e1_runs(folder):
    """The grid of the E1 sweep in `folder` joined to its results.csv."""
    saved = read_json(os.path.join(folder, "sweep.json"))
    if saved is None:
        raise InputError(f"--lr-from {folder}: no sweep.json there (run the e1 preset first)")
    if not os.path.isfile(os.path.join(folder, "results.csv")):
        raise InputError(f"--lr-from {folder}: no results.csv yet (let its sweep finish, or "
                         f"python3 sweep.py --report {folder})")
    return on_grid(make_grid(argparse.Namespace(**{**own_defaults(), **saved, "out": folder})), load(folder).results)


def best_entries(s, runs, skip):
    """"ln/Δt=lr" of each configuration of the sweep at its best lr in `runs` (e1.best_of), those at
    a learning rate in `skip` left out."""
    entries = []
    for ln in parse_list(s.ln, "ln", "--ln"):
        for dt in parse_list(s.dt, "dt", "--dt"):
            best = e1.best_of(runs[(runs.ln == ln) & (runs.dt == dt)])
            if best is None:
                raise InputError(f"--lr-from {s.lr_from}: no recorded run of {ln}/{fmt_num(dt)} there")
            if best not in skip:
                entries.append(f"{ln}/{fmt_num(dt)}={fmt_num(best)}")
    return entries


def check_disjoint(grid, runs, folder):
    """Refuses a grid that shares a run, the same (placement, Δt, wd, lr, seed), with the sweep in
    `folder` whose learning rates it takes: no experiment may reuse another's runs."""
    theirs = {(r.ln, r.dt, r.wd, r.lr, r.seed) for r in recorded(runs).itertuples()}
    shared = sorted({(r.ln, r.dt, r.wd, r.lr, r.seed) for r in grid} & theirs)
    if shared:
        ln, dt, wd, lr, seed = shared[0]
        raise InputError(f"--lr-from {folder}: {len(shared)} runs of this grid are runs there too (e.g. {ln}, Δt "
                         f"{fmt_num(dt)}, wd {fmt_num(wd)}, lr {fmt_num(lr)}, seed {seed}); give --seeds that {folder} "
                         "does not have")


def saved_settings(s):
    """The settings to keep in OUT/sweep.json; refuses when OUT holds runs made with other
    training settings. The grid kept is the union of OUT's and this one."""
    mine = {k: getattr(s, k) for k in BY_NAME}
    saved = read_json(os.path.join(s.out, "sweep.json"))
    # Settings of an OUT where no run has started (./train refused them, say) may be replaced.
    if saved is None or not glob.glob(os.path.join(s.out, "runs", "*", "log.jsonl")):
        return mine
    changed = [k for k in TRAINING_SETTINGS if saved.get(k) != mine.get(k)]
    if changed:
        raise InputError(f"{s.out} holds runs made with other settings "
                         f"({', '.join(f'{k}: {saved.get(k)} → {mine.get(k)}' for k in changed)}); use another --out")
    grid = {k: mine[k] for k in GRID_SETTINGS}
    for k in grid:
        mine[k] = union(k, saved.get(k), mine[k])
    if s.publish and any(mine[k] != union(k, None, grid[k]) for k in grid):
        print(f"sweep: not publishing to {s.publish}_*: {s.out} also holds runs of another grid", flush=True)
        s.publish = mine["publish"] = None
    return mine


def union(axis, old, new):
    """The values of grid axis `axis` in either comma list (each once, the old ones first), as a
    comma list; None when both are empty."""
    kind = {"ln": "ln", "precision": "precision", "seeds": "int", "post_seeds": "int", "depth": "int", "lr": "lr",
            "post_lr": "lr"}.get(axis, "float")
    values = []
    for text in (old, new):
        if text:
            values += [v for v in parse_list(text, kind, "--" + axis) if v not in values]
    return ",".join(value_text(v) for v in values) or None


def report(s, out, runs, draw):
    """Collects the run folders of OUT into its tables, then writes the reports and figures
    (and publishes them with --publish)."""
    if os.path.isdir(os.path.join(out, "runs")):
        collect.collect(out, runs)
    text, figures = reports.write_reports(s, runs, load(out), lambda name: os.path.join(out, name),
                                          run_dir=lambda name: os.path.join(out, "runs", name), draw=draw)
    print(text, end="")
    print(f"tables: {', '.join(os.path.join(out, n) for n in reports.TABLES + ('results.md',))}")
    if figures:
        print(figures)
    if s.publish:
        print(reports.publish(s, out, s.publish))


def report_published(a, draw):
    """--report PREFIX: rewrites the reports and figures of published tables PREFIX_*, with the
    settings of the preset that publishes there (or --preset)."""
    prefix = os.path.abspath(a.report)
    preset = a.preset or next((name for name, p in PRESETS.items()
                               if p.get("publish") and os.path.join(REPO, p["publish"]) == prefix), None)
    if preset is None:
        raise InputError(f"--report {a.report}: no preset publishes there; give --preset NAME")
    s, tables = reports.published(prefix, preset)
    text, figures = reports.write_reports(s, make_grid(s), tables, lambda name: f"{prefix}_{name}", draw=draw)
    print(text, end="")
    if figures:
        print(figures)


# The files --report reads first: the settings and the tables of the runs.
REPORT_INPUTS = ("sweep.json", "results.csv", "layers.csv", "init_layers.csv")


def main(argv, doc, script):
    p = parser(doc)
    a = p.parse_args(argv)
    given = [s.name for s in SETTINGS if getattr(a, s.name) is not None]
    try:
        if a.docs and not a.claims:
            raise InputError("--docs: only with --claims")
        if a.claims:
            return claims.main(REPO, os.path.abspath(a.docs) if a.docs else None)
        if a.report:  # what --report reads: regular files only, refused before any is read
            files.check_inputs([os.path.join(a.report, name) for name in REPORT_INPUTS] if os.path.isdir(a.report)
                               else [f"{a.report}_{name}" for name in REPORT_INPUTS])
        if a.report and not os.path.isdir(a.report):
            if not os.path.isfile(a.report + "_results.csv"):
                raise InputError(f"--report {a.report}: neither a sweep's output folder nor published tables "
                                 f"({a.report}_results.csv)")
            files.check_folder(os.path.dirname(a.report) or ".", "--report")
            report_published(a, draw=not a.no_figures)
            return 0
        s = settings_of(a, given)
        if a.report:
            s.warmup = checks.resolve_warmup(s)
            files.check_folder(s.out, "--report")
            report(s, s.out, make_grid(s), draw=not a.no_figures)
            return 0
        check(s, a, given)
        signals = runner.Signals()
        with signals.forwarding():
            return run(s, a, argv, script, signals)
    except (InputError, ResultsError) as e:
        print(f"sweep: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a write that failed: read-only or full disk, a name too long, ...
        print(f"sweep: {files.os_error_text(e)}", file=sys.stderr)
        return 4
    except runner.Stopped as e:
        print(f"sweep: stopped by {signal.Signals(e.args[0]).name}: the runs in progress saved a checkpoint; run the "
              "same command again to continue", file=sys.stderr)
        return 128 + e.args[0]
    except KeyboardInterrupt:
        print("sweep: interrupted; run the same command again to continue", file=sys.stderr)
        return 130


def run(s, a, argv, script, signals):
    """Runs the grid (or, with --run, one run; with --slurm, writes the job array)."""
    saved = saved_settings(s)
    runs = make_grid(s)
    if s.run:
        return run_alone(s, runs, s.run, signals)
    if not a.dry_run:
        os.makedirs(s.out, exist_ok=True)
        runner.write_json(os.path.join(s.out, "sweep.json"), saved)
        use_private_binaries(s)
    if s.slurm:
        write_slurm_script(s, runs, argv, os.path.abspath(script))
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = s.gpus or s.jobs or max(1, cores // max(1, s.threads or cores))
    todo = pending(runs)
    print(f"sweep: {len(runs)} runs ({len(runs) - len(todo)} recorded, {len(todo)} to do), {jobs} at once " +
          ("one per GPU" if s.gpus else f"with {s.threads or 'all'} thread(s) each") + f"; output {s.out}", flush=True)
    if a.dry_run:
        for r in todo:
            print(shlex.join(runner.train_command(s, r)))  # quoted: globs and spaces survive a paste
            print(shlex.join(runner.eval_command(s, r)))
        return 0
    failed = execute(s, todo, jobs, signals)
    # Report on the whole grid recorded in OUT (this invocation's and earlier ones).
    every = argparse.Namespace(**{**vars(s), **{k: saved[k] for k in GRID_SETTINGS}})
    while s.lr_extend and not failed:
        collect.collect(s.out, make_grid(every))
        add, why = e1.extension(on_grid(make_grid(every), load(s.out).results))
        if not add:
            break
        print(f"sweep: the grid does not bracket the edge ({'; '.join(why)}): adding lr "
              f"{', '.join(fmt_num(lr) for lr in add)}", flush=True)
        s.lr = union("lr", every.lr, ",".join(fmt_num(lr) for lr in add))
        saved = saved_settings(s)
        runner.write_json(os.path.join(s.out, "sweep.json"), saved)
        every = argparse.Namespace(**{**vars(s), **{k: saved[k] for k in GRID_SETTINGS}})
        failed = execute(s, pending(make_grid(every)), jobs, signals)
    if s.intervene and not failed:
        intervene.intervene(every, make_grid(every), intervene.K, lambda run, model, out: runner.eval_command(
            every, run, model, out, eval_batches=1))
    report(every, s.out, make_grid(every), draw=not a.no_figures)
    return 1 if failed else 0


def pending(runs):
    """The runs not recorded yet, seed-major, so a sweep stopped early has every configuration at
    its first seeds."""
    return sorted((r for r in runs if read_json(os.path.join(r.dir, "result.json")) is None),
                  key=lambda r: (r.seed, runs.index(r)))


def execute(s, todo, jobs, signals):
    """Trains and evaluates the runs `todo`, `jobs` at a time; returns how many failed."""
    sweep = runner.Sweep(s, signals)
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda r: sweep.run_safely(r, len(todo)), todo))
    if sweep.refused:
        raise InputError(f"./train refused the settings: {sweep.refused}")
    failed = sum(1 for r in results if r is None)
    print(f"sweep: {len(todo) - failed} runs done in {(time.time() - start) / 60:.1f} min"
          + (f", {failed} failed (run the same command again to retry them)" if failed else ""), flush=True)
    return failed


def run_alone(s, runs, name, signals):
    """--run NAME: trains and evaluates that run of the grid (unless recorded), no tables."""
    run = next((r for r in runs if r.name == name), None)
    if run is None:
        raise InputError(f"--run {name}: not a run of this grid")
    sweep = runner.Sweep(s, signals)
    result = sweep.run_one(run, 1)
    if sweep.refused:
        raise InputError(f"./train refused the settings: {sweep.refused}")
    return 0 if result is not None else 1

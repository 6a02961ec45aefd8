#!/usr/bin/env python3
"""sweep.py — runs ./train and ./eval over a grid of configurations × seeds; tables and figures.

The grid is LayerNorm placements × residual steps Δt × weight decays × learning rates × depths ×
precisions × seeds, at one model width, schedule and step count.

    python3 sweep.py --preset e1                      # E1 of docs/experiments.md, "The protocol" (then e2, e3)
    python3 sweep.py --preset gpt2-124m               # the paper's GPT-2 setup on OpenWebText (GPU)
    python3 sweep.py --init l8h2c64v4096 --ln pre,peri --dt 1,0.1 --wd 0,0.1 --lr 1e-3,1e-2 --seeds 1-5 \\
                     --steps 600 --B 8 --T 64 --out runs/mine
    python3 sweep.py --report runs/mine               # only (re)write the tables and figures
    python3 sweep.py --preset gpt2-124m --gpus 8      # one run per GPU of this node, 8 at once
    python3 sweep.py --preset gpt2-124m --slurm sweep.sbatch   # a Slurm job array instead; sbatch it

Spreading runs: --gpus N runs N at once, each on its own GPU (CUDA_VISIBLE_DEVICES=0..N-1, one
per run). --slurm FILE runs nothing: it writes FILE, an sbatch script with one array task per
run of the grid; each task runs `sweep.py ... --run NAME` (that run alone, without the tables)
and does nothing when the run is recorded, so FILE can be submitted again after a failure. When
the tasks are done, `--report OUT` writes the tables. README "Training on several GPUs or
nodes" says when this, and when data parallelism, is the better use of a cluster.

Every run is `./train ... -out OUT/runs/NAME -resume 1`, then `./eval -model FINAL -json
OUT/runs/NAME/eval.json`, as subprocesses with `-threads` set so that jobs × threads ≤ cores.
The sweep is resumable: a run whose OUT/runs/NAME/result.json exists is not redone, an
interrupted run continues from its last checkpoint, and one that finished training but not its
evaluation is only evaluated.

Every run ends with one outcome (README, "Run outcomes"): nonfinite or diverged when ./train
stopped it (exit status 3), else collapsed when ./eval's final validation loss is not below
./eval's unigram_ce of the same tokens, else ok; its transient spikes are counted beside.

Output in OUT:
    sweep.json                the settings (a rerun with different training settings is refused)
    runs/NAME/                ./train's log.jsonl, config.json and final model_%08d.bin, train.log, eval.json,
                              eval.log and result.json
                              (NAME = {ln}_dt{Δt}_wd{wd}_lr{lr}[_L{depth}][_{precision}]_s{seed})
    results.csv               one row per run: outcome, stop step, spikes, val loss, baselines,
                              perplexities, accuracy, ROUGE, hidden-state growth, ...
    layers.csv                one row per run and layer i = 0..L: every per-layer diagnostic
    results.md                the table per configuration: outcome counts, then mean ± std (n)
                              over the runs that finished
    experiment.md, and lr.csv, fits.csv or tests.csv   (experiment presets e1, e2, e3)
    hidden_states.png, loss.png, grad_norm.png, sensitivity.png, loss_vs_lr.png (e1),
    growth.png (e2)           (need matplotlib)

Standard library only. Figures need matplotlib; when this interpreter lacks it and
/usr/bin/python3 has it (Debian: apt-get install python3-matplotlib), that interpreter draws
them; otherwise one line says why there are none and the tables are still written.
"""
import argparse
import concurrent.futures
import csv
import glob
import json
import math
import os
import queue
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time

import analysis

REPO = os.path.dirname(os.path.abspath(__file__))
PLACEMENTS = ("pre", "post", "peri")
PLACEMENT_LABEL = {"pre": "Pre-LN", "post": "Post-LN", "peri": "Peri-LN"}

# ---------------------------------------------------------------------------------------------
# Presets (docs/experiments.md, "The protocol"). e1, e2, e3 are the CPU experiments on the bundled
# corpus with its compact vocabulary (prepare_data.py compact): an 8-block, 64-channel GPT-2
# trained for 1200 steps of 8×64 tokens (about 2 epochs); `proxy` is the same protocol sized for
# one GPU; the gpt2-* ones are the paper's GPT-2 setup (AdamW β = (0.9, 0.95), lr 6e-4 with
# warmup and cosine decay to lr/10, clipping at 1.0, weight decay 0.1 against 0) on OpenWebText
# shards made by `prepare_data.py openwebtext`.
COMPACT = dict(train_data="data/mobydick_v4096_train_*.bin", val_data="data/mobydick_v4096_val_*.bin",
               tokenizer="data/mobydick_v4096_tokenizer.bin")
SMALL = dict(COMPACT, init="l8h2c64v4096", wd="0.1", seeds="1", warmup=30, steps=1200, B=8, T=64, clip=1.0,
             beta2=0.95, eval_every=400, eval_batches=16, save_every=400, stats_every=100, eval_B=8, diag_batches=1,
             directions=2, noise_samples=2, device="cpu", threads=1, jobs=2)
E1_LRS = "1e-3,3e-3,1e-2,3e-2,1e-1"
OWT_TRAIN = "data/openwebtext/openwebtext_train_*.bin"
OWT_VAL = "data/openwebtext/openwebtext_val_*.bin"
GPT2_COMMON = dict(ln="pre,peri,post", dt="1,0.1", wd="0.1,0", seeds="1-3", lr="6e-4", warmup=700,
                   steps=19073, B=16, T=1024, total_batch=524288, clip=1.0, beta2=0.95, eval_every=500,
                   eval_batches=8, save_every=1000, stats_every=500, eval_B=2, diag_batches=1, directions=2,
                   train_data=OWT_TRAIN, val_data=OWT_VAL, tokenizer=None, device="cuda", precision="bf16",
                   threads=0, jobs=1)
PRESETS = {
    # E1: learning-rate sensitivity of every placement and Δt.
    "e1": dict(SMALL, experiment="e1", ln="pre,peri,post", dt="1,0.1", lr=E1_LRS, seeds="1-3", out="runs/e1",
               publish="docs/e1"),
    # E2: growth of the hidden states with depth, at init (step 0) and after 300 steps.
    "e2": dict(SMALL, experiment="e2", ln="pre,peri", dt="1,0.1", lr="3e-3", depth="4,8,16,32", steps=300, seeds="1-5",
               save_every=150, eval_every=150, stats_every=50, out="runs/e2", publish="docs/e2"),
    # E3: outcomes with and without weight decay at the edge-of-stability lr of E1 (lr_from),
    # 600 steps (the same warmup and peak lr as E1, a cosine decay twice as fast).
    "e3": dict(SMALL, experiment="e3", ln="pre,peri", dt="1,0.1", wd="0,0.1", seeds="1-5", lr=None,
               lr_from="runs/e1", steps=600, save_every=300, eval_every=300, out="runs/e3", publish="docs/e3"),
    # The E1 grid on one GPU: a wider model, 4x the batch, 2000 steps, bf16 and fp32, 6 runs at once.
    "proxy": dict(SMALL, experiment="e1", init="l8h4c256v4096", ln="pre,peri,post", dt="1,0.1", lr=E1_LRS,
                  precision="bf16,fp32", B=32, T=256, steps=2000, warmup=100, eval_every=500, save_every=1000,
                  stats_every=250, eval_B=8, device="cuda", threads=2, jobs=6, out="runs/proxy", publish=None),
    "gpt2-124m": dict(GPT2_COMMON, init="d12", out="runs/gpt2-124m"),
    "gpt2-350m": dict(GPT2_COMMON, init="d24", B=8, out="runs/gpt2-350m"),
    "gpt2-774m": dict(GPT2_COMMON, init="d36", B=4, out="runs/gpt2-774m"),
    "gpt2-1.5b": dict(GPT2_COMMON, init="d48", B=2, out="runs/gpt2-1.5b"),
}

DEFAULTS = dict(
    init="l8h2c64v4096", ln="pre,peri,post", dt="1,0.1", wd="0.1", seeds="1-3", lr="6e-4", depth=None,
    precision=None, lr_min_ratio=0.1, warmup=20, steps=300, B=4, T=64, total_batch=0, clip=1.0, beta2=0.95,
    outcome_window=20, diverge_rise=1.0, spike_rise=1.0, eval_every=100, eval_batches=16, save_every=100,
    stats_every=50, eval_B=8, diag_batches=1, directions=4, sigma=None, noise_samples=4,
    **COMPACT, device="cpu", threads=1, jobs=0, out="runs/sweep", publish=None, experiment=None, lr_from=None)

# Settings that change where and how fast runs go, not what they compute.
EXECUTION_SETTINGS = ("device", "threads", "jobs", "out", "publish")

# The settings that decide what a run computes: a rerun into the same OUT must keep them.
TRAINING_SETTINGS = ("init", "lr_min_ratio", "warmup", "steps", "B", "T", "total_batch", "clip", "beta2",
                     "outcome_window", "diverge_rise", "spike_rise", "train_data", "val_data")

# The grid axes: a rerun into the same OUT may add values.
GRID_SETTINGS = ("ln", "dt", "wd", "lr", "depth", "precision", "seeds")


# ./train -init's fresh sizes (model.h): the named ones and l{L}h{NH}c{C}[v{V}][t{maxT}]. A size
# spelling wins over a file of that name, in ./train and here.
NAMED_SIZES = ("d6", "d12", "d24", "d36", "d48")
CUSTOM_SIZE = re.compile(r"l(\d+)h(\d+)c(\d+)(?:v\d+)?(?:t\d+)?")


def is_model_size(spec):
    return spec in NAMED_SIZES or CUSTOM_SIZE.fullmatch(spec) is not None


class SweepError(Exception):
    """Bad input or a missing program: reported as one line, exit status 2."""


# ---------------------------------------------------------------------------------------------
# The grid

def parse_list(text, kind, flag):
    values = []
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            continue
        try:
            if kind == "seeds" and "-" in item:
                lo, hi = (int(x) for x in item.split("-"))
                values.extend(range(lo, hi + 1))
            elif kind in ("seeds",):
                values.append(int(item))
            elif kind == "ln":
                if item not in PLACEMENTS:
                    raise ValueError
                values.append(item)
            else:
                values.append(float(item))
        except ValueError:
            raise SweepError(f"{flag}: cannot read '{item}'")
    if not values:
        raise SweepError(f"{flag}: empty list")
    return values


def fmt_num(x):
    """1.0 → "1", 0.1 → "0.1", 6e-4 → "0.0006": short and stable for names."""
    return f"{x:g}"


class Run:
    """One run of the grid: placement, Δt, weight decay, learning rate, depth (None: the depth of
    --init), precision (None: the program's default) and seed.
    NAME = {ln}_dt{Δt}_wd{wd}_lr{lr}[_L{depth}][_{precision}]_s{seed}."""
    def __init__(self, ln, dt, wd, lr, depth, precision, seed, out):
        self.ln, self.dt, self.wd, self.lr, self.depth, self.precision, self.seed = ln, dt, wd, lr, depth, precision, seed
        self.name = (f"{ln}_dt{fmt_num(dt)}_wd{fmt_num(wd)}_lr{fmt_num(lr)}" + (f"_L{depth}" if depth else "") +
                     (f"_{precision}" if precision else "") + f"_s{seed}")
        self.dir = os.path.join(out, "runs", self.name)
        self.config = (ln, dt, wd, lr, depth, precision)


def init_for(s, depth):
    """./train's -init for a run: --init, with its number of blocks replaced by `depth` when the
    grid has a depth axis (--depth, which needs a size l{L}h{NH}c{C}...)."""
    if depth is None:
        return s.init
    size = CUSTOM_SIZE.fullmatch(s.init)
    if not size:
        raise SweepError(f"--depth needs --init of the form l{{L}}h{{NH}}c{{C}}..., not {s.init}")
    return f"l{depth}" + s.init[s.init.index("h"):]


def make_grid(s):
    runs = []
    depths = [int(d) for d in parse_list(s.depth, "seeds", "--depth")] if s.depth else [None]
    if any(d < 1 for d in depths if d is not None):
        raise SweepError("--depth: every value must be ≥ 1")
    for d in depths:
        init_for(s, d)
    precisions = [p.strip() for p in s.precision.split(",") if p.strip()] if s.precision else [None]
    if any(p not in ("bf16", "fp32", None) for p in precisions):
        raise SweepError(f"--precision: bf16 or fp32, not {s.precision}")
    for ln in parse_list(s.ln, "ln", "--ln"):
        for dt in parse_list(s.dt, "dt", "--dt"):
            if dt <= 0:
                raise SweepError("--dt: every value must be > 0")
            for wd in parse_list(s.wd, "wd", "--wd"):
                if wd < 0:
                    raise SweepError("--wd: every value must be ≥ 0")
                for lr in parse_list(s.lr, "lr", "--lr"):
                    if lr <= 0:
                        raise SweepError("--lr: every value must be > 0")
                    for depth in depths:
                        for precision in precisions:
                            for seed in parse_list(s.seeds, "seeds", "--seeds"):
                                runs.append(Run(ln, dt, wd, lr, depth, precision, seed, s.out))
    return runs


# ---------------------------------------------------------------------------------------------
# One run

def read_jsonl(path):
    records = []
    if not os.path.exists(path):
        return records
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line cut short by an interruption
    return records


def refusal(log_path):
    """./train's one-line refusal ("train: ...") in a run's train.log, or "" when there is none."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.startswith("train: ")]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def final_model(run, s):
    return os.path.join(run.dir, f"model_{s.steps:08d}.bin")


def first_loss(log):
    for r in log:
        if r.get("step") == 0 and "loss" in r and "event" not in r:
            return r["loss"]
    return None


# Run outcomes (README "Run outcomes"): ./train stops a run as nonfinite or diverged; a run that
# finished is collapsed when its final validation loss (./eval's) is not below ./eval's
# unigram_ce of the same tokens, else ok.
OUTCOMES = ("ok", "collapsed", "diverged", "nonfinite")
FINISHED = ("ok", "collapsed")


def finished_outcome(ev, log):
    """The result fields of a run that trained to the end, from its eval.json and log.jsonl."""
    loss, unigram = ev.get("val_loss"), ev.get("unigram_ce")
    spikes = next((r.get("spikes") for r in reversed(log) if r.get("event") == "outcome"), None)
    if loss is None or not math.isfinite(loss):
        return dict(outcome="nonfinite", stopped_step=None, reason="final validation loss is not finite", spikes=spikes)
    collapsed = unigram is not None and loss >= unigram
    return dict(outcome="collapsed" if collapsed else "ok", val_loss=loss, unigram_ce=unigram, spikes=spikes,
                reason=f"val loss {loss:.4g} ≥ unigram_ce {unigram:.4g}" if collapsed else None)


class Sweep:
    def __init__(self, s):
        self.s = s
        self.lock = threading.Lock()
        self.refused = None  # ./train's message when it refused its input (exit 2): the sweep stops
        self.done = 0
        self.free_gpus = queue.Queue()  # with --gpus N: the GPU numbers no run is using
        for gpu in range(s.gpus):
            self.free_gpus.put(gpu)

    def say(self, text):
        with self.lock:
            print(text, flush=True)

    def train_command(self, run):
        s = self.s
        cmd = [s.train_bin, "-device", s.device, "-ln", run.ln, "-dt", repr(run.dt), "-wd", repr(run.wd),
               "-seed", str(run.seed), "-init", init_for(s, run.depth), "-train_data", s.train_data,
               "-val_data", s.val_data, "-B", str(s.B), "-T", str(s.T), "-steps", str(s.steps),
               "-lr", repr(run.lr), "-lr_min", repr(run.lr * s.lr_min_ratio),
               "-warmup", str(s.warmup), "-clip", repr(s.clip), "-beta2", repr(s.beta2),
               "-outcome_window", str(s.outcome_window), "-diverge_rise", repr(s.diverge_rise),
               "-spike_rise", repr(s.spike_rise), "-eval_every", str(s.eval_every),
               "-eval_batches", str(s.eval_batches), "-save_every", str(s.save_every),
               "-stats_every", str(s.stats_every), "-out", run.dir, "-resume", "1"]
        if s.total_batch:
            cmd += ["-total_batch", str(s.total_batch)]
        if run.precision:
            cmd += ["-precision", run.precision]
        if s.threads:
            cmd += ["-threads", str(s.threads)]
        return cmd

    def eval_command(self, run):
        s = self.s
        cmd = [s.eval_bin, "-device", s.device, "-model", final_model(run, s), "-val_data", s.val_data,
               "-train_data", s.train_data, "-B", str(s.eval_B), "-T", str(s.T), "-eval_batches", str(s.eval_batches),
               "-diag_batches", str(s.diag_batches), "-directions", str(s.directions),
               "-noise_samples", str(s.noise_samples), "-json", os.path.join(run.dir, "eval.json")]
        if s.sigma is not None:
            cmd += ["-sigma", repr(s.sigma)]
        if s.tokenizer:
            cmd += ["-tokenizer", s.tokenizer]
        if run.precision:
            cmd += ["-precision", run.precision]
        if s.threads:
            cmd += ["-threads", str(s.threads)]
        return cmd

    def execute(self, cmd, log_path, gpu=None):
        """Runs cmd with its output in log_path; on GPU number `gpu` alone when given."""
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu)) if gpu is not None else None
        with open(log_path, "a", encoding="utf-8") as log:
            log.write("$ " + ("" if gpu is None else f"CUDA_VISIBLE_DEVICES={gpu} ") + " ".join(cmd) + "\n")
            log.flush()
            try:
                return subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
            except OSError as e:
                log.write(f"cannot run {cmd[0]}: {e}\n")
                return 127

    def clean(self, run, keep_final):
        """Drops what a recorded run no longer needs: optimiser states, intermediate checkpoints
        (and the final model too for a run that stopped early)."""
        final = os.path.basename(final_model(run, self.s))
        for name in os.listdir(run.dir):
            if name.startswith("state_") or (
                    name.startswith("model_") and not (keep_final and name == final)):
                os.remove(os.path.join(run.dir, name))

    def run_one(self, run, total):
        """Trains and evaluates one run unless it is recorded (on a GPU of its own with --gpus);
        returns its result dict."""
        if not self.s.gpus:
            return self.train_and_evaluate(run, total, None)
        gpu = self.free_gpus.get()
        try:
            return self.train_and_evaluate(run, total, gpu)
        finally:
            self.free_gpus.put(gpu)

    def train_and_evaluate(self, run, total, gpu):
        s = self.s
        result_path = os.path.join(run.dir, "result.json")
        result = read_json(result_path)
        if result is not None or self.refused:
            return result
        os.makedirs(run.dir, exist_ok=True)
        start = time.time()
        eval_json = os.path.join(run.dir, "eval.json")
        result = dict(name=run.name, ln=run.ln, dt=run.dt, wd=run.wd, lr=run.lr, depth=run.depth,
                      precision=run.precision, seed=run.seed)
        if not os.path.exists(final_model(run, s)):
            status = self.execute(self.train_command(run), os.path.join(run.dir, "train.log"), gpu)
            log = read_jsonl(os.path.join(run.dir, "log.jsonl"))
            if status == 3:
                event = next((r for r in reversed(log) if r.get("event") == "diverged"), {})
                result.update(outcome=event.get("outcome", "diverged"), stopped_step=event.get("step"),
                              reason=event.get("reason", "./train exited with status 3"), spikes=event.get("spikes"))
            elif status == 2:  # bad input: every run would be refused alike
                self.refused = refusal(os.path.join(run.dir, "train.log")) or "see " + os.path.join(run.dir, "train.log")
                return None
            elif status != 0 or not os.path.exists(final_model(run, s)):
                return self.failed(run, f"./train exited with status {status}", "train.log")
        result["train_seconds"] = round(time.time() - start, 1)
        if "outcome" not in result:
            if read_json(eval_json) is None:
                t0 = time.time()
                status = self.execute(self.eval_command(run), os.path.join(run.dir, "eval.log"), gpu)
                if status != 0 or read_json(eval_json) is None:
                    return self.failed(run, f"./eval exited with status {status}", "eval.log")
                result["eval_seconds"] = round(time.time() - t0, 1)
            result.update(finished_outcome(read_json(eval_json), read_jsonl(os.path.join(run.dir, "log.jsonl"))))
        write_json(result_path, result)
        self.clean(run, keep_final=result["outcome"] in FINISHED)
        with self.lock:
            self.done += 1
            done = self.done
        what = (f"{result['outcome']} at step {result['stopped_step']}: {result['reason']}"
                if result["outcome"] not in FINISHED else
                f"{result['outcome']}, val loss {result['val_loss']:.4f} (unigram_ce " +
                (f"{result['unigram_ce']:.4f})" if result.get("unigram_ce") is not None else "not computed)"))
        self.say(f"[{done}/{total}] {run.name}: {what} ({time.time() - start:.0f} s)")
        return result

    def failed(self, run, why, log_name):
        self.say(f"FAILED {run.name}: {why}; see {os.path.join(run.dir, log_name)} (it will be retried next time)")
        return None


# ---------------------------------------------------------------------------------------------
# Collecting results

def mean_std(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None, None, 0
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None), len(values)


def run_record(run):
    """Everything known about one run, from its files (None when not recorded)."""
    result = read_json(os.path.join(run.dir, "result.json"))
    if result is None:
        return None
    log = read_jsonl(os.path.join(run.dir, "log.jsonl"))
    ev = read_json(os.path.join(run.dir, "eval.json")) if result.get("outcome") in FINISHED else None
    steps = [(r["step"], r["loss"]) for r in log if "loss" in r and "event" not in r and r["loss"] is not None]
    return dict(run=run, result=result, log=log, eval=ev, steps=steps)


def last_stats(log):
    """The last `stats` record of ./train's log (-stats_every) with finite values, or None."""
    for r in reversed(log):
        if r.get("event") == "stats" and r.get("mean_abs") and all(x is not None for x in r["mean_abs"]):
            return r
    return None


def layer_series(ev):
    """Per-layer series (i = 0..L) of an eval.json, None entries where not defined."""
    lay, sens, unc = ev.get("layers") or {}, ev.get("sensitivity") or {}, ev.get("uncertainty") or {}
    n = len(lay.get("mean_abs", []))
    pad = lambda v: [None] + list(v) if v else [None] * n  # block quantities: none at i = 0
    stream = lambda v: list(v) if v else [None] * n          # X_0..X_L quantities, absent in older eval.json
    return dict(mean_abs=lay.get("mean_abs", []), entry_var=lay.get("entry_var", []),
                data_var=lay.get("data_var", []), rms=stream(lay.get("rms")), grad_norm=lay.get("grad_norm", []),
                grad_norm_scaled=stream(lay.get("grad_norm_scaled")),
                param_grad_norm=pad(lay.get("param_grad_norm")), attn_logit_max=pad(lay.get("attn_logit_max")),
                param_norm=pad(lay.get("param_norm")), fcproj_grad_norm=pad(lay.get("fcproj_grad_norm")),
                mlp_hidden_rms=pad(lay.get("mlp_hidden_rms")), sens_mean=pad(sens.get("block_mean")),
                sens_max=pad(sens.get("block_max")), noise_dx=stream(unc.get("mean_dx")),
                w2_bound=stream(unc.get("w2_bound")),
                relative_amplification=stream(unc.get("relative_amplification")))


RESULT_COLUMNS = ["run", "ln", "dt", "wd", "lr", "depth", "precision", "seed", "outcome", "stopped_step", "reason", "spikes",
                  "first_train_loss", "final_train_loss", "val_loss", "unigram_ce", "bigram_ce", "val_ppl", "ppl_seq",
                  "accuracy", "logit_max", "log_z_mean", "rouge1", "rouge2", "rougeL", "rouge1_stem", "rouge2_stem",
                  "rougeL_stem", "mean_abs_0", "mean_abs_L", "mean_abs_growth", "entry_var_L", "data_var_L",
                  "grad_norm_0", "grad_norm_L", "grad_norm_scaled_0", "grad_norm_scaled_L", "attn_logit_max",
                  "sens_mean_max", "w2_bound_L", "relative_amplification_L", "train_stats_step",
                  "train_mean_abs_0", "train_mean_abs_L", "train_seconds", "eval_seconds"]
RUN_KEYS = ["run", "ln", "dt", "wd", "lr", "depth", "precision", "seed"]
LAYER_KEYS = ["mean_abs", "entry_var", "data_var", "rms", "grad_norm", "grad_norm_scaled", "param_grad_norm",
              "attn_logit_max", "param_norm", "fcproj_grad_norm", "mlp_hidden_rms", "sens_mean", "sens_max",
              "noise_dx", "w2_bound", "relative_amplification"]
LAYER_COLUMNS = RUN_KEYS + ["layer"] + LAYER_KEYS


def result_row(rec):
    run, res, ev = rec["run"], rec["result"], rec["eval"]
    row = dict(run_keys(run), outcome=res["outcome"], stopped_step=res.get("stopped_step"), reason=res.get("reason"),
               spikes=res.get("spikes"), first_train_loss=first_loss(rec["log"]),
               train_seconds=res.get("train_seconds"), eval_seconds=res.get("eval_seconds"))
    stats = last_stats(rec["log"])
    if stats:
        row.update(train_stats_step=stats["step"], train_mean_abs_0=stats["mean_abs"][0],
                   train_mean_abs_L=stats["mean_abs"][-1])
    tail = [loss for _, loss in rec["steps"][-10:]]
    row["final_train_loss"] = statistics.fmean(tail) if tail else None
    if ev:
        row.update({k: ev.get(k) for k in ("val_loss", "unigram_ce", "bigram_ce", "val_ppl", "ppl_seq", "accuracy",
                                           "logit_max", "log_z_mean")})
        for k, v in (ev.get("rouge") or {}).items():
            if k in RESULT_COLUMNS:
                row[k] = v
        ls = layer_series(ev)
        if ls["mean_abs"]:
            row.update(mean_abs_0=ls["mean_abs"][0], mean_abs_L=ls["mean_abs"][-1],
                       mean_abs_growth=ls["mean_abs"][-1] / ls["mean_abs"][0] if ls["mean_abs"][0] else None,
                       entry_var_L=ls["entry_var"][-1], data_var_L=ls["data_var"][-1],
                       grad_norm_0=ls["grad_norm"][0], grad_norm_L=ls["grad_norm"][-1],
                       grad_norm_scaled_0=ls["grad_norm_scaled"][0], grad_norm_scaled_L=ls["grad_norm_scaled"][-1],
                       attn_logit_max=max((x for x in ls["attn_logit_max"] if x is not None), default=None),
                       relative_amplification_L=ls["relative_amplification"][-1],
                       sens_mean_max=max(x for x in ls["sens_mean"] if x is not None) if len(ls["sens_mean"]) > 1 else None,
                       w2_bound_L=ls["w2_bound"][-1])
    return row


def run_keys(run):
    return dict(run=run.name, ln=run.ln, dt=run.dt, wd=run.wd, lr=run.lr, depth=run.depth, precision=run.precision,
                seed=run.seed)


def csv_value(v):
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else v


def write_csv(path, columns, rows):
    tmp = path + ".tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for r in rows:
            w.writerow([csv_value(r.get(c)) for c in columns])
    os.replace(tmp, path)


def configs_in_order(runs):
    seen = []
    for r in runs:
        if r.config not in seen:
            seen.append(r.config)
    return seen


def config_label(config):
    ln, dt, wd, lr, depth, precision = config
    return (f"{PLACEMENT_LABEL[ln]} Δt={fmt_num(dt)} wd={fmt_num(wd)} lr={fmt_num(lr)}" +
            (f" L={depth}" if depth else "") + (f" {precision}" if precision else ""))


def fmt_stat(values, digits):
    """mean ± std (n) of the finite values with `digits` decimals; "—" when there are none."""
    return fmt_spread(values, f".{digits}f")


def fmt_spread(values, spec=".3g"):
    """mean ± sd (n) of the finite values, each number in the format `spec`; "—" without values."""
    mean, std, n = mean_std(values)
    if mean is None:
        return "—"
    return format(mean, spec) + (f" ± {format(std, spec)}" if std is not None else "") + f" ({n})"


def outcome_counts(recs):
    """{outcome: number of runs} over the records."""
    counts = {k: 0 for k in OUTCOMES}
    for rec in recs:
        counts[rec["result"]["outcome"]] += 1
    return counts


def baselines_line(records):
    """One sentence with the baselines of the evaluated tokens (the same for every run)."""
    evs = [rec["eval"] for rec in records.values() if rec and rec["eval"]]
    uni = [ev.get("unigram_ce") for ev in evs if ev.get("unigram_ce") is not None]
    bi = [ev.get("bigram_ce") for ev in evs if ev.get("bigram_ce") is not None]
    if not uni:
        return "Baselines: none recorded."
    return (f"Baselines on the evaluated validation tokens: unigram_ce {statistics.fmean(uni):.4f}, "
            f"bigram_ce {statistics.fmean(bi):.4f} nats (training-shard counts; docs/experiments.md, *Baselines*).")


def markdown(s, runs, records):
    size = CUSTOM_SIZE.fullmatch(s.init)
    model = "L={}, NH={}, C={}".format(*size.groups()) if size else s.init
    tokens = s.total_batch or s.B * s.T
    lines = [
        f"Model {model}{' (L per row)' if s.depth else ''}; {s.steps} steps of {tokens} tokens; AdamW, warmup "
        f"{s.warmup}, cosine to {s.lr_min_ratio:g}·lr, β2 {s.beta2:g}, clip {s.clip:g}. Outcomes per README "
        f"*Run outcomes* (window {s.outcome_window}, divergence rise {s.diverge_rise:g} nat, spike rise "
        f"{s.spike_rise:g} nat). Metrics are mean ± std (n) over the runs that finished (ok and collapsed); "
        f"validation over {s.eval_batches} batches of {s.eval_B}×{s.T} tokens; ROUGE F1 of the argmax "
        f"predictions with Porter stemming.",
        "",
        baselines_line(records),
        "",
        "| LN | Δt | wd | lr | L | runs | ok | collapsed | diverged | nonfinite | spikes | val loss | val − unigram "
        "| ppl_seq | accuracy | ROUGE-1 | ROUGE-L | mean_abs X_0 → X_L | ‖∂L/∂X_0‖·RMS / ‖∂L/∂X_L‖·RMS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config in configs_in_order(runs):
        recs = [records[r.name] for r in runs if r.config == config and records.get(r.name)]
        if not recs:
            continue
        counts = outcome_counts(recs)
        spikes = sum(rec["result"].get("spikes") or 0 for rec in recs)
        evs = [rec["eval"] for rec in recs if rec["eval"]]
        ls = [layer_series(ev) for ev in evs]
        growth = "—"
        if ls and ls[0]["mean_abs"]:
            m0, _, _ = mean_std([x["mean_abs"][0] for x in ls])
            mL, _, _ = mean_std([x["mean_abs"][-1] for x in ls])
            growth = f"{m0:.3g} → {mL:.3g} (×{mL / m0:.3g})"
        ratios = [x["grad_norm_scaled"][0] / x["grad_norm_scaled"][-1] for x in ls
                  if x["grad_norm_scaled"][0] is not None and x["grad_norm_scaled"][-1]]
        ratio = fmt_stat(ratios, 3) if ratios else "—"
        stem = lambda key: [(ev.get("rouge") or {}).get(key) for ev in evs]
        gap = [ev["val_loss"] - ev["unigram_ce"] for ev in evs
               if ev.get("val_loss") is not None and ev.get("unigram_ce") is not None]
        ln, dt, wd, lr, depth, precision = config
        lines.append(f"| {PLACEMENT_LABEL[ln]} | {fmt_num(dt)} | {fmt_num(wd)} | {fmt_num(lr)} | "
                     f"{depth or (size.group(1) if size else '')} | {len(recs)} | "
                     + " | ".join(str(counts[k]) for k in OUTCOMES) + f" | {spikes} | "
                     f"{fmt_stat([ev.get('val_loss') for ev in evs], 3)} | {fmt_stat(gap, 3)} | "
                     f"{fmt_stat([ev.get('ppl_seq') for ev in evs], 1)} | {fmt_stat([ev.get('accuracy') for ev in evs], 3)} | "
                     f"{fmt_stat(stem('rouge1_stem'), 3)} | {fmt_stat(stem('rougeL_stem'), 3)} | {growth} | {ratio} |")
    missing = [r.name for r in runs if not records.get(r.name)]
    if missing:
        lines += ["", f"Not recorded yet ({len(missing)}): {', '.join(missing)}"]
    return "\n".join(lines) + "\n"


def collect(s, runs):
    records = {r.name: run_record(r) for r in runs}
    rows, layer_rows = [], []
    for r in runs:
        rec = records[r.name]
        if rec is None:
            continue
        rows.append(result_row(rec))
        if rec["eval"]:
            ls = layer_series(rec["eval"])
            for i in range(len(ls["mean_abs"])):
                layer_rows.append(dict(run_keys(r), layer=i, **{k: (v[i] if i < len(v) else None) for k, v in ls.items()}))
    write_csv(os.path.join(s.out, "results.csv"), RESULT_COLUMNS, rows)
    write_csv(os.path.join(s.out, "layers.csv"), LAYER_COLUMNS, layer_rows)
    md = markdown(s, runs, records)
    with open(os.path.join(s.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(md)
    return records, md + experiment_markdown(s, runs, records)


# ---------------------------------------------------------------------------------------------
# Experiment reports (docs/experiments.md, "The protocol"): the tables of E1, E2 and E3, written
# to OUT/experiment.md and OUT/{e1,e2,e3}_*.csv beside the per-run tables.

def final_val_loss(rec):
    """The final validation loss of a finished run (./eval's), else None."""
    return rec["eval"].get("val_loss") if rec and rec["eval"] else None


def group_without(runs, drop):
    """Configurations with the field `drop` (an index into Run.config) left out, in grid order,
    each with its runs."""
    groups = {}
    for r in runs:
        key = tuple(v for i, v in enumerate(r.config) if i != drop)
        groups.setdefault(key, []).append(r)
    return groups


def short_label(ln, dt, precision=None, depth=None):
    return (f"{PLACEMENT_LABEL[ln]} Δt={fmt_num(dt)}" + (f" L={depth}" if depth else "") +
            (f" {precision}" if precision else ""))


def e1_cell(recs):
    """One E1 table cell: the final validation loss of one run (or its outcome when it stopped;
    (c) = collapsed), or over several seeds its mean ± sd and how many collapsed or stopped."""
    got = [rec for rec in recs if rec]
    if not got:
        return "…"
    if len(got) == 1:
        res = got[0]["result"]
        if res["outcome"] not in FINISHED:
            return f"{res['outcome']} @{res.get('stopped_step')}"
        return f"{final_val_loss(got[0]):.3f}" + (" (c)" if res["outcome"] == "collapsed" else "")
    losses = [final_val_loss(rec) for rec in got if rec["result"]["outcome"] in FINISHED]
    collapsed = sum(1 for rec in got if rec["result"]["outcome"] == "collapsed")
    stopped = len(got) - len(losses)
    notes = [f"{collapsed} c"] * bool(collapsed) + [f"{stopped} stopped"] * bool(stopped)
    return (fmt_spread(losses, ".3f") if losses else "—") + (f" [{', '.join(notes)}]" if notes else "")


def e1_report(s, runs, records):
    """E1: final loss against learning rate per configuration; L*, its lr and the LR
    sensitivity, per seed and, over several seeds, as mean ± sd with Welch's t-tests against
    Peri-LN at its smallest Δt (e1_tests); writes lr.csv. Returns (markdown lines, rows)."""
    lrs = sorted({r.lr for r in runs})
    seeds = sorted({r.seed for r in runs})
    several = len(seeds) > 1
    lines = ["## E1: learning-rate sensitivity", "",
             "Final validation loss per learning rate (" +
             (f"mean ± sd (runs) over seeds {', '.join(map(str, seeds))}; [k c] = k runs collapsed: not below "
              "unigram_ce; [k stopped] = k runs diverged or went non-finite" if several else
              "one run per cell; a run that stopped shows its outcome; (c) = collapsed: not below unigram_ce") +
             "). A stopped run counts as L_init, the mean step-0 training loss. LR sensitivity = mean over the "
             "grid of min(L(η), L_init) − L* (Wortsman et al. 2023)" +
             (", per seed, then mean ± sd over the seeds; L* likewise, with the learning rates it fell at." if several
              else "."), "",
             "| configuration | " + " | ".join(f"lr {fmt_num(lr)}" for lr in lrs) + " | L* (lr) | LR sensitivity |",
             "|---|" + "---|" * len(lrs) + "---|---|"]
    rows, summary, measured = [], [], {}
    for key, group in group_without(runs, 3).items():
        ln, dt, wd, depth, precision = key
        recs = {(r.seed, r.lr): records.get(r.name) for r in group}
        inits = [first_loss(rec["log"]) for rec in recs.values() if rec and first_loss(rec["log"]) is not None]
        if not inits:
            continue
        l_init = statistics.fmean(inits)
        cells = [e1_cell([recs.get((seed, lr)) for seed in seeds]) for lr in lrs]
        bests, best_lrs, sens = [], [], []
        for seed in seeds:
            losses = {}
            for lr in lrs:
                rec = recs.get((seed, lr))
                if not rec:
                    continue
                res = rec["result"]
                losses[lr] = final_val_loss(rec)
                rows.append(dict(ln=ln, dt=dt, wd=wd, depth=depth, precision=precision, lr=lr, seed=seed,
                                 outcome=res["outcome"], spikes=res.get("spikes"), val_loss=losses[lr],
                                 unigram_ce=res.get("unigram_ce"), initial_loss=l_init))
            best, best_lr, sensitivity = analysis.lr_sensitivity(losses, l_init)
            if best is not None:
                bests.append(best)
                best_lrs.append(best_lr)
            if sensitivity is not None and len(losses) == len(lrs):
                sens.append(sensitivity)
        label = short_label(ln, dt, precision, depth)
        measured[(ln, dt, wd, depth, precision)] = {"L*": bests, "LR sensitivity": sens,
                                                    **e1_at_best_lr(recs, seeds, lrs)}
        summary.append((statistics.fmean(bests) if bests else None, label))
        where = ", ".join(fmt_num(lr) for lr in sorted(set(best_lrs)))
        best_cell = (f"{fmt_spread(bests, '.3f') if several else f'{bests[0]:.3f}'} ({where})" if bests else "—")
        complete = len(sens) == len(seeds)
        sens_cell = ((fmt_spread(sens, ".3f") if several else f"{sens[0]:.3f}") if complete else
                     "— (not every lr recorded" + (f" for {len(seeds) - len(sens)} of {len(seeds)} seeds)" if several else ")"))
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {best_cell} | {sens_cell} |")
    uni = [row["unigram_ce"] for row in rows if row.get("unigram_ce") is not None]
    done = [x for x in summary if x[0] is not None]
    if done and uni:
        best, label = min(done)
        lines += ["", f"Best configuration: {label}, L* = {best:.3f}" + (" (mean over the seeds)" if several else "") +
                  f"; unigram_ce − L* = {statistics.fmean(uni) - best:.3f} nats (unigram_ce {statistics.fmean(uni):.3f})."]
    if several:
        lines += e1_tests(measured)
    results = {}
    for row in rows:
        results.setdefault((row["ln"], row["lr"]), []).append((row["outcome"], row["val_loss"]))
    edge = analysis.edge_of_stability(results, ("pre", "peri"))
    if edge[0] is not None:
        lines += ["", f"Edge of stability (the learning rate of E3): {fmt_num(edge[0])}, {edge[1]}."]
    write_csv(os.path.join(s.out, "lr.csv"), ["ln", "dt", "wd", "depth", "precision", "lr", "seed", "outcome",
                                                 "spikes", "val_loss", "unigram_ce", "initial_loss"], rows)
    return lines, rows


def e1_at_best_lr(recs, seeds, lrs):
    """At a configuration's best learning rate (the lowest mean final loss of its finished runs
    over the seeds), each finished run's ppl_seq, accuracy and stemmed ROUGE-1. recs maps
    (seed, lr) to a run's record."""
    finished = {lr: [recs.get((seed, lr)) for seed in seeds] for lr in lrs}
    finished = {lr: [rec for rec in got if rec and rec["eval"] and rec["result"]["outcome"] in FINISHED]
                for lr, got in finished.items()}
    finished = {lr: got for lr, got in finished.items() if got}
    if not finished:
        return {}
    best = min(finished, key=lambda lr: statistics.fmean(final_val_loss(rec) for rec in finished[lr]))
    got = finished[best]
    return {"ppl_seq at the best lr": [rec["eval"].get("ppl_seq") for rec in got],
            "accuracy at the best lr": [rec["eval"].get("accuracy") for rec in got],
            "ROUGE-1 (stemmed) at the best lr": [(rec["eval"].get("rouge") or {}).get("rouge1_stem") for rec in got]}


def e1_tests(measured):
    """Welch's t-test of each configuration's per-seed L* and LR sensitivity, and of its runs'
    ppl_seq, accuracy and ROUGE-1 at its best learning rate, against those of Peri-LN at its
    smallest Δt (same wd, depth and precision); markdown lines, none without that reference."""
    lines = ["", "Against Peri-LN at its smallest Δt (Welch's t-test, two-sided, over the seeds; the metrics at "
             "each configuration's own best learning rate, the lowest mean final loss).", "",
             "| configuration | quantity | value | reference | p |", "|---|---|---|---|---|"]
    tested = 0
    for (ln, dt, wd, depth, precision), mine in measured.items():
        peri_dts = [k[1] for k in measured if k[0] == "peri" and k[2:] == (wd, depth, precision)]
        if not peri_dts or (ln, dt) == ("peri", min(peri_dts)):
            continue
        ref = measured[("peri", min(peri_dts), wd, depth, precision)]
        for quantity, values in mine.items():
            xs = [v for v in values if v is not None]
            ys = [v for v in ref.get(quantity, []) if v is not None]
            test = analysis.welch_t(xs, ys)
            spec = ".1f" if quantity.startswith("ppl") else ".3f"
            lines.append(f"| {short_label(ln, dt, precision, depth)} | {quantity} | {fmt_spread(xs, spec)} | "
                         f"{short_label('peri', min(peri_dts), precision, depth)} {fmt_spread(ys, spec)} | "
                         f"{'—' if test is None else f'{test[2]:.2g}'} |")
            tested += 1
    return lines if tested else []


def profile(rec, stage, key):
    """The series X_0..X_L of one run: at "init" from ./train's stats record of step 0, after
    training ("trained") from eval.json."""
    if stage == "init":
        first = next((r for r in rec["log"] if r.get("event") == "stats" and r.get("step") == 0), None)
        return first.get(key) if first else None
    return layer_series(rec["eval"])[key] if rec["eval"] else None


def e2_report(s, runs, records):
    """E2: for mean_abs and entry_var of X_1..X_L (the embedding X_0 left out, so that a first-block
    jump is not read as growth) at init and after training, the linear, quadratic and exponential
    fits and the AICc winner per run; writes fits.csv. Returns (markdown lines, rows)."""
    lines = ["## E2: growth of the hidden states with depth", "",
             "Fits over the layers i = 1..L of one run each (least squares; AICc, lower is better; a law with too "
             "few points for AICc is not compared). Rate: slope per layer (linear), curvature (quadratic) or factor "
             "per layer e^r (exponential). ΔAICc = the runner-up's AICc minus the winner's; below 2 (marked ≈) "
             "no law is clearly better than the next.", "",
             "| configuration | L | stage | quantity | X_1 → X_L | winner | rate | ΔAICc | AICc lin / quad / exp |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for r in runs:
        rec = records.get(r.name)
        if not rec:
            continue
        for stage in ("init", "trained"):
            for key in ("mean_abs", "entry_var"):
                y = profile(rec, stage, key)
                if not y or len(y) < 3 or any(v is None for v in y):
                    continue
                xs, ys = list(range(1, len(y))), y[1:]
                fits, winner = analysis.fit_laws(xs, ys)
                aicc = {law: fits[law]["aicc"] for law in fits}
                kind, rate = analysis.law_rate(winner, fits[winner]["params"]) if winner else (None, None)
                others = sorted(v for law, v in aicc.items() if v is not None and law != winner)
                delta = others[0] - aicc[winner] if winner and others else None
                depth = r.depth or len(y) - 1
                rows.append(dict(run_keys(r), stage=stage, quantity=key, first=ys[0], last=ys[-1], winner=winner,
                                 rate_kind=kind, rate=rate, delta_aicc=delta,
                                 **{f"aicc_{law}": aicc.get(law) for law in analysis.LAWS},
                                 **{f"{law}_{p}": v for law in fits for p, v in fits[law]["params"].items()}))
                fmt = lambda v: "—" if v is None else f"{v:.1f}"
                lines.append(f"| {short_label(r.ln, r.dt, r.precision)} (seed {r.seed}) | {depth} | {stage} | {key} | "
                             f"{ys[0]:.3g} → {ys[-1]:.3g} | {(winner or '—') + (' ≈' if delta is not None and delta < 2 else '')} | "
                             f"{'—' if rate is None else f'{kind} {rate:.3g}'} | {fmt(delta)} | "
                             f"{' / '.join(fmt(aicc.get(law)) for law in analysis.LAWS)} |")
    lines += ["", "After training, per run: Spearman's ρ (and p) between ‖∂L/∂W_fcproj‖ and the RMS of that MLP's "
              "hidden activation over the blocks (does the gradient grow with the activation?), the largest block "
              "sensitivity (mean ‖J v‖ over directions), the relative amplification of input noise at X_L "
              "((W2 bound / RMS(X_L)) / (σ / RMS(X_0))) and the scale-free gradient ratio "
              "‖∂L/∂X_0‖·RMS(X_0) / ‖∂L/∂X_L‖·RMS(X_L).", "",
              "| configuration | L | ρ(grad W_fcproj, hidden RMS) | p | max block sensitivity | relative amplification X_L "
              "| scale-free gradient X_0 / X_L |", "|---|---|---|---|---|---|---|"]
    diagnostics = []
    for r in runs:
        rec = records.get(r.name)
        if not rec or not rec["eval"]:
            continue
        ls = layer_series(rec["eval"])
        grad, hidden = ls["fcproj_grad_norm"][1:], ls["mlp_hidden_rms"][1:]
        rho = analysis.spearman(grad, hidden) if None not in grad + hidden else None
        sens = [x for x in ls["sens_mean"] if x is not None]
        amp = ls["relative_amplification"][-1]
        g = ls["grad_norm_scaled"]
        ratio = g[0] / g[-1] if g[0] is not None and g[-1] else None
        diagnostics.append(dict(run_keys(r), depth=r.depth or len(ls["mean_abs"]) - 1, rho=rho and rho[0],
                                rho_p=rho and rho[1], max_sensitivity=max(sens) if sens else None,
                                amplification=amp, gradient_ratio=ratio))
        num = lambda v, f: "—" if v is None else format(v, f)
        lines.append(f"| {short_label(r.ln, r.dt, r.precision)} (seed {r.seed}) | {r.depth or len(ls['mean_abs']) - 1} | "
                     f"{num(rho and rho[0], '.2f')} | {num(rho and rho[1], '.2g')} | {num(max(sens) if sens else None, '.3g')} | "
                     f"{num(amp, '.3g')} | {num(ratio, '.3g')} |")
    lines += e2_over_seeds(rows, diagnostics)
    columns = RUN_KEYS + ["stage", "quantity", "first", "last", "winner", "rate_kind", "rate", "delta_aicc"] + \
        [f"aicc_{law}" for law in analysis.LAWS] + ["linear_a", "linear_b", "quadratic_a", "quadratic_b", "quadratic_c",
                                                    "exponential_a", "exponential_r"]
    write_csv(os.path.join(s.out, "fits.csv"), columns, rows)
    return lines, rows


def law_name(row):
    """The winning law of one fit row, a quadratic named by the sign of its curvature."""
    if row["winner"] != "quadratic":
        return row["winner"] or "—"
    return "concave quadratic" if row["quadratic_c"] < 0 else "convex quadratic"


def tally(names):
    """"a 4, b 1": how often each name occurs, the most frequent first."""
    counts = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return ", ".join(f"{n} {k}" for n, k in sorted(counts.items(), key=lambda x: -x[1]))


def e2_over_seeds(fit_rows, diagnostics):
    """E2's tables over the seeds: per configuration, depth, stage and quantity the spread of X_L
    and how often each law wins; the smaller Δt against the larger, paired by placement, depth and seed
    (sign test); the after-training diagnostics' spread, and Pre- against Peri-LN at the same Δt
    and depth (Welch's t-test). fit_rows: e2_report's fits; diagnostics: one dict per run."""
    groups = {}
    for row in fit_rows:
        groups.setdefault((row["ln"], row["dt"], row["depth"], row["stage"], row["quantity"]), []).append(row)
    lines = ["", "### Over the seeds", "",
             "X_L as mean ± sd (runs); winners: how many runs each law won (a quadratic named by the sign of its "
             "curvature), and how many of those wins are clear (ΔAICc ≥ 2).", "",
             "| configuration | L | stage | quantity | X_L | winners | clear wins |", "|---|---|---|---|---|---|---|"]
    for (ln, dt, depth, stage, key), group in groups.items():
        won = [g for g in group if g["winner"]]
        clear = [g for g in won if g["delta_aicc"] is not None and g["delta_aicc"] >= 2]
        lines.append(f"| {short_label(ln, dt)} | {depth} | {stage} | {key} | {fmt_spread([g['last'] for g in group])} | "
                     f"{tally(law_name(g) for g in won) or '— (too few layers)'} | "
                     f"{tally(law_name(g) for g in clear) or '—'} |")
    dts = sorted({g["dt"] for g in fit_rows})
    last = {(g["ln"], g["dt"], g["depth"], g["seed"], g["stage"], g["quantity"]): g["last"] for g in fit_rows}
    if len(dts) == 2:
        small, large = (fmt_num(dt) for dt in dts)
        lines += ["", f"Δt = {small} against Δt = {large}: X_L of the same placement, depth and seed; pairs in which "
                  f"Δt = {small} gives the smaller value, and the two-sided sign test.", "",
                  f"| stage | quantity | placement | smaller with Δt = {small} | sign test p |", "|---|---|---|---|---|"]
        for stage in ("init", "trained"):
            for key in ("mean_abs", "entry_var"):
                for placement in sorted({g["ln"] for g in fit_rows}) + ["all"]:
                    pairs = [(v, last.get((ln, dts[1], depth, seed, stage, key)))
                             for (ln, dt, depth, seed, st, k), v in last.items()
                             if dt == dts[0] and st == stage and k == key and placement in (ln, "all")]
                    pairs = [p for p in pairs if p[1] is not None]
                    if pairs:
                        smaller = sum(1 for a, b in pairs if a < b)
                        lines.append(f"| {stage} | {key} | {PLACEMENT_LABEL.get(placement, placement)} | "
                                     f"{smaller} of {len(pairs)} | {analysis.sign_test(smaller, len(pairs)):.2g} |")
    lines += ["", "After training, over the seeds: Spearman's ρ as mean ± sd, and how many runs have a significant "
              "(p < 0.05) positive or negative ρ; the largest block sensitivity and the relative amplification at "
              "X_L as mean ± sd.", "",
              "| configuration | L | ρ(grad W_fcproj, hidden RMS) | significant + / − | max block sensitivity "
              "| relative amplification X_L |", "|---|---|---|---|---|---|"]
    by_config = {}
    for d in diagnostics:
        by_config.setdefault((d["ln"], d["dt"], d["depth"]), []).append(d)
    for (ln, dt, depth), group in by_config.items():
        significant = [d for d in group if d["rho_p"] is not None and d["rho_p"] < 0.05]
        lines.append(f"| {short_label(ln, dt)} | {depth} | {fmt_spread([d['rho'] for d in group], '.2f')} | "
                     f"{sum(1 for d in significant if d['rho'] > 0)} / {sum(1 for d in significant if d['rho'] < 0)} | "
                     f"{fmt_spread([d['max_sensitivity'] for d in group])} | "
                     f"{fmt_spread([d['amplification'] for d in group])} |")
    lines += ["", "Pre-LN against Peri-LN at the same Δt and depth (Welch's t-test, two-sided).", "",
              "| Δt | L | quantity | Pre-LN | Peri-LN | p |", "|---|---|---|---|---|---|"]
    for (ln, dt, depth), pre in by_config.items():
        peri = by_config.get(("peri", dt, depth))
        if ln != "pre" or not peri:
            continue
        for key in ("max_sensitivity", "amplification"):
            xs = [d[key] for d in pre if d[key] is not None]
            ys = [d[key] for d in peri if d[key] is not None]
            test = analysis.welch_t(xs, ys)
            lines.append(f"| {fmt_num(dt)} | {depth} | {key.replace('_', ' ')} | {fmt_spread(xs)} | {fmt_spread(ys)} | "
                         f"{'—' if test is None else f'{test[2]:.2g}'} |")
    return lines


def e3_report(s, runs, records):
    """E3: outcome counts per configuration and Fisher's exact tests (two-sided) of Pre- vs
    Peri-LN and of weight decay on vs off; Welch tests of the final loss; writes tests.csv.
    Returns (markdown lines, rows)."""
    recs = [(r, records[r.name]) for r in runs if records.get(r.name)]
    stopped = lambda rec: rec["result"]["outcome"] in ("diverged", "nonfinite")
    not_ok = lambda rec: rec["result"]["outcome"] != "ok"
    lines = ["## E3: divergence with and without weight decay", "",
             f"Learning rate {', '.join(sorted({fmt_num(r.lr) for r in runs}))}; outcome counts over the seeds.", "",
             "| configuration | wd | runs | ok | collapsed | diverged | nonfinite | spikes | val loss (finished) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, group in group_without(runs, 99).items():
        got = [records[r.name] for r in group if records.get(r.name)]
        if not got:
            continue
        ln, dt, wd, lr, depth, precision = key
        counts = outcome_counts(got)
        lines.append(f"| {short_label(ln, dt, precision, depth)} | {fmt_num(wd)} | {len(got)} | " +
                     " | ".join(str(counts[k]) for k in OUTCOMES) +
                     f" | {sum(rec['result'].get('spikes') or 0 for rec in got)} | "
                     f"{fmt_stat([final_val_loss(rec) for rec in got], 3)} |")
    rows = []

    def test(name, first, second, failed, what):
        a = sum(1 for rec in first if failed(rec))
        c = sum(1 for rec in second if failed(rec))
        p = analysis.fisher_exact(a, len(first) - a, c, len(second) - c)
        rows.append(dict(test=name, counted=what, first_failed=a, first_runs=len(first), second_failed=c,
                         second_runs=len(second), p=p))
        lines.append(f"| {name} | {what} | {a}/{len(first)} | {c}/{len(second)} | {p:.3g} |")

    lines += ["", "Fisher's exact test, two-sided (stopped = diverged or nonfinite; not ok = stopped or collapsed):", "",
              "| comparison | counted | first | second | p |", "|---|---|---|---|---|"]
    pick = lambda **want: [rec for r, rec in recs if all(getattr(r, k) == v for k, v in want.items())]
    wds = sorted({r.wd for r in runs})
    if len({r.ln for r, _ in recs}) > 1 and recs:
        for what, failed in (("stopped", stopped), ("not ok", not_ok)):
            test("Pre-LN vs Peri-LN (all wd, Δt)", pick(ln="pre"), pick(ln="peri"), failed, what)
    if len(wds) == 2:
        for ln in ("pre", "peri"):
            for what, failed in (("stopped", stopped), ("not ok", not_ok)):
                test(f"{PLACEMENT_LABEL[ln]}: wd {fmt_num(wds[0])} vs {fmt_num(wds[1])} (all Δt)",
                     pick(ln=ln, wd=wds[0]), pick(ln=ln, wd=wds[1]), failed, what)
        test(f"wd {fmt_num(wds[0])} vs {fmt_num(wds[1])} (all placements, Δt)", pick(wd=wds[0]), pick(wd=wds[1]),
             stopped, "stopped")
    lines += ["", "Final validation loss of the finished runs, Welch's t-test against Peri-LN Δt = 0.1 at the same wd:",
              "", "| configuration | wd | val loss | accuracy | ROUGE-1 (stemmed) | t | p |", "|---|---|---|---|---|---|---|"]
    for wd in wds:
        ref = [final_val_loss(rec) for rec in pick(ln="peri", dt=0.1, wd=wd) if final_val_loss(rec) is not None]
        for ln in ("pre", "peri"):
            for dt in sorted({r.dt for r in runs}, reverse=True):
                got = [rec for rec in pick(ln=ln, dt=dt, wd=wd) if rec["eval"]]
                vals = [final_val_loss(rec) for rec in got]
                t = analysis.welch_t(vals, ref) if not (ln == "peri" and dt == 0.1) else None
                lines.append(f"| {short_label(ln, dt)} | {fmt_num(wd)} | {fmt_stat(vals, 3)} | "
                             f"{fmt_stat([rec['eval'].get('accuracy') for rec in got], 3)} | "
                             f"{fmt_stat([(rec['eval'].get('rouge') or {}).get('rouge1_stem') for rec in got], 3)} | "
                             f"{'—' if t is None else f'{t[0]:.2f}'} | {'—' if t is None else f'{t[2]:.3g}'} |")
    write_csv(os.path.join(s.out, "tests.csv"), ["test", "counted", "first_failed", "first_runs", "second_failed",
                                                    "second_runs", "p"], rows)
    return lines, rows


EXPERIMENT_REPORTS = {"e1": e1_report, "e2": e2_report, "e3": e3_report}
EXPERIMENT_FILES = {"e1": ("experiment.md", "lr.csv", "loss_vs_lr.png"), "e2": ("experiment.md", "fits.csv", "growth.png"),
                    "e3": ("experiment.md", "tests.csv")}


def experiment_markdown(s, runs, records):
    """OUT/experiment.md for a sweep of an experiment preset ("" for other sweeps)."""
    if not s.experiment:
        return ""
    lines, _ = EXPERIMENT_REPORTS[s.experiment](s, runs, records)
    md = "\n".join(lines) + "\n"
    with open(os.path.join(s.out, "experiment.md"), "w", encoding="utf-8") as f:
        f.write(md)
    return md


# ---------------------------------------------------------------------------------------------
# Figures (matplotlib, imported only here)

FIGURES = ("hidden_states.png", "loss.png", "grad_norm.png", "sensitivity.png")
COLORS = {"pre": "tab:red", "peri": "tab:green", "post": "tab:blue"}


def draw_figures(s, runs, records):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    configs = configs_in_order(runs)
    dts = sorted({c[1] for c in configs}, reverse=True)
    wds = sorted({c[2] for c in configs})
    styles = ["-", "--", ":", "-."]

    def style(config):
        ln, dt, wd = config[:3]
        return dict(color=COLORS[ln], linestyle=styles[dts.index(dt) % 4],
                    marker="o" if len(wds) > 1 and wds.index(wd) == 0 else None, markersize=3)

    def stable_series(config, key):
        """Per-layer mean over the finished runs of a configuration, or None."""
        series = [layer_series(records[r.name]["eval"])[key] for r in runs
                  if r.config == config and records.get(r.name) and records[r.name]["eval"]]
        series = [x for x in series if x]
        if not series:
            return None
        n = min(len(x) for x in series)
        return [statistics.fmean(x[i] for x in series) if all(x[i] is not None for x in series) else None
                for i in range(n)]

    def layer_panels(filename, panels, title):
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2))
        axes = [axes] if len(panels) == 1 else axes
        for ax, (key, label) in zip(axes, panels):
            for config in configs:
                y = stable_series(config, key)
                if y is None:
                    continue
                pts = [(i, v) for i, v in enumerate(y) if v is not None and v > 0]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=config_label(config), **style(config))
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("layer i (0 = embedding)")
            ax.set_title(label, fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].legend(fontsize=7)
        fig.suptitle(title, fontsize=11)
        fig.tight_layout()
        fig.savefig(os.path.join(s.out, filename), dpi=110)
        plt.close(fig)

    note = " (mean over the runs that finished)"
    layer_panels("hidden_states.png", [("mean_abs", "mean |X_i|"), ("entry_var", "entry_var: variance inside a token"),
                                       ("data_var", "data_var: variance across tokens")],
                 "Hidden states of the residual stream" + note)
    layer_panels("grad_norm.png", [("grad_norm", "‖∂loss/∂X_i‖"), ("param_grad_norm", "‖∂loss/∂θ‖ of block i")],
                 "Gradient norms against layer" + note)
    layer_panels("sensitivity.png", [("sens_mean", "block sensitivity: mean ‖J v‖"),
                                     ("sens_max", "block sensitivity: max ‖J v‖"),
                                     ("w2_bound", "noise on X_0: W2 bound at X_i")],
                 "Local sensitivity and output uncertainty" + note)

    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    labelled = set()
    for r in runs:
        rec = records.get(r.name)
        if not rec or not rec["steps"]:
            continue
        xs, ys = zip(*rec["steps"])
        k = 10  # moving average over 10 steps
        smooth = [statistics.fmean(ys[max(0, i - k + 1): i + 1]) for i in range(len(ys))]
        label = config_label(r.config) if r.config not in labelled else None
        labelled.add(r.config)
        st = style(r.config)
        st.pop("marker")
        ax.plot(xs, smooth, label=label, linewidth=1, alpha=0.8, **st)
        if rec["result"]["outcome"] in ("diverged", "nonfinite"):
            ax.plot([xs[-1]], [smooth[-1]], marker="x", color=st["color"], markersize=8)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (moving average of 10)")
    ax.set_title("Training loss, every run (× = stopped: diverged or nonfinite)", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(s.out, "loss.png"), dpi=110)
    plt.close(fig)
    draw_experiment_figures(s, runs, records, plt)


def draw_experiment_figures(s, runs, records, plt):
    """loss_vs_lr.png (E1: final validation loss against learning rate) or growth.png (E2:
    mean_abs and entry_var against layer, at init and after training, every depth)."""
    if s.experiment == "e1":
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        for key, group in group_without(runs, 3).items():
            ln, dt, wd, depth, precision = key
            finished, stopped = {}, []
            for r in sorted(group, key=lambda r: r.lr):
                rec = records.get(r.name)
                if not rec:
                    continue
                loss = final_val_loss(rec)
                if loss is not None:
                    finished.setdefault(r.lr, []).append(loss)
                else:
                    stopped.append((r.lr, first_loss(rec["log"])))
            st = dict(color=COLORS[ln], linestyle="-" if dt == 1 else "--")
            if finished:
                lrs = sorted(finished)
                spread = [mean_std(finished[lr]) for lr in lrs]
                ax.errorbar(lrs, [m for m, _, _ in spread], yerr=[sd or 0 for _, sd, _ in spread], marker="o",
                            markersize=4, capsize=3, label=short_label(ln, dt, precision, depth), **st)
            if stopped:
                ax.plot(*zip(*stopped), linestyle="none", marker="x", markersize=9, color=COLORS[ln])
        uni = [rec["eval"]["unigram_ce"] for rec in records.values() if rec and rec["eval"] and rec["eval"].get("unigram_ce")]
        bi = [rec["eval"]["bigram_ce"] for rec in records.values() if rec and rec["eval"] and rec["eval"].get("bigram_ce")]
        if uni:
            ax.axhline(statistics.fmean(uni), color="gray", linestyle=":", label="unigram_ce")
        if bi:
            ax.axhline(statistics.fmean(bi), color="black", linestyle=":", label="bigram_ce")
        ax.set_xscale("log")
        ax.set_xlabel("peak learning rate")
        ax.set_ylabel("final validation loss (nats)")
        ax.set_title("E1: final loss against learning rate (mean ± sd over the seeds; × = a stopped run, at the "
                     "initial loss)", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(s.out, "loss_vs_lr.png"), dpi=110)
        plt.close(fig)
    elif s.experiment == "e2":
        fig, axes = plt.subplots(2, 2, figsize=(11, 8))
        depths = sorted({r.depth for r in runs if r.depth})
        for col, key in enumerate(("mean_abs", "entry_var")):
            for row, stage in enumerate(("init", "trained")):
                ax = axes[row][col]
                for r in runs:
                    rec = records.get(r.name)
                    y = profile(rec, stage, key) if rec else None
                    if not y or any(v is None or v <= 0 for v in y):
                        continue
                    alpha = 0.35 + 0.65 * (depths.index(r.depth) + 1) / len(depths) if r.depth in depths else 1
                    label = short_label(r.ln, r.dt) if r.depth == depths[-1] else None
                    ax.plot(range(len(y)), y, color=COLORS[r.ln], linestyle="-" if r.dt == 1 else "--",
                            alpha=alpha, linewidth=1.2, label=label)
                ax.set_yscale("log")
                ax.set_xlabel("layer i (0 = embedding)")
                ax.set_title(f"{key} {'at init (step 0)' if stage == 'init' else 'after training'}", fontsize=10)
                ax.grid(True, which="both", alpha=0.3)
        axes[0][0].legend(fontsize=7)
        fig.suptitle(f"E2: hidden states against layer, L ∈ {{{', '.join(map(str, depths))}}} (fainter = shallower)",
                     fontsize=11)
        fig.tight_layout()
        fig.savefig(os.path.join(s.out, "growth.png"), dpi=110)
        plt.close(fig)


def figures(s, runs, records, allow_other_python=True):
    """Draws the figures here, or with /usr/bin/python3 when only that one has matplotlib."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        other = "/usr/bin/python3"
        if allow_other_python and os.path.realpath(sys.executable) != os.path.realpath(other) and os.path.exists(other):
            probe = subprocess.run([other, "-c", "import matplotlib"], capture_output=True)
            if probe.returncode == 0:
                args = [other, os.path.abspath(__file__), "--report", s.out, "--figures-only"]
                return subprocess.run(args).returncode == 0
        print(f"figures: none (matplotlib is not installed for {sys.executable}; on Debian: "
              f"apt-get install python3-matplotlib); the tables are written")
        return False
    draw_figures(s, runs, records)
    print(f"figures: {', '.join(os.path.join(s.out, f) for f in FIGURES)}")
    return True


def publish(s):
    """Copies the tables and figures to PREFIX_NAME (e.g. docs/e1_results.md): results.md,
    results.csv, layers.csv, the figures and the experiment's own files."""
    prefix = s.publish
    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    copied = []
    for name in ("results.md", "results.csv", "layers.csv") + FIGURES + EXPERIMENT_FILES.get(s.experiment, ()):
        src = os.path.join(s.out, name)
        if os.path.exists(src):
            shutil.copyfile(src, f"{prefix}_{name}")
            copied.append(f"{prefix}_{name}")
    print(f"published: {', '.join(copied)}")


# ---------------------------------------------------------------------------------------------
# Command line

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Presets: " + ", ".join(PRESETS) + ". Flags given with a preset override it.")
    p.add_argument("--preset", choices=sorted(PRESETS))
    p.add_argument("--report", metavar="OUT", help="only collect the results in OUT (tables, figures)")
    p.add_argument("--figures-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-figures", action="store_true", help="tables only")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    g = p.add_argument_group("grid (comma lists; seeds also as ranges, e.g. 1-5)")
    g.add_argument("--ln", help="placements: pre, post, peri")
    g.add_argument("--dt", help="residual steps Δt")
    g.add_argument("--wd", help="weight decays")
    g.add_argument("--lr", help="learning rates")
    g.add_argument("--depth", help="numbers of blocks L (replace the L of --init l{L}h{NH}c{C}...)")
    g.add_argument("--precision", help="CUDA precisions: bf16, fp32")
    g.add_argument("--seeds")
    t = p.add_argument_group("training (./train flags)")
    t.add_argument("--init", help="d6|d12|d24|d36|d48, a custom size l{L}h{NH}c{C}[v{V}][t{maxT}] or a checkpoint FILE")
    for name, kind in (("lr-min-ratio", float), ("warmup", int), ("steps", int), ("B", int), ("T", int),
                       ("total-batch", int), ("clip", float), ("beta2", float), ("outcome-window", int),
                       ("diverge-rise", float), ("spike-rise", float),
                       ("eval-every", int), ("eval-batches", int), ("save-every", int), ("stats-every", int)):
        t.add_argument("--" + name, dest=name.replace("-", "_"), type=kind)
    t.add_argument("--lr-from", dest="lr_from", metavar="E1_OUT",
                   help="the edge-of-stability learning rate of the E1 sweep in E1_OUT (when --lr is not given)")
    t.add_argument("--train-data", dest="train_data")
    t.add_argument("--val-data", dest="val_data")
    e = p.add_argument_group("evaluation (./eval flags)")
    e.add_argument("--eval-B", dest="eval_B", type=int)
    e.add_argument("--diag-batches", dest="diag_batches", type=int)
    e.add_argument("--directions", type=int)
    e.add_argument("--sigma", type=float)
    e.add_argument("--noise-samples", dest="noise_samples", type=int)
    e.add_argument("--tokenizer")
    x = p.add_argument_group("execution")
    x.add_argument("--device", choices=("cpu", "cuda", "auto"))
    x.add_argument("--threads", type=int, help="-threads of each run (0 = the programs' default)")
    x.add_argument("--jobs", type=int, help="runs at once (0 = cores // threads)")
    x.add_argument("--out")
    x.add_argument("--gpus", type=int, default=0, help="runs at once, one per GPU (CUDA_VISIBLE_DEVICES)")
    x.add_argument("--slurm", metavar="FILE", help="write a Slurm job-array script, one task per run; run nothing")
    x.add_argument("--run", metavar="NAME", help="train and evaluate this run of the grid only (a Slurm task)")
    x.add_argument("--publish", metavar="PREFIX", help="also copy results.md and figures to PREFIX_*")
    x.add_argument("--train-bin", dest="train_bin", default=os.path.join(REPO, "train"))
    x.add_argument("--eval-bin", dest="eval_bin", default=os.path.join(REPO, "eval"))
    a = p.parse_args(argv)

    settings = dict(DEFAULTS)
    if a.report:
        saved = read_json(os.path.join(a.report, "sweep.json"))
        if saved is None:
            raise SweepError(f"--report {a.report}: no sweep.json there")
        settings.update(saved)
        settings["out"] = a.report
    elif a.preset:
        settings.update(PRESETS[a.preset])
    for k, v in vars(a).items():
        if v is not None and k in settings and not (a.report and k in TRAINING_SETTINGS):
            settings[k] = v
    s = argparse.Namespace(**settings)
    s.report, s.figures_only, s.no_figures, s.dry_run = a.report, a.figures_only, a.no_figures, a.dry_run
    s.gpus, s.slurm, s.run = a.gpus, a.slurm, a.run
    if s.gpus < 0:
        raise SweepError("--gpus: must be ≥ 0")
    s.train_bin, s.eval_bin = os.path.abspath(a.train_bin), os.path.abspath(a.eval_bin)
    # Relative paths: from the current directory when given here, from the repository when they
    # come from a preset or the defaults (e.g. data/mobydick_*.bin).
    given = {k for k, v in vars(a).items() if v is not None} | ({"out"} if a.report else set())
    for k in ("out", "train_data", "val_data", "tokenizer", "publish"):
        v = getattr(s, k)
        if v and not os.path.isabs(v):
            setattr(s, k, os.path.abspath(v) if k in given else os.path.join(REPO, v))
    # A preset publishes its own experiment only: a grid changed by flags keeps its results in OUT.
    preset = {**DEFAULTS, **PRESETS.get(a.preset, {})}
    changed = [k for k in DEFAULTS if k not in EXECUTION_SETTINGS and
               getattr(a, k, None) is not None and getattr(a, k) != preset[k]]
    if a.preset and not a.report and a.publish is None and s.publish and changed:
        print(f"sweep: not publishing to {s.publish}_*: {', '.join('--' + k.replace('_', '-') for k in changed)} "
              f"{'differs' if len(changed) == 1 else 'differ'} from the preset", flush=True)
        s.publish = None
    if s.init and not is_model_size(s.init) and os.path.exists(s.init):  # a checkpoint file
        s.init = os.path.abspath(s.init)
    for name in ("steps", "B", "T", "eval_batches", "eval_B", "directions", "noise_samples"):
        if getattr(s, name) < 1:
            raise SweepError(f"--{name.replace('_', '-')}: must be ≥ 1")
    if s.lr is None and not s.report:
        s.lr = edge_lr_from(s)
    return s


def edge_lr_from(s):
    """The learning rate of an E3-style sweep without --lr: the edge of stability of the E1
    sweep in s.lr_from (analysis.edge_of_stability)."""
    if not s.lr_from:
        raise SweepError("--lr: required (or --lr-from an E1 sweep's output)")
    folder = s.lr_from if os.path.isabs(s.lr_from) else os.path.join(REPO, s.lr_from)
    saved = read_json(os.path.join(folder, "sweep.json"))
    if saved is None:
        raise SweepError(f"--lr-from {folder}: no sweep.json there (run the e1 preset first)")
    e1 = argparse.Namespace(**{**DEFAULTS, **saved, "out": folder})
    runs = make_grid(e1)
    results = {}
    for r in runs:
        res = read_json(os.path.join(r.dir, "result.json"))
        if res is not None:
            results.setdefault((r.ln, r.lr), []).append((res["outcome"], res.get("val_loss")))
    lr, why = analysis.edge_of_stability(results, placements=("pre", "peri"))
    if lr is None:
        raise SweepError(f"--lr-from {folder}: {why}")
    print(f"sweep: lr {lr:g} from {folder}: {why}", flush=True)
    return fmt_num(lr)


def check_settings(s, write=True):
    """Refuses when OUT holds runs made with other training settings; else (when `write`) writes
    OUT/sweep.json."""
    path = os.path.join(s.out, "sweep.json")
    mine = {k: getattr(s, k) for k in DEFAULTS}
    saved = read_json(path)
    # Settings of an OUT where no run has started (./train refused them, say) may be replaced.
    if saved is not None and glob.glob(os.path.join(s.out, "runs", "*", "log.jsonl")):
        changed = [k for k in TRAINING_SETTINGS if saved.get(k) != mine.get(k)]
        if changed:
            raise SweepError(f"{s.out} holds runs made with other settings ({', '.join(f'{k}: {saved.get(k)} → {mine.get(k)}' for k in changed)}); "
                             f"use another --out")
        # keep the union of the grids so --report lists every run
        grid = {k: mine[k] for k in GRID_SETTINGS}
        for k in grid:
            old = [x.strip() for x in str(saved.get(k) or "").split(",") if x.strip()]
            new = [x.strip() for x in str(mine[k] or "").split(",") if x.strip()]
            mine[k] = ",".join(old + [x for x in new if x not in old]) or None
        if s.publish and any(mine[k] != grid[k] for k in grid):
            print(f"sweep: not publishing to {s.publish}_*: {s.out} also holds runs of another grid", flush=True)
            s.publish = mine["publish"] = None
    if write:
        os.makedirs(s.out, exist_ok=True)
        write_json(path, mine)
    return mine


def use_private_binaries(s):
    """Runs copies of ./train and ./eval in OUT/bin, so that rebuilding them during a sweep
    disturbs nothing."""
    bin_dir = os.path.join(s.out, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    for attr, name in (("train_bin", "train"), ("eval_bin", "eval")):
        copy = os.path.join(bin_dir, name)
        shutil.copy2(getattr(s, attr), copy + ".tmp")
        os.replace(copy + ".tmp", copy)
        setattr(s, attr, copy)


def write_slurm_script(s, runs, argv):
    """Writes s.slurm: an sbatch job array, task i runs runs[i] through `sweep.py ARGV --run NAME`
    (from this directory, with the copies of the binaries in OUT/bin) unless it is recorded."""
    drop = {"--slurm": 1, "--gpus": 1, "--jobs": 1, "--dry-run": 0}
    args, i = [], 0
    while i < len(argv):
        name = argv[i].split("=")[0]
        if name in drop:
            i += 1 + (drop[name] if "=" not in argv[i] else 0)
            continue
        args.append(argv[i])
        i += 1
    args += ["--out", s.out, "--train-bin", s.train_bin, "--eval-bin", s.eval_bin]
    logs = os.path.join(s.out, "slurm")
    os.makedirs(logs, exist_ok=True)
    resources = "#SBATCH --gpus-per-task=1" if s.device == "cuda" else f"#SBATCH --cpus-per-task={s.threads or 1}"
    names = " ".join(shlex.quote(r.name) for r in runs)
    text = f"""#!/bin/bash
# Written by sweep.py: one array task per run of the sweep in {s.out}.
# Submit with `sbatch {os.path.basename(s.slurm)}`; a task whose run is recorded does nothing, so
# the same script may be submitted again. When all are done: python3 sweep.py --report {shlex.quote(s.out)}
#SBATCH --job-name=sweep
#SBATCH --array=0-{len(runs) - 1}
#SBATCH --ntasks=1
{resources}
#SBATCH --output={logs}/%A_%a.log
set -euo pipefail
RUNS=({names})
RUN=${{RUNS[$SLURM_ARRAY_TASK_ID]}}
if [ -e {shlex.quote(os.path.join(s.out, "runs"))}/"$RUN"/result.json ]; then
  echo "$RUN: recorded, skipped"
  exit 0
fi
cd {shlex.quote(os.getcwd())}
exec {shlex.quote(sys.executable)} {shlex.quote(os.path.abspath(__file__))} {shlex.join(args)} --run "$RUN"
"""
    with open(s.slurm + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(s.slurm + ".tmp", 0o755)
    os.replace(s.slurm + ".tmp", s.slurm)
    todo = sum(1 for r in runs if read_json(os.path.join(r.dir, "result.json")) is None)
    print(f"sweep: wrote {s.slurm}: {len(runs)} array tasks ({len(runs) - todo} recorded, {todo} to do); "
          f"submit it with: sbatch {s.slurm}", flush=True)


def run_alone(s, runs, name):
    """--run NAME: trains and evaluates that run of the grid (unless recorded), no tables."""
    run = next((r for r in runs if r.name == name), None)
    if run is None:
        raise SweepError(f"--run {name}: not a run of this grid")
    sweep = Sweep(s)
    result = sweep.run_one(run, 1)
    if sweep.refused:
        raise SweepError(f"./train refused the settings: {sweep.refused}")
    return 0 if result is not None else 1


def main(argv):
    s = parse_args(argv)
    if s.report:
        runs = make_grid(s)
        records, md = collect(s, runs)
        if not s.figures_only:
            print(md, end="")
        if not s.no_figures:
            ok = figures(s, runs, records, allow_other_python=not s.figures_only)
            if s.figures_only and not ok:
                return 1
        if s.publish and not s.figures_only:
            publish(s)
        return 0

    for binary in (s.train_bin, s.eval_bin):
        if not os.access(binary, os.X_OK):
            raise SweepError(f"{binary} not found: build it first (make)")
    saved = check_settings(s, write=not s.dry_run and not s.run)
    if not s.dry_run and not s.run:
        use_private_binaries(s)
    runs = make_grid(s)
    if s.run:
        return run_alone(s, runs, s.run)
    if s.slurm:
        write_slurm_script(s, runs, argv)
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = s.gpus or s.jobs or max(1, cores // max(1, s.threads or cores))
    # Seed-major order, so a sweep stopped early has every configuration at its first seeds.
    todo = sorted((r for r in runs if read_json(os.path.join(r.dir, "result.json")) is None),
                  key=lambda r: (r.seed, runs.index(r)))
    print(f"sweep: {len(runs)} runs ({len(runs) - len(todo)} recorded, {len(todo)} to do), {jobs} at once " +
          (f"one per GPU" if s.gpus else f"with {s.threads or 'all'} thread(s) each") + f"; output {s.out}", flush=True)
    sweep = Sweep(s)
    if s.dry_run:
        for r in todo:
            print(shlex.join(sweep.train_command(r)))  # quoted: globs and spaces survive a paste
            print(shlex.join(sweep.eval_command(r)))
        return 0
    start = time.time()
    def run_safely(run):
        try:
            return sweep.run_one(run, len(todo))
        except Exception as e:  # one broken run must not stop the others
            return sweep.failed(run, f"{type(e).__name__}: {e}", "train.log")

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(run_safely, todo))
    if sweep.refused:
        raise SweepError(f"./train refused the settings: {sweep.refused}")
    failed = sum(1 for r in results if r is None)
    print(f"sweep: {len(todo) - failed} runs done in {(time.time() - start) / 60:.1f} min"
          + (f", {failed} failed (run the same command again to retry them)" if failed else ""), flush=True)
    # Report on the whole grid recorded in OUT (this invocation's and earlier ones).
    s_all = argparse.Namespace(**{**vars(s), **{k: saved[k] for k in GRID_SETTINGS}})
    all_runs = make_grid(s_all)
    records, md = collect(s_all, all_runs)
    print(md, end="")
    print(f"tables: {os.path.join(s.out, 'results.csv')}, {os.path.join(s.out, 'layers.csv')}, "
          f"{os.path.join(s.out, 'results.md')}")
    if not s.no_figures:
        figures(s_all, all_runs, records)
    if s.publish:
        publish(s_all)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except SweepError as e:
        print(f"sweep: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("sweep: interrupted; run the same command again to continue", file=sys.stderr)
        sys.exit(130)

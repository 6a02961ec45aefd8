"""Results as pandas DataFrames: load(PATH) is the one way in, for the experiment reports, the
claims table, plot.py and a notebook.

    from experiments.results import load
    run = load("out")            # a ./train -out folder: run.steps, run.evals, run.stats, ...
    sweep = load("runs/e1")      # a sweep's output: sweep.results, sweep.layers, sweep.init_layers
    sweep = load("docs/e1")      # the same tables as published: docs/e1_results.csv, ...

A run folder gives a Run of
    steps        one row per step record of log.jsonl: step, loss, lr, grad_norm, ms, tok_s
    evals        one row per evaluation record: step, val_loss, val_ppl, ...
    events       the outcome, diverged and other event records (not stats): step, event, outcome, ...
    stats        the stats records (./train -stats_every), one row per step and layer i = 0..L:
                 the series of X_0..X_L (mean_abs, entry_var, data_var, rms, grad_norm,
                 grad_norm_scaled) and the block ones at i = 1..L (attn_logit_max, param_norm,
                 fcproj_grad_norm, mlp_hidden_rms; NaN at i = 0), with the record's logit_max and
                 log_z_mean repeated on each row
    eval         ./eval's eval.json as a dict (None when there is none)
    eval_layers  eval.json's per-layer series, one row per layer i = 0..L (LAYER_KEYS; None
                 without eval.json)
A sweep (OUT/results.csv, or PREFIX_results.csv as --publish writes it) gives a Sweep of
    results      one row per run (collect.RESULT_COLUMNS)
    layers       one row per run and layer i = 0..L after training (./eval's diagnostics)
    init_layers  one row per run and layer at step 0 (./train's first stats record; None when
                 the sweep has none)
    intervention one row per run, k and block of E2's intervention (intervene.py; None when the
                 sweep has none)
A log.jsonl line that is not a JSON record raises ResultsError, except the last line (a line
cut short by an interruption), which is skipped.
"""
import json
import math
import os
from collections import namedtuple

import pandas as pd

Run = namedtuple("Run", "steps evals events stats eval eval_layers")
Sweep = namedtuple("Sweep", "results layers init_layers intervention", defaults=(None,))

# The per-layer series of eval.json (docs/experiments.md, *JSON*), i = 0..L; the block ones
# (param_grad_norm ... mlp_hidden_rms, sens_mean, sens_max) are NaN at i = 0.
LAYER_KEYS = ["mean_abs", "entry_var", "data_var", "rms", "grad_norm", "grad_norm_scaled", "param_grad_norm",
              "attn_logit_max", "param_norm", "fcproj_grad_norm", "mlp_hidden_rms", "sens_mean", "sens_max",
              "noise_dx", "w2_bound", "relative_amplification"]
# The per-layer series of a stats record of log.jsonl (docs/logs.md §4): X_0..X_L, then per block.
STATS_STREAM_KEYS = ["mean_abs", "entry_var", "data_var", "rms", "grad_norm", "grad_norm_scaled"]
STATS_BLOCK_KEYS = ["attn_logit_max", "param_norm", "fcproj_grad_norm", "mlp_hidden_rms"]
# The series of a block each (i = 1..L), in eval.json's layers (eval_layers) and stats records.
BLOCK_SERIES = ("param_grad_norm", "sens_mean", "sens_max") + tuple(STATS_BLOCK_KEYS)


class ResultsError(Exception):
    """Results that cannot be read: one line naming the file and the problem."""


def load(path):
    """The results at `path` as DataFrames: a Run for a ./train -out folder, a Sweep for a
    sweep's output folder or a published prefix (PREFIX_results.csv, ...)."""
    if os.path.isfile(os.path.join(path, "log.jsonl")):
        return load_run(path)
    for stem in (os.path.join(path, ""), path + "_"):
        if os.path.isfile(stem + "results.csv"):
            optional = lambda name: read_csv(stem + name) if os.path.isfile(stem + name) else None
            return Sweep(read_csv(stem + "results.csv"), read_csv(stem + "layers.csv"), optional("init_layers.csv"),
                         optional("intervention.csv"))
    if os.path.isfile(os.path.join(path, "sweep.json")):
        raise ResultsError(f"{path}: no results.csv yet (python3 sweep.py --report {path} writes it)")
    raise ResultsError(f"{path}: not a ./train -out folder (no log.jsonl), a sweep's output (no results.csv) "
                       f"or published results (no {path}_results.csv)")


def read_csv(path):
    if not os.path.isfile(path):
        raise ResultsError(f"{path}: not found")
    try:
        return pd.read_csv(path)
    except (ValueError, UnicodeDecodeError) as e:
        raise ResultsError(f"{path}: not a CSV table ({e})")


def load_run(folder):
    records = log_records(os.path.join(folder, "log.jsonl"))
    plain = [r for r in records if "event" not in r]
    ev = read_json(os.path.join(folder, "eval.json"))
    return Run(steps=records_frame([r for r in plain if "loss" in r], ["step", "loss"]),
               evals=records_frame([r for r in plain if "val_loss" in r], ["step", "val_loss"]),
               events=records_frame([r for r in records if r.get("event") not in (None, "stats")], ["step", "event"]),
               stats=stats_frame([r for r in records if r.get("event") == "stats"]),
               eval=ev, eval_layers=eval_layers(ev) if ev else None)


def records_frame(records, first):
    """Log records as a DataFrame: the columns `first`, then every other member by name."""
    return pd.DataFrame(records, columns=first + sorted({k for r in records for k in r} - set(first)))


def log_records(path):
    """The JSON records of a log.jsonl; its last line is skipped when it is cut short."""
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as e:
        raise ResultsError(f"{path}: cannot read ({e.strerror})")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise ValueError
        except ValueError:  # also UnicodeDecodeError and json.JSONDecodeError
            if number == len(lines):
                break  # the last line without its newline: cut short by an interruption
            raise ResultsError(f"{path}: line {number} is not a log record (a JSON object with a step)")
        records.append(record)
    return records


def stats_frame(records):
    """The stats records as one row per (step, layer)."""
    rows = []
    for r in records:
        n = len(r.get("mean_abs") or [])
        for i in range(n):
            row = dict(step=r["step"], layer=i, logit_max=r.get("logit_max"), log_z_mean=r.get("log_z_mean"))
            row.update({k: at(r.get(k), i) for k in STATS_STREAM_KEYS})
            row.update({k: at(r.get(k), i - 1) for k in STATS_BLOCK_KEYS})
            rows.append(row)
    return pd.DataFrame(rows, columns=["step", "layer"] + STATS_STREAM_KEYS + STATS_BLOCK_KEYS + ["logit_max", "log_z_mean"],
                        dtype=float).astype({"step": int, "layer": int})


def at(series, i):
    """series[i], or None when there is no such entry (or no series)."""
    return series[i] if series and 0 <= i < len(series) else None


def eval_layers(ev):
    """eval.json's per-layer series as one row per layer i = 0..L."""
    lay, sens, unc = ev.get("layers") or {}, ev.get("sensitivity") or {}, ev.get("uncertainty") or {}
    stream = dict(mean_abs=lay.get("mean_abs"), entry_var=lay.get("entry_var"), data_var=lay.get("data_var"),
                  rms=lay.get("rms"), grad_norm=lay.get("grad_norm"), grad_norm_scaled=lay.get("grad_norm_scaled"),
                  noise_dx=unc.get("mean_dx"), w2_bound=unc.get("w2_bound"),
                  relative_amplification=unc.get("relative_amplification"))
    block = dict(param_grad_norm=lay.get("param_grad_norm"), attn_logit_max=lay.get("attn_logit_max"),
                 param_norm=lay.get("param_norm"), fcproj_grad_norm=lay.get("fcproj_grad_norm"),
                 mlp_hidden_rms=lay.get("mlp_hidden_rms"), sens_mean=sens.get("block_mean"),
                 sens_max=sens.get("block_max"))
    n = len(stream["mean_abs"] or [])
    rows = [dict({k: at(v, i) for k, v in stream.items()}, **{k: at(v, i - 1) for k, v in block.items()}, layer=i)
            for i in range(n)]
    return pd.DataFrame(rows, columns=["layer"] + LAYER_KEYS, dtype=float).astype({"layer": int})


def read_json(path):
    """The JSON object in `path`, or None when there is none (or it is cut short)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def finite(x):
    """x when it is a finite number, else None (NaN from a CSV, null from a JSON file)."""
    return x if x is not None and isinstance(x, (int, float)) and math.isfinite(x) else None

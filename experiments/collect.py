"""Collection: the run folders of a sweep into its tables, OUT/results.csv (one row per run),
OUT/layers.csv (one row per run and layer after training, from ./eval) and
OUT/init_layers.csv (one row per run and layer at step 0, from ./train's first stats record).
Everything after this (the reports, the claims table, the figures) reads these tables."""
import os

import pandas as pd

from .files import write_whole
from .results import LAYER_KEYS, STATS_BLOCK_KEYS, STATS_STREAM_KEYS, ResultsError, finite, load_run, read_json

# Run outcomes (docs/train.md §8): ./train stops a run as nonfinite or diverged; a run that
# finished is collapsed when its final validation loss (./eval's) is not below ./eval's
# unigram_ce of the same tokens, else ok.
OUTCOMES = ("ok", "collapsed", "diverged", "nonfinite")
FINISHED = ("ok", "collapsed")

RUN_KEYS = ["run", "ln", "dt", "wd", "lr", "depth", "precision", "seed"]
EVAL_KEYS = ["val_loss", "unigram_ce", "bigram_ce", "val_ppl", "ppl_seq", "accuracy", "logit_max", "log_z_mean"]
ROUGE_KEYS = ["rouge1", "rouge2", "rougeL", "rouge1_stem", "rouge2_stem", "rougeL_stem"]
# What ./train's last outcome or diverged record says of the whole run (docs/train.md §8).
EXTREMES = {"max_loss": "max_loss", "max_loss_step": "max_loss_step", "train_max_attn_logit": "max_attn_logit",
            "train_max_mean_abs_L": "max_mean_abs_L"}
RESULT_COLUMNS = (RUN_KEYS + ["outcome", "stopped_step", "reason", "spikes"] + list(EXTREMES) +
                  ["first_train_loss", "final_train_loss"] +
                  EVAL_KEYS + ROUGE_KEYS +
                  ["mean_abs_0", "mean_abs_L", "mean_abs_growth", "entry_var_L", "data_var_L", "grad_norm_0",
                   "grad_norm_L", "grad_norm_scaled_0", "grad_norm_scaled_L", "attn_logit_max", "sens_mean_max",
                   "w2_bound_L", "relative_amplification_L", "train_stats_step", "train_mean_abs_0",
                   "train_mean_abs_L", "train_seconds", "eval_seconds", "train_cpu_seconds",
                   "eval_cpu_seconds"])
LAYER_COLUMNS = RUN_KEYS + ["layer"] + LAYER_KEYS
INIT_LAYER_COLUMNS = RUN_KEYS + ["layer"] + STATS_STREAM_KEYS + STATS_BLOCK_KEYS


def run_keys(run):
    return dict(run=run.name, ln=run.ln, dt=run.dt, wd=run.wd, lr=run.lr, depth=run.depth, precision=run.precision,
                seed=run.seed)


def collect(out, runs):
    """Writes OUT/results.csv, OUT/layers.csv and OUT/init_layers.csv from the recorded runs of
    `runs` (grid order). Returns the names of the runs not recorded yet."""
    rows, layer_rows, init_rows, missing = [], [], [], []
    for run in runs:
        result = read_json(os.path.join(run.dir, "result.json"))
        if result is None:
            missing.append(run.name)
            continue
        try:
            record = load_run(run.dir)
        except ResultsError:  # a log.jsonl that is not the run's: collected without it
            record = None
        finished = result["outcome"] in FINISHED and record is not None and record.eval is not None
        rows.append(result_row(run, result, record, finished))
        if finished:
            layer_rows += [dict(run_keys(run), **layer) for layer in record.eval_layers.to_dict("records")]
        if record is not None and len(record.stats):
            first = record.stats[record.stats.step == record.stats.step.min()]
            if first.step.iloc[0] == 0:
                init_rows += [dict(run_keys(run), **layer) for layer in first.to_dict("records")]
    # 9 significant digits, as log.jsonl and eval.json have them: the reports read these tables
    # and lose nothing against the run folders.
    write_csv(os.path.join(out, "results.csv"), pd.DataFrame(rows, columns=RESULT_COLUMNS), digits=9)
    write_csv(os.path.join(out, "layers.csv"), pd.DataFrame(layer_rows, columns=LAYER_COLUMNS), digits=9)
    write_csv(os.path.join(out, "init_layers.csv"), pd.DataFrame(init_rows, columns=INIT_LAYER_COLUMNS), digits=9)
    return missing


def result_row(run, result, record, finished):
    """One row of results.csv: the run's result.json, its log's first and last training losses
    and last stats record, and (finished runs) its eval.json."""
    row = dict(run_keys(run), outcome=result["outcome"], stopped_step=result.get("stopped_step"),
               reason=result.get("reason"), spikes=result.get("spikes"),
               **{k: result.get(k) for k in ("train_seconds", "eval_seconds", "train_cpu_seconds", "eval_cpu_seconds")})
    if record is not None:
        losses = record.steps.dropna(subset=["loss"])
        first = losses[losses.step == 0]
        row.update(first_train_loss=first.loss.iloc[0] if len(first) else None,
                   final_train_loss=losses.loss.tail(10).mean() if len(losses) else None)
        last = record.events[record.events.event.isin(["outcome", "diverged"])]
        if len(last):
            row.update({column: last.iloc[-1].get(key) for column, key in EXTREMES.items()})
        stats = record.stats
        complete = stats[~stats.step.isin(stats.step[stats.mean_abs.isna()])]  # records with every mean_abs
        if len(complete):
            last = complete[complete.step == complete.step.max()]
            row.update(train_stats_step=last.step.iloc[0], train_mean_abs_0=last.mean_abs.iloc[0],
                       train_mean_abs_L=last.mean_abs.iloc[-1])
    if not finished:
        return row
    ev, layers = record.eval, record.eval_layers
    row.update({k: ev.get(k) for k in EVAL_KEYS})
    row.update({k: (ev.get("rouge") or {}).get(k) for k in ROUGE_KEYS})
    if len(layers):
        first, last = layers.iloc[0], layers.iloc[-1]
        row.update(mean_abs_0=first.mean_abs, mean_abs_L=last.mean_abs,
                   mean_abs_growth=last.mean_abs / first.mean_abs if first.mean_abs else None,
                   entry_var_L=last.entry_var, data_var_L=last.data_var, grad_norm_0=first.grad_norm,
                   grad_norm_L=last.grad_norm, grad_norm_scaled_0=first.grad_norm_scaled,
                   grad_norm_scaled_L=last.grad_norm_scaled, attn_logit_max=finite(layers.attn_logit_max.max()),
                   sens_mean_max=finite(layers.sens_mean.max()), w2_bound_L=last.w2_bound,
                   relative_amplification_L=last.relative_amplification)
    return row


def write_csv(path, frame, digits=6):
    """Writes a table whole or not at all: numbers with `digits` significant digits, empty cells
    for missing values, CRLF line ends (as Python's csv module writes)."""
    write_whole(path, lambda tmp: frame.to_csv(tmp, index=False, float_format=f"%.{digits}g", lineterminator="\r\n"))

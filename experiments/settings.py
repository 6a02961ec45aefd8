"""Every setting of a sweep, named once: its default, its type, the ./train or ./eval flag it
becomes, and its help line; and the presets, each one flat dictionary.

What the programs declare is not typed again here: a setting passed as a flag takes that flag's
range and choices, and, where it keeps the program's default (PROGRAM_DEFAULT), that default,
from the program's own table of flags (flag_table.py, `./train -flags_json 1`). What is the
experiments' own stays here: the settings without a flag, the defaults of a sweep that differ
from the programs' (300 steps, not 1000), the presets and the grid.

A sweep's settings are defaults(...), then a preset's values, then the flags given (sweep.py
--help lists them all). OUT/sweep.json keeps them, so a rerun into OUT can be checked against
the runs already there.
"""
from collections import namedtuple

from .flag_table import default_of, flag_row

# name: the sweep's name (its flag is --name, with - for _); kind: str, int, float or "list" (a
# grid axis, a comma list); train, eval: the ./train and ./eval flag it is passed as, if any (its
# range and choices are that flag's); low, high: the range of a setting without a flag (high
# excluded).
Setting = namedtuple("Setting", "name default kind group help train eval low high", defaults=(None, None, None, None))


class ProgramDefault:
    """The default of a setting is its flag's default in the program's own table."""
    def __repr__(self):
        return "the program's default"


PROGRAM_DEFAULT = ProgramDefault()
GRID, TRAINING, EVALUATION, EXECUTION = "grid", "training", "evaluation", "execution"
COMPACT_DATA = dict(train_data="data/mobydick_v4096_train_*.bin", val_data="data/mobydick_v4096_val_*.bin",
                    tokenizer="data/mobydick_v4096_tokenizer.bin")
# Settings whose value 0 means "the program's default": not passed at all (below the flag's range).
ZERO_MEANS_DEFAULT = ("total_batch", "threads")

SETTINGS = [
    # The grid: comma lists, every combination is a run.
    Setting("ln", "pre,peri,post", "list", GRID, "LayerNorm placements (./train -ln)", "-ln"),
    Setting("dt", "1,0.1", "list", GRID, "residual steps Δt", "-dt"),
    Setting("wd", PROGRAM_DEFAULT, "list", GRID, "weight decays", "-wd"),
    Setting("lr", PROGRAM_DEFAULT, "list", GRID, "peak learning rates", "-lr"),
    Setting("depth", None, "list", GRID, "numbers of blocks L, replacing the L of --init l{L}h{NH}c{C}..."),
    Setting("precision", None, "list", GRID, "CUDA precisions (./train -precision)", "-precision", "-precision"),
    Setting("seeds", "1-3", "list", GRID, "seeds, as a list and ranges (1-5,8)", "-seed"),
    Setting("post_lr", None, "list", GRID, "Post-LN's learning rates, instead of --lr's (E1: the half decades only)",
            "-lr"),
    Setting("post_seeds", None, "list", GRID, "Post-LN's seeds, instead of --seeds (E1: three)", "-seed"),
    # ./train's settings, shared by every run.
    Setting("init", "l8h2c64v4096", str, TRAINING,
            "model: d6|d12|d24|d36|d48, a size l{L}h{NH}c{C}[v{V}][t{maxT}] or a checkpoint FILE", "-init"),
    Setting("steps", 300, int, TRAINING, "optimiser steps", "-steps"),
    Setting("warmup", None, int, TRAINING, "warmup steps (default as ./train's: min(20, steps/10))", "-warmup"),
    Setting("lr_min_ratio", 0.1, float, TRAINING, "the cosine ends at lr_min = ratio × lr (./train's default: lr/10)",
            low=0),
    Setting("B", 4, int, TRAINING, "micro-batch (sequences)", "-B"),
    Setting("T", 64, int, TRAINING, "sequence length (tokens), in ./train and ./eval", "-T", "-T"),
    Setting("total_batch", 0, int, TRAINING, "tokens per step (0 = B × T; more = gradient accumulation)",
            "-total_batch"),
    Setting("clip", PROGRAM_DEFAULT, float, TRAINING, "gradient clipping norm (0 = off)", "-clip"),
    Setting("beta2", PROGRAM_DEFAULT, float, TRAINING, "AdamW β2", "-beta2"),
    Setting("outcome_window", PROGRAM_DEFAULT, int, TRAINING,
            "run outcomes: steps W of the mean loss (docs/train.md §8)", "-outcome_window"),
    Setting("diverge_rise", PROGRAM_DEFAULT, float, TRAINING, "run outcomes: the rise (nats) that is a divergence",
            "-diverge_rise"),
    Setting("spike_rise", PROGRAM_DEFAULT, float, TRAINING, "run outcomes: the rise (nats) that is a spike",
            "-spike_rise"),
    Setting("eval_every", PROGRAM_DEFAULT, int, TRAINING, "validation every N steps (0 = at the end only)",
            "-eval_every"),
    Setting("eval_batches", 16, int, TRAINING, "validation batches, in ./train and ./eval", "-eval_batches",
            "-eval_batches"),
    Setting("save_every", 100, int, TRAINING, "checkpoint every N steps (a run resumes from the last)",
            "-save_every"),
    Setting("stats_every", 50, int, TRAINING, "./train's per-layer statistics every N steps (0 = off)",
            "-stats_every"),
    Setting("fused", None, str, TRAINING, "CUDA's fused products, all|none|auto (./train -fused; none given: "
            "./train's default); the GPU presets fix all, so that no run's rounding depends on a timing", "-fused",
            "-fused"),
    Setting("train_data", COMPACT_DATA["train_data"], str, TRAINING, "training shards (a glob)", "-train_data",
            "-train_data"),
    Setting("val_data", COMPACT_DATA["val_data"], str, TRAINING, "validation shards (a glob)", "-val_data",
            "-val_data"),
    Setting("lr_from", None, str, TRAINING, "without --lr: the learning rates from the E1 sweep in this folder, by "
            "--lr-from-rule"),
    Setting("lr_from_rule", "edge", str, TRAINING, "edge: Pre-LN's edge of stability there, one lr for every run; "
            "best: each configuration's best lr there; matched (E2): the two largest lrs at which every Pre- and "
            "Peri-LN configuration learns there, for every run, and each one's best lr beside them; divergence (E3): "
            "Pre-LN's divergence edge there and the grid's lr above it, for every run"),
    Setting("lr_extend", 0, int, TRAINING,
            "1 = after the grid, add learning rates by half decades until it brackets every Pre- and Peri-LN edge "
            "(the earlier rounds' E1 rule, docs/round2.md), running each addition", low=0, high=2),
    Setting("intervene", 0, int, TRAINING,
            "1 = after the runs, E2's intervention on every finished run: its branch outputs scaled by k, ./eval "
            "again (intervention.csv)", low=0, high=2),
    # ./eval's settings.
    Setting("eval_B", 8, int, EVALUATION, "./eval's batch (sequences of T tokens)", None, "-B"),
    Setting("diag_batches", PROGRAM_DEFAULT, int, EVALUATION, "batches of the per-layer diagnostics", None,
            "-diag_batches"),
    Setting("directions", PROGRAM_DEFAULT, int, EVALUATION, "random directions per block for the sensitivity", None,
            "-directions"),
    Setting("sigma", None, float, EVALUATION, "absolute noise σ on X_0 (default: ./eval's relative one)", None,
            "-sigma"),
    Setting("noise_samples", PROGRAM_DEFAULT, int, EVALUATION, "noise draws per diagnostic batch", None,
            "-noise_samples"),
    Setting("tokenizer", None, str, EVALUATION,
            "the data's tokenizer; its V must be the model's, ROUGE decodes with it (default: NAME_tokenizer.bin "
            "beside NAME_train_*.bin, else ./eval's, GPT-2's); ./train's config.json records it", "-tokenizer",
            "-tokenizer"),
    # Where and how fast runs go; they do not change what a run computes.
    Setting("device", "cpu", str, EXECUTION, "the programs' -device", "-device", "-device"),
    Setting("threads", 1, int, EXECUTION, "-threads of each run (0 = the programs' default)", "-threads", "-threads"),
    Setting("jobs", 0, int, EXECUTION, "runs at once (0 = cores / threads)", low=0),
    Setting("out", "runs/sweep", str, EXECUTION, "output folder"),
    Setting("publish", None, str, EXECUTION, "also copy the tables and figures to PREFIX_NAME"),
    Setting("experiment", None, str, EXECUTION, "also write this experiment's report: e1, e2 or e3"),
]
BY_NAME = {s.name: s for s in SETTINGS}
GRID_SETTINGS = tuple(s.name for s in SETTINGS if s.group == GRID)
EXECUTION_SETTINGS = tuple(s.name for s in SETTINGS if s.group == EXECUTION)
# What a run computes: a rerun into the same OUT must keep these (the grid may grow).
TRAINING_SETTINGS = ("init", "lr_min_ratio", "warmup", "steps", "B", "T", "total_batch", "clip", "beta2",
                     "outcome_window", "diverge_rise", "spike_rise", "fused", "train_data", "val_data")


def program_of(setting, train_bin, eval_bin):
    """(binary, flag) of the program a setting is passed to: ./train's flag where it has one."""
    return (train_bin, setting.train) if setting.train else (eval_bin, setting.eval)


def own_defaults():
    """{name: default} of the settings whose default is the sweep's own (not PROGRAM_DEFAULT)."""
    return {s.name: s.default for s in SETTINGS if s.default is not PROGRAM_DEFAULT}


def defaults(train_bin, eval_bin):
    """{name: default} of every setting: its own, or (PROGRAM_DEFAULT) its flag's default in the
    table of the ./train or ./eval binary that the sweep runs (a grid axis as its comma list)."""
    out = own_defaults()
    for s in SETTINGS:
        if s.default is PROGRAM_DEFAULT:
            row = flag_row(*program_of(s, train_bin, eval_bin))
            out[s.name] = row["default_value"] if s.kind == "list" else s.kind(default_of(row))
    return {s.name: out[s.name] for s in SETTINGS}


def default_warmup(steps):
    """./train's default warmup for `steps` steps: -warmup's default in its table, min(20, steps/10),
    which test_settings ties to this line."""
    return min(20, steps // 10)


# ---------------------------------------------------------------------------------------------
# Presets (docs/protocol.md; docs/experiments.md, *Presets*). Flags given with a preset override
# it; a preset publishes its tables to docs/ only when nothing but execution settings changed.

# The CPU protocol (docs/protocol.md): an 8-block, 64-channel GPT-2 on the
# bundled corpus with its compact vocabulary, 600 steps of 8 × 64 tokens (about one epoch), 2 runs
# at a time on 1 thread each.
PROTOCOL = dict(COMPACT_DATA, init="l8h2c64v4096", wd="0.1", warmup=30, steps=600, B=8, T=64, clip=1.0, beta2=0.95,
                eval_every=200, eval_batches=16, save_every=200, stats_every=100, eval_B=8, diag_batches=1,
                directions=2, noise_samples=2, device="cpu", threads=1, jobs=2)
# The fourth round (docs/protocol.md, *The design*): each experiment's learning rates fixed before the
# runs from the third round's tables (the pilot), and its seeds, disjoint from every earlier
# round's (1-10, 101-105, 201-203, 301-312) and from each other's.
E1_LRS = "1e-3,3e-3,1e-2,3e-2"
E2_LRS, E2_DEPTHS = "0.01,0.03", "64,128"
E3_LRS = "0.1,0.13,0.17,0.23,0.31,0.42,0.56,0.75,1"
# E2 was designed with seeds 501-504; the budget's cut fixed before the runs (docs/protocol.md, *Budget*)
# triggered (E1 and E3 took 129 minutes, more than 115), so E2 runs 501-503.
E1_SEEDS, E2_SEEDS, E3_SEEDS = "401-422", "501-503", "601-605"
# The seeds the earlier rounds ran with: tables made with any of them are a pilot of this round
# (its tests were designed on them), not its evidence (findings.is_current).
EARLIER_SEEDS = frozenset(range(1, 11)) | frozenset(range(101, 106)) | frozenset(range(201, 204)) | \
    frozenset(range(301, 313))
GPU_E1_SEEDS, GPU_E2_SEEDS, GPU_E3_SEEDS = "401-405", "501-504", "601-605"
# E2's models: 2 heads of 16 channels (C = 32), so that 128 blocks fit the CPU budget.
E2_INIT = "l8h2c32v4096"
# The paper's GPT-2 setup on OpenWebText (prepare_data.py openwebtext): AdamW β = (0.9, 0.95), lr 6e-4
# with warmup and cosine decay to lr/10, clipping at 1.0, weight decay 0.1 against 0; bf16 on CUDA.
PAPER = dict(ln="pre,peri,post", dt="1,0.1", wd="0.1,0", seeds="1-3", lr="6e-4", warmup=700, steps=19073, B=16,
             T=1024, total_batch=524288, clip=1.0, beta2=0.95, eval_every=500, eval_batches=8, save_every=1000,
             stats_every=500, eval_B=2, diag_batches=1, directions=2, train_data="data/openwebtext/openwebtext_train_*.bin",
             val_data="data/openwebtext/openwebtext_val_*.bin", tokenizer=None, device="cuda", precision="bf16",
             threads=0, jobs=1)
PRESETS = {
    # E1: Pre- and Peri-LN × Δt over E1's learning rates, 22 seeds: claims 3, 4, 5 and 7.
    "e1": dict(PROTOCOL, experiment="e1", ln="pre,peri", dt="1,0.1", lr=E1_LRS, seeds=E1_SEEDS, out="runs/e1",
               publish="docs/e1"),
    # E2: deep runs, L = 64 and 128 at Δt = 1 and two learning rates, 1500 steps (about 2.7 epochs):
    # the growth inside a run (claims 1 and 2).
    "e2": dict(PROTOCOL, experiment="e2", init=E2_INIT, ln="pre,peri", dt="1", lr=E2_LRS, depth=E2_DEPTHS,
               steps=1500, seeds=E2_SEEDS, save_every=500, eval_every=500, stats_every=100, out="runs/e2",
               publish="docs/e2"),
    # E3: divergence as a dose-response over nine learning rates from 0.1 to 1, with and without
    # weight decay, E1's schedule; statistics every 20 steps for each run's extremes (claim 6).
    "e3": dict(PROTOCOL, experiment="e3", ln="pre,peri", dt="1,0.1", wd="0,0.1", lr=E3_LRS, seeds=E3_SEEDS,
               stats_every=20, out="runs/e3", publish="docs/e3"),
    # The same design on one GPU (scripts/gpu_protocol.sh): C = 256, 16 × 128 tokens a step, 500
    # steps, 8 runs at once sharing the GPU, every run with the same fused products (-fused all).
    "gpu-e1": dict(PROTOCOL, experiment="e1", init="l12h4c256v4096", ln="pre,peri", dt="1,0.1", lr=E1_LRS,
                   seeds=GPU_E1_SEEDS, B=16, T=128, steps=500, warmup=25, eval_every=250, save_every=250,
                   stats_every=50, fused="all", device="cuda", threads=2, jobs=8, out="runs/gpu-e1"),
    "gpu-e2": dict(PROTOCOL, experiment="e2", init="l12h4c256v4096", ln="pre,peri", dt="1", lr=E2_LRS,
                   depth="48,96", seeds=GPU_E2_SEEDS, B=16, T=128, steps=500, warmup=25, eval_every=250,
                   save_every=250, stats_every=50, fused="all", device="cuda", threads=2, jobs=8, out="runs/gpu-e2"),
    "gpu-e3": dict(PROTOCOL, experiment="e3", init="l12h4c256v4096", ln="pre,peri", dt="1,0.1", wd="0,0.1",
                   lr=E3_LRS, seeds=GPU_E3_SEEDS, B=16, T=128, steps=500, warmup=25, eval_every=250,
                   save_every=250, stats_every=25, fused="all", device="cuda", threads=2, jobs=8, out="runs/gpu-e3"),
    "gpt2-124m": dict(PAPER, init="d12", out="runs/gpt2-124m"),
    "gpt2-350m": dict(PAPER, init="d24", B=8, out="runs/gpt2-350m"),
    "gpt2-774m": dict(PAPER, init="d36", B=4, out="runs/gpt2-774m"),
    "gpt2-1.5b": dict(PAPER, init="d48", B=2, out="runs/gpt2-1.5b"),
}

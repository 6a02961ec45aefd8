#!/usr/bin/env python3
"""sweep.py: runs ./train and ./eval over a grid of configurations × seeds, then writes the
tables, the experiment reports and the figures; also the claims table.

The grid is LayerNorm placements × residual steps Δt × weight decays × learning rates × depths ×
precisions × seeds, at one model width, schedule and step count.

    python3 sweep.py --preset e1                  # E1 of docs/protocol.md (then e2, e3)
    python3 sweep.py --init l8h2c64v4096 --ln pre,peri --dt 1,0.1 --wd 0,0.1 --lr 1e-3,1e-2 --seeds 1-5 \\
                     --steps 600 --B 8 --T 64 --out runs/mine
    python3 sweep.py --report runs/mine           # (re)write the tables, reports and figures of a sweep
    python3 sweep.py --report docs/e1             # ... of published tables (docs/e1_results.csv, ...)
    python3 sweep.py --claims                     # docs/claims.md and README's claims table, from docs/*.csv
    python3 sweep.py --preset gpt2-124m --gpus 8  # one run per GPU of this node, 8 at once
    python3 sweep.py --preset gpt2-124m --slurm sweep.sbatch   # a Slurm job array instead; sbatch it

Every run is `./train ... -out OUT/runs/NAME -resume 1`, then `./eval -model FINAL -json
OUT/runs/NAME/eval.json`, with -threads set so that jobs × threads ≤ cores. The sweep is
resumable: a run whose OUT/runs/NAME/result.json exists is not redone, an interrupted run
continues from its last checkpoint, one that finished training but not its evaluation is only
evaluated. Each run ends with one outcome (docs/train.md §8). --gpus N runs N at once,
each on its own GPU (CUDA_VISIBLE_DEVICES); --slurm FILE writes an sbatch script with one array
task per run (`sweep.py ... --run NAME`), then `--report OUT` collects them.

Output in OUT: sweep.json (the settings; a rerun with other training settings is refused),
bin/ (the copies of ./train and ./eval the sweep runs), runs/NAME/ (NAME =
{ln}_dt{Δt}_wd{wd}_lr{lr}[_L{depth}][_{precision}]_s{seed}: log.jsonl, config.json, the final
model, train.log, eval.json, eval.log, result.json), the tables results.csv (one row per run),
layers.csv (per run and layer after training), init_layers.csv (per run and layer at step 0),
results.md, an experiment's experiment.md with its CSV, and the figures. The reports read the
tables only, so `--report PREFIX` rewrites published ones (PREFIX_*, e.g. docs/e1_*) without run
folders. Load the tables in Python with experiments.results.load (docs/experiments.md).

Checks before anything is written or started: every setting (one line and exit status 2 on bad
input), and that no output would replace an input or a file of a ./train run folder; every file
is written whole. Exit status 0 done, 1 some runs failed (the same command retries them), 2 bad
input, 4 an OS error during the work (disk full, read-only folder: one line), 130/143 stopped by
SIGINT/SIGTERM: the signal is passed on to the running ./train and ./eval, each ./train saves a
checkpoint, and the same command continues the sweep with the results of one never stopped. Needs numpy, scipy and pandas (Debian: apt-get install python3-numpy python3-scipy
python3-pandas; run from another python3 it restarts under /usr/bin/python3); the figures need
matplotlib (python3-matplotlib), without which the tables are still written.
"""
import sys

from experiments.python import require

require(("numpy", "scipy", "pandas"), "sweep.py")

from experiments.cli import main  # noqa: E402  (after the check of the interpreter)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], __doc__, __file__))

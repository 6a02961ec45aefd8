"""Claim 4's intervention (docs/round2.md, E2, *The intervention*): a trained checkpoint whose
residual branches' output projections are scaled by k, and ./eval's block sensitivity on it.

Scaling the output projection of attention (attprojw, attprojb) and of the MLP (fcprojw,
fcprojb) by k multiplies every branch output f by k. In Pre-LN the stream then takes k·f at every
block (x' = x + Δt·k·f(LN(x))), so its activations grow with k; in Peri-LN the output LayerNorm
normalises k·f back to the same vector (LN(k·f) = LN(f) for k > 0, up to LayerNorm's ε), so the
model computes the same function. The claim predicts that Pre-LN's sensitivity moves with k and
Peri-LN's does not.

    scale_branch_outputs(SRC, DST, k)   the checkpoint SRC with those tensors times k, as DST
    intervene(s, runs, ks)              for each finished run of a sweep and each k: the scaled
                                        checkpoint, ./eval -json on it, one row per block

The checkpoint format is docs/formats.md §2; numpy reads and writes it."""
import os
import subprocess

import numpy as np
import pandas as pd

from .collect import RUN_KEYS, run_keys, write_csv
from .files import write_whole
from .grid import InputError, fmt_num
from .results import read_json

# The factors of the intervention (docs/round2.md, E2): 1 is the trained model itself,
# evaluated alike.
K = (0.5, 1.0, 2.0, 4.0)
MAGIC, HEADER_WORDS = 20240326, 256
PLACEMENTS = {0: "pre", 1: "post", 2: "peri"}
SCALED = ("attprojw", "attprojb", "fcprojw", "fcprojb")
COLUMNS = RUN_KEYS + ["k", "layer", "sens_mean", "sens_max", "mean_abs", "rms"]


def layout(header):
    """The parameter tensors of a checkpoint header, in file order: [(name, number of floats)]
    (docs/formats.md §2)."""
    version, max_t, V, L, NH, C, Vp = (int(header[i]) for i in range(1, 8))
    if header[0] != MAGIC or version not in (3, 100) or min(max_t, V, L, NH, C, Vp) <= 0:
        raise InputError("not a model checkpoint (docs/formats.md §2)")
    placement = PLACEMENTS.get(int(header[8])) if version == 100 else "pre"
    if placement is None:
        raise InputError(f"unknown placement {int(header[8])} in the header")
    tensors = [("wte", Vp * C), ("wpe", max_t * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C),
               ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C),
               ("fcw", L * 4 * C * C), ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C),
               ("lnfw", C), ("lnfb", C)]
    if placement == "peri":
        tensors += [("ln1ow", L * C), ("ln1ob", L * C), ("ln2ow", L * C), ("ln2ob", L * C)]
    return tensors


def scale_branch_outputs(src, dst, k):
    """Writes DST: the checkpoint SRC with attprojw, attprojb, fcprojw and fcprojb multiplied by k
    (float32, as stored), everything else byte for byte. Refuses a file that is not a checkpoint
    or whose size does not match its header; DST appears whole or not at all."""
    try:
        raw = np.fromfile(src, dtype="<i4")
    except OSError as e:
        raise InputError(f"{src}: cannot read ({e.strerror})")
    if len(raw) < HEADER_WORDS:
        raise InputError(f"{src}: not a model checkpoint (shorter than its header)")
    header = raw[:HEADER_WORDS]
    try:
        tensors = layout(header)
    except InputError as e:
        raise InputError(f"{src}: {e}")
    params = raw[HEADER_WORDS:].view("<f4").copy()
    if len(params) != sum(n for _, n in tensors):
        raise InputError(f"{src}: {len(params)} parameters, the header describes {sum(n for _, n in tensors)}")
    at = 0
    for name, n in tensors:
        if name in SCALED:
            params[at:at + n] *= np.float32(k)
        at += n
    def fill(tmp):
        with open(tmp, "wb") as f:
            f.write(header.astype("<i4").tobytes())
            f.write(params.astype("<f4").tobytes())
    write_whole(dst, fill)


def eval_rows(run, k, ev):
    """intervention.csv's rows of one evaluation: per block l = 1..L its sensitivity (mean and max
    ‖J v‖) and the mean |X_l| and RMS of the stream after it."""
    sens, layers = ev.get("sensitivity") or {}, ev.get("layers") or {}
    mean, top = sens.get("block_mean") or [], sens.get("block_max") or []
    return [dict(run_keys(run), k=k, layer=l + 1, sens_mean=mean[l], sens_max=top[l] if l < len(top) else None,
                 mean_abs=(layers.get("mean_abs") or [None] * (l + 2))[l + 1],
                 rms=(layers.get("rms") or [None] * (l + 2))[l + 1]) for l in range(len(mean))]


def intervene(s, runs, ks, eval_command, say=print):
    """For each finished run of `runs` (result.json ok or collapsed, its final checkpoint kept)
    and each k of `ks`: the scaled checkpoint (removed once evaluated), ./eval -json
    NAME/intervention_k{k}.json (kept: a rerun skips it), then OUT/intervention.csv of every
    evaluation. `eval_command(run, model, json)` is ./eval's command line."""
    rows, done = [], 0
    for run in runs:
        result = read_json(os.path.join(run.dir, "result.json"))
        model = os.path.join(run.dir, f"model_{s.steps:08d}.bin")
        if result is None or result.get("outcome") not in ("ok", "collapsed") or not os.path.isfile(model):
            continue
        for k in ks:
            out = os.path.join(run.dir, f"intervention_k{fmt_num(k)}.json")
            if read_json(out) is None:
                scaled = os.path.join(run.dir, f"scaled_k{fmt_num(k)}.bin")
                scale_branch_outputs(model, scaled, k)
                with open(os.path.join(run.dir, "intervention.log"), "a", encoding="utf-8") as log:
                    status = subprocess.run(eval_command(run, scaled, out), cwd=s.repo, stdout=log,
                                            stderr=subprocess.STDOUT).returncode
                os.remove(scaled)
                if status != 0 or read_json(out) is None:
                    say(f"FAILED intervention {run.name} k = {fmt_num(k)}: ./eval exited with status {status}; see "
                        f"{os.path.join(run.dir, 'intervention.log')}")
                    continue
            rows += eval_rows(run, k, read_json(out))
        done += 1
    path = os.path.join(s.out, "intervention.csv")
    write_csv(path, pd.DataFrame(rows, columns=COLUMNS), digits=9)
    say(f"intervention: {done} checkpoints × k = {', '.join(fmt_num(k) for k in ks)}; table {path}")
    return path

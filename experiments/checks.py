"""The checks of a sweep's settings before anything is written or started: every number in its
range, the output folder, the warmup against the steps, the model against the data's vocabulary,
the GPUs asked for against the machine's. Each refusal is an InputError: one line, exit 2."""
import glob
import math
import os
import re
import shutil
import subprocess

import numpy as np

from .grid import CUSTOM_SIZE, InputError, fmt_num, header_word, is_model_size, make_grid, model_vocab, parse_list
from .files import check_is_folder
from .flag_table import check_value, flag_row
from .settings import SETTINGS, ZERO_MEANS_DEFAULT, default_warmup

SHARD_MAGIC, TOKENIZER_MAGIC = 20240520, 20240328
TOKENS_CHECKED = 1 << 24  # per data glob: enough to see a vocabulary that does not fit; ./train checks all


def check_numbers(s):
    """Every number setting finite, and within the range of the flag it is passed as, in the table
    of the ./train or ./eval binary the sweep runs (flag_table.py); a setting without a flag within
    its own range; a choice among its flag's choices."""
    for setting in SETTINGS:
        value = getattr(s, setting.name)
        if setting.kind == "list" or value is None or (value == 0 and setting.name in ZERO_MEANS_DEFAULT):
            continue
        where = "--" + setting.name.replace("_", "-")
        if setting.kind in (int, float) and not math.isfinite(value):
            raise InputError(f"{where}: {value} is not a finite number")
        for binary, flag in ((s.train_bin, setting.train), (s.eval_bin, setting.eval)):
            if flag and (setting.kind in (int, float) or flag_row(binary, flag)["values"]["kind"] == "choice"):
                check_value(binary, flag, value, where)
        if setting.low is not None and value < setting.low:
            raise InputError(f"{where}: {fmt_num(value)} is out of range (must be ≥ {fmt_num(setting.low)})")
        if setting.high is not None and value >= setting.high:
            raise InputError(f"{where}: {fmt_num(value)} is out of range (must be < {fmt_num(setting.high)})")


def check_grid(s):
    """Every value of the grid's axes one that its ./train flag takes (and ./eval's, for a
    precision): the placements of ln/Δt=lr entries first, then each run's placement, Δt, weight
    decay, learning rate, precision and seed."""
    for name in ("lr", "post_lr"):
        where = "--" + name.replace("_", "-")
        for entry in parse_list(getattr(s, name), "lr", where) if getattr(s, name) else []:
            if isinstance(entry, tuple):
                check_value(s.train_bin, "-ln", entry[0], where)
    for run in make_grid(s):
        own = run.ln == "post"  # Post-LN's lrs and seeds may be its own (--post-lr, --post-seeds)
        for value, flag, where in ((run.ln, "-ln", "--ln"), (run.dt, "-dt", "--dt"), (run.wd, "-wd", "--wd"),
                                   (run.lr, "-lr", "--post-lr" if own and s.post_lr else "--lr"),
                                   (run.seed, "-seed", "--post-seeds" if own and s.post_seeds else "--seeds")):
            check_value(s.train_bin, flag, value, where)
        if run.precision:
            check_value(s.train_bin, "-precision", run.precision, "--precision")
            check_value(s.eval_bin, "-precision", run.precision, "--precision")


def resolve_warmup(s):
    """The warmup as ./train takes it: the given one, which may not exceed --steps, or
    ./train's default min(20, steps/10)."""
    if s.warmup is None:
        return default_warmup(s.steps)
    if s.warmup > s.steps:
        raise InputError(f"--warmup {s.warmup} exceeds --steps {s.steps}")
    return s.warmup


def check_out(out):
    check_is_folder(out, "--out")


def data_tokenizer(s):
    """The tokenizer that goes with the data: --tokenizer, else NAME_tokenizer.bin beside
    NAME_train_*.bin when there is one (prepare_data.py writes it so), else None (./eval's
    default, GPT-2's)."""
    if s.tokenizer:
        return s.tokenizer
    name = os.path.basename(s.train_data)
    if "_train_" in name:
        beside = os.path.join(os.path.dirname(s.train_data), name[:name.index("_train_")] + "_tokenizer.bin")
        if os.path.isfile(beside):
            return beside
    return None


def check_model_and_data(s):
    """--init is a model size or a checkpoint; the shards exist and are token shards whose ids
    are below the model's V; the data's tokenizer (data_tokenizer) has the model's V."""
    if not is_model_size(s.init) and not os.path.isfile(s.init):
        raise InputError(f"--init {s.init}: neither a model size (d6 ... d48, l{{L}}h{{NH}}c{{C}}[v{{V}}][t{{maxT}}]) "
                         f"nor a checkpoint file")
    size = CUSTOM_SIZE.fullmatch(s.init)
    if size:
        heads, channels, max_t = int(size.group(2)), int(size.group(3)), int(size.group(5) or 1024)
        if heads < 1 or channels % heads:
            raise InputError(f"--init {s.init}: channels C={channels} not divisible by heads NH={heads}")
        if s.T > max_t:
            raise InputError(f"--T {s.T}: longer than the model's maxT = {max_t} (--init {s.init})")
    vocab = model_vocab(s.init)
    if vocab is None:
        raise InputError(f"--init {s.init}: not a model checkpoint (bad magic)")
    if s.tokenizer:
        tokenizer_vocab = header_word(s.tokenizer, TOKENIZER_MAGIC, 2)
        if tokenizer_vocab is None:
            raise InputError(f"--tokenizer {s.tokenizer}: not a tokenizer file")
        if tokenizer_vocab != vocab:
            raise InputError(f"--init {s.init}: the model's vocabulary V = {vocab} is not the data's: its tokenizer "
                             f"{s.tokenizer} has V = {tokenizer_vocab} (give --init ...v{tokenizer_vocab}, or other data)")
    for flag, pattern in (("--train-data", s.train_data), ("--val-data", s.val_data)):
        largest = largest_token(flag, pattern)
        if largest >= vocab:
            raise InputError(f"{flag} {pattern}: token id {largest} is not below the model's vocabulary V = {vocab} "
                             f"(--init {s.init})")


def largest_token(flag, pattern):
    """The largest token id among the first TOKENS_CHECKED tokens of the shards of `pattern`."""
    files = sorted(glob.glob(pattern))
    if not files:
        raise InputError(f"{flag} {pattern}: no file matches")
    largest, left = 0, TOKENS_CHECKED
    for path in files:
        count = header_word(path, SHARD_MAGIC, 2)
        if count is None or count <= 0 or os.path.getsize(path) != 1024 + 2 * count:
            raise InputError(f"{flag}: {path} is not a token shard (docs/data.md, *Token shards*)")
        tokens = np.memmap(path, dtype="<u2", mode="r", offset=1024, shape=(min(count, left),))
        largest = max(largest, int(tokens.max()))
        left -= len(tokens)
        if left <= 0:
            break
    return largest


def gpu_count():
    """The GPUs of this machine: the lines `GPU n: ...` of `nvidia-smi -L`, or without nvidia-smi
    the device files /dev/nvidia0, /dev/nvidia1, ..."""
    if shutil.which("nvidia-smi"):
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            listing = ""
        return sum(1 for line in listing.splitlines() if line.startswith("GPU "))
    return sum(1 for path in glob.glob("/dev/nvidia*") if re.fullmatch(r"/dev/nvidia\d+", path))


def check_gpus(gpus):
    if gpus < 0:
        raise InputError(f"--gpus: {gpus} is out of range (must be ≥ 0)")
    if gpus:
        have = gpu_count()
        if gpus > have:
            raise InputError(f"--gpus {gpus}: this machine has {have} GPU{'' if have == 1 else 's'} (nvidia-smi -L)")


def check_binaries(s):
    for binary in (s.train_bin, s.eval_bin):
        if not os.access(binary, os.X_OK):
            raise InputError(f"{binary} not found: build it first (make train eval)")

"""The grid of a sweep: placements × Δt × weight decays × learning rates × depths × precisions ×
seeds, one Run each, named {ln}_dt{Δt}_wd{wd}_lr{lr}[_L{depth}][_{precision}]_s{seed}."""
import math
import os
import re
import stat

# ./train -ln's placements in the order of the figures and tables, with their labels (a test ties
# them to ./train's table of flags; checks.check_grid checks a grid against that table).
PLACEMENTS = ("pre", "post", "peri")
PLACEMENT_LABEL = {"pre": "Pre-LN", "post": "Post-LN", "peri": "Peri-LN"}

# ./train -init's fresh sizes (model.h): the named ones and l{L}h{NH}c{C}[v{V}][t{maxT}]. A size
# spelling wins over a file of that name, in ./train and here.
NAMED_SIZES = ("d6", "d12", "d24", "d36", "d48")
CUSTOM_SIZE = re.compile(r"l(\d+)h(\d+)c(\d+)(?:v(\d+))?(?:t(\d+))?")
GPT2_VOCAB = 50257


class InputError(Exception):
    """Bad input to a tool: reported as one line, exit status 2, before anything is written."""


def is_model_size(spec):
    return spec in NAMED_SIZES or CUSTOM_SIZE.fullmatch(spec) is not None


def fmt_num(x):
    """1.0 → "1", 0.1 → "0.1", 6e-4 → "0.0006": short and stable for names."""
    return f"{x:g}"


def value_text(v):
    """A grid value as the comma lists spell it: a number short (fmt_num), a learning rate of one
    configuration as ln/Δt=lr."""
    if isinstance(v, tuple):
        return f"{v[0]}/{fmt_num(v[1])}={fmt_num(v[2])}"
    return fmt_num(v) if isinstance(v, float) else str(v)


def finite(text, flag):
    """The number `text`; refuses NaN and infinities, which no setting takes."""
    value = float(text)
    if not math.isfinite(value):
        raise InputError(f"{flag}: {text.strip()} is not a finite number")
    return value


def parse_list(text, kind, flag):
    """The values of a comma list: words (placements, precisions), integers (with ranges lo-hi),
    numbers, or learning rates (kind "lr": a number for every configuration, or ln/Δt=lr for one
    configuration only, as the tuple (ln, Δt, lr)). Refuses an unreadable item, an empty list and
    a value given twice (two runs would share one folder); whether ./train takes each value is
    checks.check_grid's question."""
    values = []
    for item in (x.strip() for x in str(text).split(",")):
        if not item:
            continue
        try:
            if kind == "lr" and "=" in item:
                config, lr = item.split("=")
                ln, dt = config.split("/")
                values.append((ln, finite(dt, flag), finite(lr, flag)))
            elif kind == "int" and "-" in item[1:]:
                lo, hi = (int(x) for x in item.split("-"))
                if hi < lo:
                    raise ValueError
                values.extend(range(lo, hi + 1))
            elif kind == "int":
                values.append(int(item))
            elif kind in ("ln", "precision"):
                values.append(item)
            else:
                values.append(finite(item, flag))
        except ValueError:
            choices = {"lr": "a number, or ln/Δt=number for one configuration"}.get(kind, "a number")
            raise InputError(f"{flag}: cannot read '{item}' ({choices})")
    if not values:
        raise InputError(f"{flag}: empty list")
    refuse_repeats(values, flag)
    return values


def refuse_repeats(values, where, after=""):
    """Refuses a value given twice in `values` (two runs would share one folder), naming them."""
    twice = sorted({value_text(v) for v in values if values.count(v) > 1})
    if twice:
        raise InputError(f"{where}: {', '.join(twice)} given twice{after} (each value is one run folder)")


def check_range(values, flag, low):
    """Refuses a value below `low`."""
    for v in values:
        if v < low:
            raise InputError(f"{flag}: {fmt_num(v)} is out of range (must be ≥ {fmt_num(low)})")


class Run:
    """One run of the grid: placement, Δt, weight decay, learning rate, depth (None: the depth of
    --init), precision (None: the program's default) and seed."""
    def __init__(self, ln, dt, wd, lr, depth, precision, seed, out):
        self.ln, self.dt, self.wd, self.lr, self.depth, self.precision, self.seed = ln, dt, wd, lr, depth, precision, seed
        self.name = (f"{ln}_dt{fmt_num(dt)}_wd{fmt_num(wd)}_lr{fmt_num(lr)}" + (f"_L{depth}" if depth else "") +
                     (f"_{precision}" if precision else "") + f"_s{seed}")
        self.dir = os.path.join(out, "runs", self.name)
        self.config = (ln, dt, wd, lr, depth, precision)


def init_for(init, depth):
    """./train's -init for a run: `init`, with its number of blocks replaced by `depth` when the
    grid has a depth axis."""
    if depth is None:
        return init
    return f"l{depth}" + init[init.index("h"):]


def make_grid(s):
    """The runs of settings `s`, in grid order (placement, Δt, wd, lr, depth, precision, seed).
    Post-LN's runs take --post-lr and --post-seeds where given, instead of --lr and --seeds."""
    depths = parse_list(s.depth, "int", "--depth") if s.depth else [None]
    if s.depth:
        check_range(depths, "--depth", 1)
        if not CUSTOM_SIZE.fullmatch(s.init):
            raise InputError(f"--depth needs --init of the form l{{L}}h{{NH}}c{{C}}..., not {s.init}")
    precisions = parse_list(s.precision, "precision", "--precision") if s.precision else [None]
    dts, wds = (parse_list(getattr(s, name), name, "--" + name) for name in ("dt", "wd"))
    lrs, seeds = parse_list(s.lr, "lr", "--lr"), parse_list(s.seeds, "int", "--seeds")
    post_lrs = parse_list(s.post_lr, "lr", "--post-lr") if s.post_lr else lrs
    post_seeds = parse_list(s.post_seeds, "int", "--post-seeds") if s.post_seeds else seeds
    placements = parse_list(s.ln, "ln", "--ln")
    return [Run(ln, dt, wd, lr, depth, precision, seed, s.out)
            for ln in placements for dt in dts for wd in wds
            for lr in config_lrs(post_lrs if ln == "post" else lrs, ln, dt)
            for depth in depths for precision in precisions for seed in (post_seeds if ln == "post" else seeds)]


def config_lrs(lrs, ln, dt):
    """The learning rates of configuration (ln, Δt) in the --lr list: the plain ones and its own
    ln/Δt=lr ones, in order. Refuses a configuration without any and one given twice."""
    mine = [v for v in lrs if not isinstance(v, tuple)] + [v[2] for v in lrs if isinstance(v, tuple) and v[:2] == (ln, dt)]
    if not mine:
        raise InputError(f"--lr: no learning rate for {ln}/{fmt_num(dt)} (give a number, or {ln}/{fmt_num(dt)}=lr)")
    refuse_repeats(mine, "--lr", f" for {ln}/{fmt_num(dt)}")
    return mine


def model_vocab(init):
    """The vocabulary size V of --init: a size spelling's v{V} (GPT-2's 50257 without it, and for
    the named sizes) or a checkpoint's header[3]; None for a file that is not a checkpoint."""
    size = CUSTOM_SIZE.fullmatch(init)
    if size:
        return int(size.group(4)) if size.group(4) else GPT2_VOCAB
    if init in NAMED_SIZES:
        return GPT2_VOCAB
    return header_word(init, 20240326, 3)


def header_word(path, magic, index):
    """int32 word `index` of the 256-word header of a file that starts with `magic`, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO: refused (not regular), not waited for
    except (OSError, ValueError):
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        header = f.read(4 * (index + 1))
    words = [int.from_bytes(header[4 * i: 4 * i + 4], "little", signed=True) for i in range(len(header) // 4)]
    return words[index] if len(words) > index and words[0] == magic else None

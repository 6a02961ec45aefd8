"""What the reports share: a sweep's table joined to its grid, configuration labels, and the
number formats of the markdown tables (mean ± sd (n), counts of outcomes, tallies)."""
import math

import pandas as pd

from .collect import OUTCOMES, RESULT_COLUMNS, RUN_KEYS
from .grid import PLACEMENT_LABEL, fmt_num
from .stats import mean_sd

CONFIG_KEYS = ["ln", "dt", "wd", "lr", "depth", "precision"]


def on_grid(runs, results):
    """One row per run of the grid `runs` (grid order) with its results (NaN where the run is
    not recorded: outcome is then NaN; every column of collect.RESULT_COLUMNS, NaN where a table
    of an older collection lacks it). depth and precision are None where the grid has none."""
    grid = pd.DataFrame([dict(run=r.name, ln=r.ln, dt=r.dt, wd=r.wd, lr=r.lr, depth=r.depth, precision=r.precision,
                              seed=r.seed) for r in runs], columns=RUN_KEYS).astype({"depth": object, "precision": object})
    results = results.reindex(columns=RESULT_COLUMNS)
    return grid.merge(results.drop(columns=RUN_KEYS[1:]), on="run", how="left")


def groups(frame, keys):
    """(key tuple, rows) of `frame` grouped by the columns `keys`, in the order of first
    appearance; None stands for a missing depth or precision."""
    if not len(frame):
        return []
    key = frame[keys].apply(lambda row: tuple(none_if_nan(v) for v in row), axis=1)
    return [(k, frame[key == k]) for k in dict.fromkeys(key)]


def none_if_nan(v):
    return None if v is None or (isinstance(v, float) and v != v) else v


def values(rows, column):
    """The column's values as a list (NaN kept; mean_sd drops it)."""
    return list(rows[column]) if len(rows) else []


def recorded(rows):
    return rows[rows.outcome.notna()]


def finished(rows):
    return rows[rows.outcome.isin(["ok", "collapsed"])]


def outcome_counts(rows):
    """{outcome: number of runs} over the rows."""
    return {k: int((rows.outcome == k).sum()) for k in OUTCOMES}


def fmt_spread(values, spec=".3g"):
    """mean ± sd (n) of the finite values, each number in the format `spec`; "—" without values."""
    mean, sd, n = mean_sd(values)
    if mean is None:
        return "—"
    return format(mean, spec) + (f" ± {format(sd, spec)}" if sd is not None else "") + f" ({n})"


def fmt_stat(values, digits):
    """mean ± sd (n) of the finite values with `digits` decimals; "—" when there are none."""
    return fmt_spread(values, f".{digits}f")


def short_label(ln, dt, precision=None, depth=None):
    return (f"{PLACEMENT_LABEL[ln]} Δt={fmt_num(dt)}" + (f" L={depth}" if depth else "") +
            (f" {precision}" if precision else ""))


def config_label(config):
    ln, dt, wd, lr, depth, precision = config
    return f"{PLACEMENT_LABEL[ln]} Δt={fmt_num(dt)} " + settings_label(dict(wd=wd, lr=lr, depth=depth, precision=precision))


def settings_label(settings):
    """"wd=0.1 lr=0.003 L=16 bf16": the settings of a configuration beyond its placement and Δt,
    {name: value} over wd, lr, depth and precision, those that are None left out."""
    text = {"wd": lambda v: f"wd={fmt_num(v)}", "lr": lambda v: f"lr={fmt_num(v)}", "depth": lambda v: f"L={v}",
            "precision": str}
    return " ".join(text[k](v) for k, v in settings.items() if v is not None)


def tally(names):
    """"a 4, b 1": how often each name occurs, the most frequent first (ties in order of first
    appearance)."""
    counts = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return ", ".join(f"{n} {k}" for n, k in sorted(counts.items(), key=lambda x: -x[1]))


def table(header, rows):
    """A markdown table: the header cells, then one line per row of cells."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
           ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


# ---------------------------------------------------------------------------------------------
# Number formats of the claims table's prose

def two_digits(x, like=None):
    """x to two significant digits, but never rounded to tens (4.56 → 4.6, 16.1 → 16, 178.3 →
    178); with `like`, to the decimals two_digits(like) has."""
    ref = abs(like if like is not None else x)
    return f"{x:.{max(0, 1 - math.floor(math.log10(ref)))}f}" if ref else "0"


def p_value(p):
    """A p-value: two significant digits from 0.01 up, one below (0.0047 → 0.005), and as
    m e-k below 0.001 (0.00053 → 5e-4)."""
    if p >= 0.01:
        return f"{p:.2g}"
    if p >= 0.001:
        return f"{p:.1g}"
    mantissa, exponent = f"{p:.0e}".split("e")
    return f"{mantissa}e-{int(exponent[1:])}"


def decimals2(x):
    """Two decimals, trailing zeros dropped (1.70 → 1.7)."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


def minus(x, spec=".2f"):
    """x with a typographic minus sign (−0.38)."""
    return format(x, spec).replace("-", "−")


def mean_sd_text(values, spec=".3f"):
    mean, sd, _ = mean_sd(values)
    return f"{mean:{spec}} ± {sd:{spec}}"


def between_markers(text, lines, begin, end):
    """`text` with the lines between the markers `begin` and `end` (each once, in that order)
    replaced by `lines`: how the generated tables go into README.md and docs/protocol.md."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"needs one {begin} and, after it, one {end}")
    head, rest = text.split(begin)
    return head + begin + "\n" + "\n".join(lines) + "\n" + end + rest.split(end, 1)[1]

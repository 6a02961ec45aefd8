"""README's *What the runs found*, generated from the published tables (like the claims table):
every number of that paragraph comes from docs/e1_*, docs/e2_*, docs/e3_* through this module, and
`sweep.py --claims` writes it between README's `<!-- found:begin -->` and `<!-- found:end -->`.
Every median and count is taken over all runs of a cell (a run that stopped has no final
measurement and is counted as stopped); where a test keeps a subset, the subset's number follows
with how many runs it left out. It says which protocol's tables these are: the seeds of the
presets of the fourth round (settings.py), or older ones while its runs are pending."""
import numpy as np

from . import e1, stats
from .claim_rows import EVENTS, label, lrs_text
from .grid import PLACEMENT_LABEL, fmt_num
from .settings import EARLIER_SEEDS
from .tables import finished, recorded, two_digits

BEGIN, END = "<!-- found:begin -->", "<!-- found:end -->"
# docs/protocol.md's table of the time the published runs took, between these markers.
TIME_BEGIN, TIME_END = "<!-- time:begin -->", "<!-- time:end -->"


def seeds_of(runs):
    return sorted({int(s) for s in recorded(runs).seed})


def fmt_seeds(runs):
    s = seeds_of(runs)
    return f"{s[0]}–{s[-1]}" if s and s == list(range(s[0], s[-1] + 1)) else ", ".join(map(str, s))


def is_current(x):
    """Are the loaded tables this round's evidence: none of their runs made with an earlier round's
    seed (settings.EARLIER_SEEDS: those tables are the pilot this round's tests were designed on)?"""
    return not any(set(seeds_of(runs)) & EARLIER_SEEDS for runs in (x.e1, x.e2, x.e3))


def which_protocol(x):
    """One sentence: whose tables these are (the fourth round's seeds, or not yet)."""
    counts = (f"E1 {len(recorded(x.e1))} runs, E2 {len(recorded(x.e2))} runs, E3 {len(recorded(x.e3))} runs, seeds "
              f"{fmt_seeds(x.e1)}, {fmt_seeds(x.e2)} and {fmt_seeds(x.e3)}")
    if is_current(x):
        return f"The tables under `docs/` are the fourth round's ({counts})."
    return (f"The tables under `docs/` are still the third round's ({counts}); the fourth round, pre-registered in "
            "[docs/protocol.md](docs/protocol.md), has not run yet. Its tests, designed after these tables were "
            "seen, are not evidence on them: the claims table shows their numbers on these tables but no verdict.")


def median_text(values):
    """"median (min–max)" of the finite values, "—" without any."""
    v = stats.finite_values(values)
    return "—" if not len(v) else f"{two_digits(np.median(v))} ({two_digits(v.min())}–{two_digits(v.max())})"


def e1_lines(x):
    got = recorded(x.e1[x.e1.ln.isin(["pre", "peri"])])
    parts = []
    for (ln, dt), rows in got.groupby(["ln", "dt"], sort=False):
        done = finished(rows)
        parts.append(f"{label((ln, dt))} {median_text(done.val_loss)}, failed {int(e1.failed(rows).sum())} of "
                     f"{len(rows)}")
    return [f"- **E1** (L = 8, lr {lrs_text(sorted(set(got.lr)))}): every Pre- and Peri-LN configuration learns at "
            f"lr {lrs_text(x.range)}. Final validation loss over all finished runs, median (range), and runs that "
            f"failed E1's line: " + "; ".join(parts) + "."]


def e2_lines(x):
    got = recorded(x.e2)
    deep = x.e2_deep
    if not len(got):
        return []
    stopped = len(got) - len(finished(got))
    parts = [f"{PLACEMENT_LABEL[ln]} Δt {fmt_num(dt)} lr {fmt_num(lr)} L = {int(depth)}: mean\\|X_L\\| "
             f"{median_text(rows.merge(got, on='run').mean_abs_L)}, rate {median_text(rows.rate)} per block"
             for (ln, dt, lr, depth), rows in deep.groupby(["ln", "dt", "lr", "depth"], sort=True)]
    gated = int(deep.gated.sum()) if len(deep) else 0
    return [f"- **E2**: {len(deep)} of {len(got)} runs finished with a profile ({stopped} stopped). Over all of them, "
            f"median (range) of mean\\|X_L\\| and of the deep-half rate of ln mean\\|X_l\\| (l ∈ [L/2, L]): " +
            "; ".join(parts) + f". {gated} of the {len(deep)} also end 0.75 nats below unigram_ce (no test keeps "
            "only those)."]


def e3_lines(x):
    got = recorded(x.e3)
    if not len(got):
        return []
    parts = []
    for (ln, dt, wd), rows in got.groupby(["ln", "dt", "wd"], sort=True):
        parts.append(f"{PLACEMENT_LABEL[ln]} Δt {fmt_num(dt)} wd {fmt_num(wd)}: " +
                     ", ".join(f"{int(event(rows).sum())}" for _, _, event in EVENTS) + f" of {len(rows)}")
    events = ", ".join(label for _, label, _ in EVENTS)
    return [f"- **E3** at lr {lrs_text(sorted(set(got.lr)))}: per configuration the runs that {events} "
            "(in this order), of all its runs: " + "; ".join(parts) + "."]


def e1_best_line(x):
    m = x.e1_measured
    ref = next((k for k in m if k[:2] == ("peri", 0.1)), None)
    if ref is None or not m[ref]["L*"]:
        return []
    others = [np.mean(v["L*"]) for k, v in m.items() if k != ref and k[0] in ("pre", "peri") and v["L*"]]
    if not others:
        return []
    return [f"- **Best final loss (L\\*)**: Peri-LN Δt = 0.1 {np.mean(m[ref]['L*']):.3f} against "
            f"{min(others):.3f}–{max(others):.3f} for the other Pre- and Peri-LN configurations (means over the seeds)."]


def findings(x):
    """The lines of README's *What the runs found*."""
    return ([f"**What the runs found.** {which_protocol(x)}", ""] + e1_lines(x) + e2_lines(x) + e3_lines(x) +
            e1_best_line(x))


def time_lines(x):
    """docs/protocol.md's table of the time each experiment's runs took, from the published tables:
    per experiment the runs, the CPU seconds of ./train and ./eval summed (what two idle cores take
    half of), and the runs' own wall times summed over two at a time."""
    rows = ["| experiment | runs | CPU seconds (train + eval) | on 2 idle cores | runs' wall times / 2 |",
            "|---|---|---|---|---|"]
    totals = [0.0, 0.0]
    for name, runs in (("E1", x.e1), ("E2", x.e2), ("E3", x.e3)):
        got = recorded(runs)
        cpu = float(got.reindex(columns=["train_cpu_seconds", "eval_cpu_seconds"]).fillna(0).to_numpy().sum())
        wall = float(got.reindex(columns=["train_seconds", "eval_seconds"]).fillna(0).to_numpy().sum()) / 2
        totals = [totals[0] + cpu / 2, totals[1] + wall]
        rows.append(f"| {name} | {len(got)} | {cpu:,.0f} | {cpu / 120:.0f} min | {wall / 60:.0f} min |")
    rows.append(f"| **all** | | | **{totals[0] / 60:.0f} min** | **{totals[1] / 60:.0f} min** |")
    return rows

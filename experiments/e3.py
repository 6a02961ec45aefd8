"""E3, divergence as a dose-response (docs/protocol.md, *The design*): Pre- and Peri-LN × Δt × weight
decay over a fine grid of learning rates, E1's schedule. Four events per run (claim_rows.EVENTS):
diverged (e1.diverged, the primary: stopped, its last training loss above its first, or collapsed
after a blow-up), ran away (stopped or above its first loss), broke (diverged or collapsed) and
failed (E1's failure line). Per configuration (placement, Δt, wd)
and learning rate the counts of each over the seeds; per configuration and event the learning
rate at which half the runs have it, from a logistic curve in ln lr (stats.logistic_edge); and
claim 6's shift tests in each Δt (primary.divergence_shift: Peri-LN's 50% learning rate against
Pre-LN's, one curve per weight decay with one slope; primary.weight_decay_gap: how much larger
Peri-LN's advantage is without weight decay; and each placement's own weight-decay shift), for the
primary event and the secondary ones. Writes tests.csv
(one row per test, event and Δt) and the figure divergence.png."""
import math

import numpy as np
import pandas as pd

from . import e1, primary, stats
from .claim_rows import EVENTS
from .collect import OUTCOMES
from .grid import PLACEMENT_LABEL, fmt_num
from .tables import groups, outcome_counts, recorded, short_label, table

TITLE = "E3: divergence against learning rate"
FILES = ("tests.csv", "divergence.png")
# The shift tests of claim 6: (name, what its ratio is, primary's test).
# (name, what its ratio is, the fit, primary's test of it): the report's estimates and the claims'
# verdicts come from one fit.
SHIFT_TESTS = (("placement", "Peri-LN's 50% lr ÷ Pre-LN's (6a: claimed above 1)", primary.divergence_shift_fit,
                primary.divergence_shift),
               ("placement × weight decay", "Peri-LN's advantage at the smaller wd ÷ at the larger (6b: claimed "
                "above 1)", primary.weight_decay_gap_fit, primary.weight_decay_gap),
               ("Pre-LN's weight decay", "Pre-LN's 50% lr at the smaller wd ÷ at the larger (secondary)",
                primary.weight_decay_shift_fit, primary.weight_decay_shift),
               ("Peri-LN's weight decay", "Peri-LN's 50% lr at the smaller wd ÷ at the larger (secondary)",
                lambda runs: primary.weight_decay_shift_fit(runs, "peri"),
                lambda runs: primary.weight_decay_shift(runs, "peri")))
TEST_COLUMNS = ["test", "event", "dt", "runs", "events", "ratio", "low", "high", "p", "slope", "direction", "why"]


def number(x, spec=".3g"):
    return "—" if x is None or x != x else format(x, spec)


def with_event(runs, event):
    """The recorded runs with the column `diverged` set to `event` (the column primary's tests read)."""
    got = recorded(runs)
    return got.assign(diverged=event(got).astype(bool))


def tests(runs):
    """tests.csv: claim 6's shift tests per event and Δt: the ratio of the 50% learning rates with its
    95% interval, the p and direction of primary's test, the common slope in ln lr, how many runs
    and events entered; `why` when the test cannot be made."""
    rows = []
    for name, _, fit, test in SHIFT_TESTS:
        for event_name, _, event in EVENTS:
            flagged = with_event(runs, event)
            for dt in sorted(set(flagged.dt), reverse=True):
                mine = flagged[flagged.dt == dt]
                (found, entered), result = fit(mine), test(mine)
                rows.append(dict(test=name, event=event_name, dt=dt, runs=len(entered),
                                 events=int(entered.diverged.sum()),
                                 **{k: (found or {}).get(k, math.nan) for k in ("ratio", "low", "high")},
                                 p=math.nan if result.p is None else result.p,
                                 slope=(found or {}).get("slope", math.nan), direction=result.direction,
                                 why=result.why))
    return pd.DataFrame(rows, columns=TEST_COLUMNS)


def edge(rows, event):
    """stats.logistic_edge of `event` over `rows` (one configuration): (lr, low, high) or None."""
    return stats.logistic_edge(np.log(rows.lr.to_numpy(dtype=float)), event(rows).to_numpy(dtype=float))


def edge_text(found, lrs):
    """"0.31 (0.25–0.37)", "—" without a dose-response; marked where the estimate lies outside the
    grid's learning rates (an extrapolation)."""
    if found is None:
        return "—"
    outside = " (outside the grid)" if not min(lrs) <= found[0] <= max(lrs) else ""
    return f"{found[0]:.2g} ({found[1]:.2g}–{found[2]:.2g}){outside}"


def report(s, runs, tables=None):
    """E3's markdown lines and its table ({"tests.csv": DataFrame}) from `runs`, the grid joined
    to its results (tables.on_grid)."""
    got = recorded(runs)
    lrs = sorted(set(runs.lr))
    lines = ["## E3: divergence as a dose-response", "",
             f"Learning rates {', '.join(fmt_num(lr) for lr in lrs)}; seeds {', '.join(map(str, sorted(set(runs.seed))))}. "
             "Events per run: **diverged** (the primary: it ran away, or it collapsed, ending at or above "
             f"unigram_ce, after a blow-up of its loss at least {fmt_num(e1.BLOW_UP)} nat above its step-0 loss), "
             "**ran away** (./train stopped it, or its last training loss is above its step-0 loss, so it ended "
             "worse than the untrained model), **broke** (diverged or collapsed: ended at or above unigram_ce) and "
             "**failed** (E1's line: not ok, or less than a quarter of the way from unigram_ce to bigram_ce). "
             "docs/protocol.md, *Divergence*, gives the reasons.", ""]
    lines += count_lines(got)
    lines += edge_lines(got, lrs)
    found = tests(runs)
    lines += test_lines(runs, found)
    return lines, {"tests.csv": found}


def count_lines(got):
    """Per configuration and learning rate: the outcomes, the four events, and the medians of the
    largest attention logit and mean |X_L| that ./train logged (whether the logits or the stream ran
    away)."""
    rows = []
    for (ln, dt, wd, lr, depth, precision), mine in groups(got, ["ln", "dt", "wd", "lr", "depth", "precision"]):
        counts = outcome_counts(mine)
        rows.append([short_label(ln, dt, precision, depth), fmt_num(wd), fmt_num(lr), len(mine)] +
                    [counts[k] for k in OUTCOMES] + [int(event(mine).sum()) for _, _, event in EVENTS] +
                    [int(mine.spikes.fillna(0).sum()), number(mine.train_max_attn_logit.median()),
                     number(mine.train_max_mean_abs_L.median())])
    return ["Per configuration and learning rate, over the seeds: the outcomes (docs/train.md §8), the four "
            "events, spikes, and the medians of the largest attention logit and of the largest mean\\|X_L\\| in "
            "./train's stats records. Every run: results.csv.", ""] + \
        table(["configuration", "wd", "lr", "runs"] + list(OUTCOMES) + [name for name, _, _ in EVENTS] +
              ["spikes", "median largest attention logit", "median largest mean\\|X_L\\|"], rows)


def edge_lines(got, lrs):
    """Per configuration (placement, Δt, wd) and event, the 50% learning rate (edge_text)."""
    rows = [[short_label(ln, dt, precision, depth), fmt_num(wd)] +
            [edge_text(edge(mine, event), lrs) for _, _, event in EVENTS]
            for (ln, dt, wd, depth, precision), mine in groups(got, ["ln", "dt", "wd", "depth", "precision"])]
    return ["", "The learning rate at which half the runs have the event: a logistic curve in ln lr per configuration "
            "(Firth's penalised likelihood, finite where the runs separate), P = 1/2 at e^{−α/β}, with its "
            "delta-method 95% interval; — where the fitted slope is not positive (no dose-response).", ""] + \
        table(["configuration", "wd"] + [words for _, words, _ in EVENTS], rows)


def test_lines(runs, found):
    """The shift tests per event: each Δt apart (tests.csv), then both Δt joined as claim 6 joins
    them (primary.per_dt: both the same way)."""
    rows = [[t.test, t.event, fmt_num(t.dt), f"{t.events}/{t.runs}",
             "—" if t.ratio != t.ratio else f"×{t.ratio:.3g} (×{t.low:.3g} to ×{t.high:.3g})",
             number(t.slope), number(t.p, ".2g"), t.direction or f"not tested ({t.why})"] for t in found.itertuples()]
    joined = []
    for name, _, _, test in SHIFT_TESTS:
        for event_name, _, event in EVENTS:
            result = primary.per_dt(with_event(runs, event), test)
            joined.append([name, event_name, number(result.p, ".2g"),
                           result.direction or "not tested", result.effect if result.p is not None else result.why])
    return ["", "### The shift of the 50% learning rate (claim 6)", "",
            "Per Δt, one logistic curve in ln lr per weight decay with one common slope (Firth), the compared runs "
            "shifted along ln lr: the ratio of their 50% learning rates with its delta-method 95% interval, the "
            "common slope per unit of ln lr, and the penalised likelihood-ratio p. "
            + " ".join(f"{name}: {words}." for name, words, _, _ in SHIFT_TESTS) +
            " The primary event is claim 6's test; the other three are secondaries.", ""] + \
        table(["test", "event", "Δt", "events / runs", "ratio (95% CI)", "slope", "p", "direction"], rows) + \
        ["", "Both Δt joined as claim 6 joins them (claimed when both point the claimed way, with the larger p; "
         "against when either points the other way): the direction and p before Holm's adjustment across the "
         "claims.", ""] + table(["test", "event", "p", "direction", "effect"], joined)


def figure(plt, runs, tables, path):
    """divergence.png: the share of runs with each event against the learning rate (log axis), one
    row per event and one column per Δt and weight decay, the placements coloured: the observed
    shares as points (Pre- and Peri-LN nudged apart along lr), the fitted logistic curve as a line
    and its 50% learning rate as a tick on the ½ line."""
    import matplotlib
    from .figures import COLORS, save
    got = recorded(runs)
    columns = [key for key, _ in groups(got, ["dt", "wd"])]
    columns.sort(key=lambda k: (-k[0], k[1]))
    lrs = sorted(set(got.lr)) or [1.0]
    grid = np.exp(np.linspace(math.log(lrs[0]) - 0.3, math.log(lrs[-1]) + 0.3, 200))
    fig, axes = plt.subplots(len(EVENTS), max(1, len(columns)), figsize=(4.4 * max(1, len(columns)),
                             3.3 * len(EVENTS)), squeeze=False, sharex=True, sharey=True)
    nudge = {"pre": 0.97, "peri": 1.03}
    for row, (_, words, event) in enumerate(EVENTS):
        for col, (dt, wd) in enumerate(columns):
            ax = axes[row][col]
            for ln in ("pre", "peri"):
                mine = got[(got.ln == ln) & (got.dt == dt) & (got.wd == wd)]
                if not len(mine):
                    continue
                flags = event(mine).astype(float)
                share = flags.groupby(mine.lr).mean()
                ax.plot(share.index * nudge[ln], share.values, linestyle="none", marker="o", markersize=5,
                        color=COLORS[ln], alpha=0.85)
                fit = stats.firth_logistic(np.column_stack([np.ones(len(mine)), np.log(mine.lr.to_numpy(dtype=float))]),
                                           flags.to_numpy())
                if fit is not None:
                    a, b = fit[0]
                    with np.errstate(over="ignore"):
                        ax.plot(grid, 1 / (1 + np.exp(-(a + b * np.log(grid)))), color=COLORS[ln], linewidth=1.4)
                    if b > 0 and math.log(grid[0]) <= -a / b <= math.log(grid[-1]):
                        ax.plot([math.exp(-a / b)], [0.5], marker="|", markersize=14, color=COLORS[ln])
            ax.axhline(0.5, color="gray", linestyle=":", linewidth=0.8)
            ax.set_xscale("log")
            ax.set_xticks(lrs, [fmt_num(lr) for lr in lrs], fontsize=7)
            ax.set_xticks([], minor=True)
            ax.set_ylim(-0.05, 1.05)
            ax.grid(True, alpha=0.3)
            ax.set_title(f"{words}: Δt = {fmt_num(dt)}, wd = {fmt_num(wd)}", fontsize=9)
            if row == len(EVENTS) - 1:
                ax.set_xlabel("peak learning rate (log scale)")
        axes[row][0].set_ylabel("share of runs")
    handles = [matplotlib.lines.Line2D([], [], color=COLORS[ln], marker="o", label=PLACEMENT_LABEL[ln])
               for ln in ("pre", "peri")]
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=9, frameon=False)
    fig.suptitle(f"{TITLE}: observed shares over the seeds (points) and the logistic curve in ln lr fitted to "
                 "each configuration's runs (Firth; | = its 50% learning rate)", fontsize=11)
    fig.tight_layout()
    save(fig, path)

"""The primary tests of the claims (docs/protocol.md, *The primary tests*), each a function of a
small table with one row per run (or per pair of runs), and the rules that join tests made in
several cells or at several learning rates into one. claim_rows.py builds the tables from the
published experiments; power.py and test_claims build them from simulated runs and call the same
functions.

Every test returns a Primary: its two-sided p (None when it cannot be made, with `why`), the
direction its estimate points and its effect size in words. The directions:

    CLAIMED       the way the claim says
    OPPOSITE      the other way
    CONSTRUCTION  the way the claim says, but no further than algebra alone puts it (claim 3:
                  LayerNorm's scale invariance and the Δt scaling; docs/protocol.md, *What holds by
                  construction*): never a verdict of supported

A placement effect pooled over anything but placement (learning rate, Δt, depth, weight decay) is
estimated within cells of those variables: cell fixed effects (stats.cell_contrast, cells_mean,
cell_slopes), strata whose directions must agree (both), or a range of learning rates over which
the direction must hold everywhere (over_range)."""
from collections import namedtuple

import numpy as np

from . import stats
from .grid import fmt_num
from .tables import two_digits

CLAIMED, OPPOSITE, CONSTRUCTION = "claimed", "opposite", "construction"
Primary = namedtuple("Primary", "p direction effect why", defaults=(None,))


def not_tested(why):
    return Primary(None, None, "—", why)


def direction(claimed):
    return CLAIMED if claimed else OPPOSITE


def ci(est, low, high, spec=".2g"):
    return f"{est:{spec}} (95% CI {low:{spec}} to {high:{spec}})"


def both(parts):
    """A claim that needs several things at once (an intersection-union test): claimed when every
    part points the claimed way, with the largest of their p's; against when any part points the
    other way, with the smallest p of those parts times their number (Bonferroni: "against in at
    least one part" is a union); otherwise (some part only as far as the construction) the
    construction, with the largest p. A part not tested makes the whole not tested."""
    if any(p.p is None for p in parts):
        return next(p for p in parts if p.p is None)
    effect = "; ".join(p.effect for p in parts)
    against = [p for p in parts if p.direction == OPPOSITE]
    if against:
        return Primary(min(1.0, len(parts) * min(p.p for p in against)), OPPOSITE, effect)
    if all(p.direction == CLAIMED for p in parts):
        return Primary(max(p.p for p in parts), CLAIMED, effect)
    return Primary(max(p.p for p in parts), CONSTRUCTION, effect)


def over_range(per_lr):
    """One test made at every learning rate of a range ({lr: Primary}), joined by `both`: the
    verdict follows the whole range. The effect says where the direction holds and where it
    flips (the learning rates of each direction), then each learning rate's effect."""
    if not per_lr:
        return not_tested("no learning rate at which every compared configuration learns")
    for lr, p in per_lr.items():
        if p.p is None:
            return not_tested(f"at lr {fmt_num(lr)}: {p.why}")
    joined = both(list(per_lr.values()))
    where = {d: [fmt_num(lr) for lr, p in per_lr.items() if p.direction == d] for d in (CLAIMED, OPPOSITE, CONSTRUCTION)}
    scope = "; ".join(f"{name} at lr {', '.join(lrs)}" for name, lrs in
                      (("claimed", where[CLAIMED]), ("opposite", where[OPPOSITE]),
                       ("no further than the construction", where[CONSTRUCTION])) if lrs)
    return joined._replace(effect=f"{scope} — " + "; ".join(f"lr {fmt_num(lr)}: {p.effect}"
                                                           for lr, p in per_lr.items()))


def times(x):
    """A ratio as "×" and two significant digits, never in powers of ten (×0.67, ×10, ×104)."""
    return "×" + two_digits(float(f"{x:.12g}"))


def ratio_ci(log_mean, log_low, log_high):
    """"×r (95% CI ×a to ×b)" of a mean log ratio and its interval."""
    return f"{times(np.exp(log_mean))} (95% CI {times(np.exp(log_low))} to {times(np.exp(log_high))})"


def from_test(found, claimed_if_positive, text):
    """A Primary from a (estimate, low, high, p, ...) tuple of stats, claimed when the estimate is
    positive (or negative, with claimed_if_positive False)."""
    est, low, high, p = found[:4]
    return Primary(p, direction((est > 0) == claimed_if_positive), f"{text} {ci(est, low, high)}")


# ---------------------------------------------------------------------------------------------
# Claims 1 and 2: growth inside deep runs (E2; rows: ln, lr, depth and per run `rate`, the slope
# of ln mean|X_l| over l ∈ [L/2, L], and `power_mean`, `power_var`, the slopes of ln mean|X_l| and
# ln entry_var_l against ln l there)

# An exponential keeps its rate per block as L doubles, a power law (linear growth too) halves it:
# the test of claim 1's second part is against the middle, 3/4.
KEPT_RATE = 0.75


def rate_kept(rows):
    """Claim 1: Pre-LN's deep-half rate as L doubles: mean rate at 2L − KEPT_RATE·(mean rate at L),
    each lr's difference weighted alike (Welch–Satterthwaite, stats.combined_means), claimed when
    positive (an exponential keeps its rate per block, linear or power growth halves it)."""
    pre = rows[(rows.ln == "pre") & np.isfinite(rows.rate.astype(float))]
    depths = sorted(set(pre.depth))
    if len(depths) != 2 or depths[1] != 2 * depths[0]:
        return not_tested("Pre-LN's deep runs are not at two depths L and 2L")
    lrs = sorted(set(pre.lr))
    # Each lr's difference weighted alike: Σ_lr (mean rate at 2L − KEPT_RATE·mean rate at L) / lrs.
    terms = [(sign / len(lrs), pre[(pre.lr == lr) & (pre.depth == depth)].rate)
             for lr in lrs for sign, depth in ((1.0, depths[1]), (-KEPT_RATE, depths[0]))]
    kept = stats.combined_means(terms)
    if kept is None:
        return not_tested("fewer than two Pre-LN runs at a depth and lr, or no spread")
    return from_test(kept, True, f"Pre-LN rate at L = {depths[1]} − {KEPT_RATE:g}·rate at L = {depths[0]}")


def rate_contrast(rows):
    """Claim 1's secondary: the deep-half rate Pre- minus Peri-LN within cells of (lr, L) (cell fixed
    effects). Not a test of exponential growth: a linear stream's rate over [L/2, L] is ln 2/(L/2),
    which beats a slow exponential's at a finite L."""
    rows = rows[np.isfinite(rows.rate.astype(float))]
    found = stats.cell_contrast(list(zip(rows.lr, rows.depth)), rows.rate, rows.ln == "pre")
    if found is None:
        return not_tested("no (lr, L) cell with runs of both placements")
    return from_test(found, True, "rate Pre − Peri within (lr, L) per block")


def rate_curvature(rows, ln):
    """Claim 1's secondary inside each run of placement `ln`: the rate over the last quarter of the
    blocks minus the rate over the quarter before it (0 for an exponential, below 0 for a power law:
    ×0.71 for a line), the mean over the runs with its t interval."""
    mine = rows[rows.ln == ln]
    found = stats.mean_test(mine.rate_late - mine.rate_early)
    if found is None:
        return f"fewer than two runs of {ln}"
    return f"{ci(*found[:3])} (p = {found[3]:.2g}, {len(mine)} runs)"


BOUNDS = {"power_mean": 1.0, "power_var": 2.0}
BOUND_NAMES = {"power_mean": "mean\\|X_l\\|", "power_var": "entry_var"}


def pre_outside_bounds(rows):
    """Claim 2, the part the data can refuse: Pre-LN's local powers of l over the deep half against
    those of a linear law (1, for mean|X_l|) and a quadratic one (2, for entry_var), averaged over
    the cells of (lr, L) alike (cells_mean). Claimed when either power lies above its law's (a union:
    twice the smaller p of those above); against when both lie below (the larger of their p's)."""
    pre = rows[rows.ln == "pre"]
    if not len(pre):
        return not_tested("no finished deep Pre-LN run")
    parts = {}
    for column, bound in BOUNDS.items():
        found = stats.cells_mean(list(zip(pre.lr, pre.depth)), pre[column], bound)
        if found is None:
            return not_tested("fewer than two degrees of freedom in Pre-LN's deep runs")
        parts[column] = found
    above = [f for f, (c, b) in zip(parts.values(), BOUNDS.items()) if f[0] > b]
    effect = "; ".join(f"Pre-LN {BOUND_NAMES[c]} ∝ l^"
                       f"{ci(f[0], f[1], f[2])} (a {'linear' if b == 1 else 'quadratic'} law's {b:g})"
                       for (c, b), f in zip(BOUNDS.items(), parts.values()))
    if above:
        return Primary(min(1.0, 2 * min(f[3] for f in above)), CLAIMED, effect)
    return Primary(max(f[3] for f in parts.values()), OPPOSITE, effect)


def peri_within_bounds(rows):
    """Claim 2's Peri-LN half, reported beside the test (its stream is bounded by a linear function of
    L given the learned gains, by construction: docs/protocol.md): its local powers averaged over the
    cells, as pre_outside_bounds."""
    peri = rows[rows.ln == "peri"]
    found = {c: stats.cells_mean(list(zip(peri.lr, peri.depth)), peri[c], b) for c, b in BOUNDS.items()} if len(peri) \
        else {}
    if not found or any(f is None for f in found.values()):
        return "no finished deep Peri-LN run"
    return "; ".join(f"Peri-LN {BOUND_NAMES[c]} ∝ l^{ci(f[0], f[1], f[2])}"
                     for c, f in found.items())


# ---------------------------------------------------------------------------------------------
# Claim 3: Δt < 1 against what the construction gives (E1 pairs of the same placement, lr and
# seed at the two Δt: columns log_mean_abs, log_entry_var = ln X_L(Δt = 1)/X_L(Δt small))

def dt_unit(values, construction, name):
    """One placement at one learning rate and one quantity: the mean log ratio (Student's t) against
    the construction's ln(1/Δt) (or 2·ln(1/Δt) for a variance): claimed above it, the construction
    between 0 and it, against below 0 (Δt < 1 loosens)."""
    above = stats.mean_test(values, construction)
    if above is None:
        return not_tested(f"fewer than two pairs of {name}")
    mean, low, high, p_above = above
    text = f"{name} {ratio_ci(mean, low, high)[:-1]}; construction {times(np.exp(construction))})"
    if mean > construction:
        return Primary(p_above, CLAIMED, text)
    if mean < 0:
        return Primary(stats.mean_test(values, 0.0)[3], OPPOSITE, text)
    return Primary(p_above, CONSTRUCTION, text)


def dt_beyond_construction(pairs, dt_small):
    """Claim 3 at one learning rate: per placement and quantity (dt_unit), both placements and both
    quantities (intersection)."""
    construction = float(np.log(1 / dt_small))
    parts = []
    for ln, label in (("pre", "Pre-LN"), ("peri", "Peri-LN")):
        mine = pairs[pairs.ln == ln]
        parts.append(dt_unit(mine.log_mean_abs, construction, f"{label} mean\\|X_L\\|"))
        parts.append(dt_unit(mine.log_entry_var, 2 * construction, f"{label} entry_var"))
    return both(parts)


# ---------------------------------------------------------------------------------------------
# Claim 4: sensitivity against activations within cells (E1's finished runs: ln, dt, lr,
# mean_abs_L, sens_mean_max)

def usable_slopes(runs):
    keep = runs[(runs.mean_abs_L > 0) & (runs.sens_mean_max > 0) & runs.ln.isin(["pre", "peri"])]
    return keep, np.log(keep.mean_abs_L.to_numpy(dtype=float)), np.log(keep.sens_mean_max.to_numpy(dtype=float))


def within_cell_slopes(runs):
    """Claim 4: ln(largest block sensitivity) = μ_cell + b_pl·ln mean|X_L| with a cell for each
    (placement, Δt, lr): only the seeds' natural variation inside a cell informs b (a learning
    rate that moves both sides cannot); the t-test of b_pre − b_peri = 0, claimed when Pre-LN's
    slope is the larger (Peri-LN's claim predicts b_peri ≈ 0)."""
    keep, x, y = usable_slopes(runs)
    counts = {ln: int((keep.ln == ln).sum()) for ln in ("pre", "peri")}
    if min(counts.values()) < 3:
        return not_tested("fewer than three finished runs of a placement with a sensitivity")
    found = stats.cell_slopes(list(zip(keep.ln, keep.dt, keep.lr)), x, y, (keep.ln == "pre").to_numpy())
    if found is None:
        return not_tested("the within-cell fit is singular")
    d, low, high, p, b_pre, b_peri = found
    return Primary(p, direction(d > 0), f"b_pre − b_peri = {ci(d, low, high)} (b_pre {b_pre:.2g}, b_peri "
                                        f"{b_peri:.2g}; {counts['pre']} and {counts['peri']} runs)")


def pooled_slopes(runs):
    """Claim 4 as the third round tested it (a secondary row): the same slopes fitted over every
    run of a placement at once, so that learning rates with large activations and large
    sensitivities make a slope even where no seed inside a cell shows one (confounded)."""
    keep, x, y = usable_slopes(runs)
    if min((keep.ln == ln).sum() for ln in ("pre", "peri")) < 3:
        return not_tested("fewer than three finished runs of a placement with a sensitivity")
    pre = (keep.ln == "pre").to_numpy(dtype=float)
    fit = stats.ols([np.ones_like(x), pre, x, pre * x], y)
    if fit is None:
        return not_tested("the joint fit is singular")
    d, low, high = stats.coefficient_ci(fit, 3)
    return Primary(float(fit[2][3]), direction(d > 0), f"pooled b_pre − b_peri = {ci(d, low, high)}")


# ---------------------------------------------------------------------------------------------
# Claim 5: noise amplification, Pre- against Peri-LN (E1 pairs of the same Δt, lr and seed:
# log_absolute = ln(absolute amplification Pre / Peri), log_relative likewise)

def amplification_at(pairs, column="log_absolute"):
    """Claim 5 at one learning rate: the mean log ratio Pre/Peri over the Δt cells alike (cells_mean),
    claimed when positive (Peri-LN amplifies less)."""
    found = stats.cells_mean(pairs.dt, pairs[column])
    if found is None:
        return not_tested("fewer than two pairs beyond the Δt cells")
    mean, low, high, p, _ = found
    return Primary(p, direction(mean > 0), f"Pre/Peri {ratio_ci(mean, low, high)[:-1]}, {len(pairs)} pairs)")


def amplification_at_two(pairs, lrs):
    """Claim 5 as the third round tested it (a secondary row): the sign test at the two largest
    learning rates only, their directions agreeing (the learning rates were chosen where the
    placements part, so a direction that flips below them is not seen)."""
    parts = []
    for lr in lrs:
        mine = pairs[pairs.lr == lr]
        k, n = int((mine.log_absolute > 0).sum()), len(mine)
        if not n:
            return not_tested(f"no pair at lr {fmt_num(lr)}")
        parts.append(Primary(stats.sign_test(k, n), direction(2 * k > n), f"lr {fmt_num(lr)}: {k} of {n}"))
    if len({p.direction for p in parts}) > 1:
        return Primary(max(p.p for p in parts), None, "; ".join(p.effect for p in parts))
    return Primary(max(p.p for p in parts), parts[0].direction, "; ".join(p.effect for p in parts))


# ---------------------------------------------------------------------------------------------
# Claim 6: divergence as a dose-response (E3's runs: ln, dt, wd, lr and `diverged`)

def dose_response(runs, shifted, moderator=None):
    """stats.logistic_shift of `runs`' divergence (the column `diverged`) on ln lr, an intercept per
    weight decay, the runs flagged `shifted` moved (with `moderator`, the change of that shift)."""
    return stats.logistic_shift(np.log(runs.lr.to_numpy(dtype=float)), runs.diverged.to_numpy(dtype=float),
                                np.asarray(shifted), runs.wd, moderator)


def divergence_shift_fit(runs):
    """Claim 6a's fit in one Δt: Peri-LN's runs shifted against Pre-LN's (dose_response); with the
    runs it took."""
    return dose_response(runs, (runs.ln == "peri").to_numpy()), runs


def weight_decay_gap_fit(runs):
    """Claim 6b's fit in one Δt: Peri-LN's shift, moderated by the smaller weight decay; None without
    two weight decays."""
    wds = sorted(set(runs.wd))
    if len(wds) != 2:
        return None, runs
    return dose_response(runs, (runs.ln == "peri").to_numpy(), (runs.wd == wds[0]).to_numpy()), runs


def weight_decay_shift_fit(runs, ln="pre"):
    """One placement's runs at the smaller weight decay shifted against the larger; None without two."""
    mine = runs[runs.ln == ln]
    wds = sorted(set(mine.wd))
    if len(wds) != 2:
        return None, mine
    return stats.logistic_shift(np.log(mine.lr.to_numpy(dtype=float)), mine.diverged.to_numpy(dtype=float),
                                (mine.wd == wds[0]).to_numpy()), mine


def shift_primary(found, claimed_above, text):
    """A Primary of a dose-response fit: claimed when its ratio is above 1 (or below, with claimed_above
    False), the effect `text` followed by the ratio and its interval."""
    if found is None:
        return not_tested("no dose-response: no fit, or its slope in ln lr is not positive")
    return Primary(found["p"], direction((found["ratio"] > 1) == claimed_above),
                   text.format(ratio=times(found["ratio"])) + f" (95% CI {times(found['low'])} to {times(found['high'])})")


def divergence_shift(runs):
    """Claim 6a in one Δt: the 50% divergence learning rate of Peri-LN against Pre-LN's (a logistic
    curve in ln lr, one per weight decay, one slope), claimed when Peri-LN's is the larger."""
    return shift_primary(divergence_shift_fit(runs)[0], True, "Peri-LN's 50% lr {ratio} Pre-LN's")


def weight_decay_gap(runs):
    """Claim 6b in one Δt: how much larger Peri-LN's advantage (its 50% divergence lr over Pre-LN's) is
    without weight decay than with it — the placement × weight decay term of the logistic curve;
    claimed when larger without weight decay (Pre-LN diverges at smaller lrs than Peri-LN, more so
    without weight decay). A weight decay that moves both placements alike moves neither side of it."""
    wds = sorted(set(runs.wd))
    if len(wds) != 2:
        return not_tested("the runs are not at two weight decays")
    return shift_primary(weight_decay_gap_fit(runs)[0], True,
                         f"Peri-LN's advantage at wd {fmt_num(wds[0])} {{ratio}} its advantage at wd {fmt_num(wds[1])}")


def weight_decay_shift(runs, ln="pre"):
    """Secondary to claim 6b, in one Δt: placement `ln`'s 50% divergence learning rate without weight
    decay against with it, claimed when it is the smaller."""
    found, mine = weight_decay_shift_fit(runs, ln)
    wds = sorted(set(mine.wd))
    if len(wds) != 2:
        return not_tested("the runs are not at two weight decays")
    return shift_primary(found, False, f"{'Pre-LN' if ln == 'pre' else 'Peri-LN'}'s 50% lr at wd {fmt_num(wds[0])} "
                                       f"{{ratio}} its lr at wd {fmt_num(wds[1])}")


def per_dt(runs, test):
    """A test made in each Δt stratum of `runs` apart, both strata the same way (both)."""
    dts = sorted(set(runs.dt), reverse=True)
    if len(dts) < 2:
        return not_tested("fewer than two Δt")
    parts = [test(runs[runs.dt == dt]) for dt in dts]
    return both([p._replace(effect=f"Δt = {fmt_num(dt)}: {p.effect}") for dt, p in zip(dts, parts)])


# ---------------------------------------------------------------------------------------------
# Claim 7: best on every metric (E1)

def best_everywhere(reference, others, lower):
    """Claim 7 at one learning rate: `reference` ({metric: values over the seeds}) against each of
    `others` ({label: {metric: values}}) by Welch's test, per metric; `lower` {metric: lower is
    better}. The intersection over every metric and competitor; the effect names the closest
    competitor (or the strongest one against)."""
    parts = []
    for label, theirs in others.items():
        for metric, lower_better in lower.items():
            test = stats.welch(reference.get(metric, []), theirs.get(metric, []))
            if test is not None:
                parts.append(Primary(test[1], direction((test[0] < 0) == lower_better), f"{metric} against {label}"))
    if not parts:
        return not_tested("no comparison with two seeds on each side")
    joined = both(parts)
    against = [p for p in parts if p.direction == OPPOSITE]
    decisive = min(against, key=lambda p: p.p) if against else max(parts, key=lambda p: p.p)
    return joined._replace(effect=("worse on " if against else "better on all; closest: ") +
                           f"{decisive.effect} (p = {decisive.p:.2g})")
